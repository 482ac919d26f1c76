import os
import re
import stat
from pathlib import Path

import pytest

from trainperf import fileio
from trainperf.fileio import write_atomic


def test_text_and_bytes_replace_the_file_and_leave_no_temporary(tmp_path):
    path = tmp_path / "out.json"
    write_atomic(path, "héllo\n")
    assert path.read_bytes() == "héllo\n".encode()
    write_atomic(str(path), b"\x00\x01")
    assert path.read_bytes() == b"\x00\x01"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_modes_are_those_open_would_give_or_the_old_file_had(tmp_path):
    umask = os.umask(0o027)
    try:
        write_atomic(tmp_path / "new", "x")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o640  # not mkstemp's 0o600
    old = tmp_path / "old"
    old.write_text("before")
    old.chmod(0o604)
    write_atomic(old, "after")
    assert stat.S_IMODE(old.stat().st_mode) == 0o604 and old.read_text() == "after"


def test_a_failed_write_keeps_the_old_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "index.html"
    path.write_text("old page")

    def refuse(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fileio.os, "replace", refuse)
    with pytest.raises(OSError, match="No space"):
        write_atomic(path, "new page")
    assert path.read_text() == "old page"
    assert [p.name for p in tmp_path.iterdir()] == ["index.html"]


def test_trainperf_writes_files_atomically_in_one_place():
    """A second temporary-file-and-rename would be a second set of rules for readers."""
    root = Path(fileio.__file__).parent
    writers = sorted(
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if re.search(r"os\.replace\(|mkstemp\(|\.replace\(\w*path\)", path.read_text())
    )
    assert writers == ["fileio.py"]
