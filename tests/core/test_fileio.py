import os
import re
import stat
from pathlib import Path

import pytest

from trainperf.core import fileio
from trainperf.core.fileio import write_atomic


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
    root = Path(fileio.__file__).parent.parent
    writers = sorted(
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if re.search(r"os\.replace\(|mkstemp\(|\.replace\(\w*path\)", path.read_text())
    )
    assert writers == ["core/fileio.py"]


def test_write_atomic_never_renames_over_a_fifo_or_a_symlink(tmp_path):
    """A rename replaces whatever has the name: as root, an export to /dev/full replaced
    the device. A FIFO and a symlink stand in for devices here."""
    fifo, target, link = tmp_path / "fifo", tmp_path / "theirs", tmp_path / "link"
    os.mkfifo(fifo)
    target.write_text("theirs")
    link.symlink_to(target)
    with pytest.raises(fileio.FileKindError, match="fifo: is a FIFO, not a regular file"):
        write_atomic(fifo, "x")
    with pytest.raises(fileio.FileKindError, match="link: is a symlink"):
        write_atomic(link, "x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and link.is_symlink()
    assert target.read_text() == "theirs"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "link", "theirs"]


def test_check_output_says_what_a_path_is_in_one_line(tmp_path):
    fifo, target, link, dangling = (tmp_path / n for n in ("fifo", "t", "link", "dangling"))
    os.mkfifo(fifo)
    target.write_text("t")
    link.symlink_to(target)
    dangling.symlink_to(tmp_path / "none")
    device = tmp_path / "null"
    device.symlink_to("/dev/null")
    assert fileio.check_output(tmp_path / "new", "--out") == tmp_path / "new"
    assert fileio.check_output(target, "--out") == target
    assert fileio.check_output(link, follow_symlinks=True) == target
    refusals = {
        fifo: f"--out {fifo}: is a FIFO, not a regular file",
        tmp_path: f"--out {tmp_path}: is a directory: give a file path",
        link: f"--out {link}: is a symlink (to {target}): give the file itself or give -F",
        dangling: f"--out {dangling}: is a dangling symlink (to {tmp_path / 'none'})",
        tmp_path / "no" / "x": f"--out {tmp_path / 'no' / 'x'}: directory {tmp_path / 'no'} does",
    }
    for path, message in refusals.items():
        with pytest.raises(fileio.FileKindError) as info:
            fileio.check_output(path, "--out", follow_flag="-F")
        assert str(info.value).startswith(message) and "\n" not in str(info.value)
    with pytest.raises(fileio.FileKindError, match="points to /dev/null, a character device"):
        fileio.check_output(device, follow_symlinks=True)


def test_check_input_looks_without_opening(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(fileio.FileKindError, match="is a FIFO, not a regular file"):
        fileio.check_input(fifo)  # opening it would block: no writer
    with pytest.raises(fileio.FileKindError, match="is a character device"):
        fileio.check_input("/dev/null", "import")
    with pytest.raises(fileio.NoSuchFile, match="no such file"):
        fileio.check_input(tmp_path / "none")
    (tmp_path / "file").write_text("x")
    fileio.check_input(tmp_path / "file")
