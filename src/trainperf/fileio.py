"""Files written whole or not at all: the one atomic write of trainperf.

A reader (the runner polling a worker's result, a browser on a report, a user on an export)
sees the old file or the whole new one, never a part: the text goes to a temporary file
beside the target, is flushed to disk, and replaces the target with ``os.replace``, which
is atomic on POSIX within one file system (rename(2)).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` through a temporary file
    beside it. An existing file keeps its permission bits; a new one gets what ``open``
    would give it (mkstemp's own mode is owner-only). The temporary file is removed when
    the write fails."""
    path = Path(path)
    mode = _mode_for(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data.encode("utf-8") if isinstance(data, str) else data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _mode_for(path: Path) -> int:
    """The permission bits ``path`` has, or those a new file gets under the umask."""
    if path.exists():
        return stat.S_IMODE(path.stat().st_mode)
    umask = os.umask(0)  # reading the umask means setting it: put it straight back
    os.umask(umask)
    return 0o666 & ~umask
