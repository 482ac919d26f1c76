"""Files written whole or not at all, and only where a user means: the one atomic write of
trainperf, and the one answer to what a path given to read or write may be.

A reader (the runner polling a worker's result, a browser on a report, a user on an export)
sees the old file or the whole new one, never a part: the text goes to a temporary file
beside the target, is flushed to disk, and replaces the target with ``os.replace``, which
is atomic on POSIX within one file system (rename(2)).

A rename replaces whatever has the target's name: a device, a FIFO or a symlink would
become a plain file (as root, an export to ``/dev/full`` replaced the device). So a path to
write must be absent or a regular file (``check_output``; a symlink only when the user asks
to write where it points), and ``write_atomic`` itself never renames over anything else. A
path to read is looked at with ``stat`` before anything opens it (``check_input``): opening
a FIFO blocks until a writer comes, and reading ``/dev/zero`` never ends.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

_KINDS = (
    (stat.S_ISREG, "a file"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISLNK, "a symlink"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class FileKindError(OSError):
    """A path trainperf will not read or write as a file. ``str()`` is one line: ``name``
    (the flag or verb that gave the path, if any), the path, and ``reason``."""

    def __init__(self, path: str | os.PathLike[str], reason: str, name: str = "") -> None:
        self.path, self.reason, self.name = Path(path), reason, name
        super().__init__(f"{name} {path}: {reason}" if name else f"{path}: {reason}")


class NoSuchFile(FileKindError):
    """Nothing at the path to read (callers may say what that means for them)."""


def kind(mode: int) -> str:
    """What a ``st_mode`` is, in words: "a file", "a FIFO", "a character device", ..."""
    return next((words for test, words in _KINDS if test(mode)), "not a file")


def check_input(path: str | os.PathLike[str], name: str = "") -> None:
    """Raise ``FileKindError`` unless ``path`` (symlinks followed) is a regular file, found
    out with ``stat`` alone; ``NoSuchFile`` when nothing is there."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.islink(path):
            raise FileKindError(path, _dangling(path), name) from None
        raise NoSuchFile(path, "no such file", name) from None
    except OSError as exc:  # a parent that is a file, a symlink loop, no permission
        raise FileKindError(path, exc.strerror or str(exc), name) from None
    if stat.S_ISDIR(mode):
        raise FileKindError(path, "is a directory", name)
    if not stat.S_ISREG(mode):
        raise FileKindError(path, f"is {kind(mode)}, not a regular file", name)


def check_output(
    path: str | os.PathLike[str],
    name: str = "",
    *,
    follow_symlinks: bool = False,
    follow_flag: str | None = None,
) -> Path:
    """The file to write for ``path``: ``path`` itself when it is absent (in a directory
    that exists) or a regular file; with ``follow_symlinks``, the regular file a symlink
    points to. Anything else raises ``FileKindError``: a directory, a device, a FIFO, a
    socket, a dangling symlink, and a symlink not to be followed (``follow_flag``: the flag
    with which the user asks to follow, named in the message)."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise FileKindError(path, f"directory {parent} does not exist", name)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return path
    if stat.S_ISLNK(mode):
        if not os.path.exists(path):
            raise FileKindError(path, _dangling(path), name)
        if not follow_symlinks:
            ask = f" or give {follow_flag} to write there" if follow_flag else ""
            raise FileKindError(
                path, f"is a symlink (to {os.readlink(path)}): give the file itself{ask}", name
            )
        target = Path(os.path.realpath(path))
        mode = os.stat(target).st_mode
        if not stat.S_ISREG(mode):
            raise FileKindError(path, f"points to {target}, {kind(mode)}, not a regular file", name)
        return target
    if stat.S_ISDIR(mode):
        raise FileKindError(path, "is a directory: give a file path", name)
    if not stat.S_ISREG(mode):
        raise FileKindError(path, f"is {kind(mode)}, not a regular file", name)
    return path


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` through a temporary file
    beside it (``atomic_writer``)."""
    with atomic_writer(path) as out:
        out.write(data.encode("utf-8") if isinstance(data, str) else data)


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike[str], *, text: bool = False) -> Iterator[IO[Any]]:
    """A file to write ``path`` with, piece by piece (an export of any size in bounded
    memory): a temporary file beside it that replaces ``path`` when the block ends well,
    flushed to disk first, and is removed when it does not. An existing file keeps its
    permission bits; a new one gets what ``open`` would give it (mkstemp's own mode is
    owner-only). ``FileKindError`` when something other than a regular file has the name:
    it is never replaced (callers check first with ``check_output``; this is the last
    word). ``text``: the file takes text, written as UTF-8, line ends as given."""
    path = Path(path)
    mode = _mode_for(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            if text:
                writer = io.TextIOWrapper(out, encoding="utf-8", newline="")
                yield writer
                writer.flush()
                writer.detach()  # ``out`` stays open, closed below
            else:
                yield out
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        _refuse_special(path)  # just before the rename: the narrowest window
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _refuse_special(path: Path) -> None:
    """``FileKindError`` unless ``path`` is absent or a regular file (not followed)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise FileKindError(path, f"is {kind(mode)}, not a regular file: not replaced")


def _dangling(path: str | os.PathLike[str]) -> str:
    return f"is a dangling symlink (to {os.readlink(path)})"


def _mode_for(path: Path) -> int:
    """The permission bits ``path`` has, or those a new file gets under the umask."""
    if path.is_file():
        return stat.S_IMODE(path.stat().st_mode)
    umask = os.umask(0)  # reading the umask means setting it: put it straight back
    os.umask(umask)
    return 0o666 & ~umask
