"""One answer per question on the command line's side (DESIGN.md): each thing the verbs do
alike is defined once, in trainperf.cli's shared modules (common, flag_types, store_access)
or the library, and the verbs use it.

The grep-style tests read the source: a second definition written by hand in a verb fails
here, not only when its message drifts.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

import trainperf
from trainperf.cli.flag_types import BadInput
from trainperf.cli.store_access import store_errors
from trainperf.store.access import StoreError, StoreUnavailable
from trainperf.store.query import FilterError

SRC = Path(trainperf.__file__).parent
CLI = SRC / "cli"


def _hits(pattern: str, root: Path) -> list[str]:
    """``file:line`` of every line under ``root`` matching ``pattern``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(pattern, line):
                found.append(f"{path.relative_to(SRC)}:{number}")
    return found


def _files(hits: list[str]) -> set[str]:
    return {hit.rsplit(":", 1)[0] for hit in hits}


# --- store errors: one translation into a verb's message ----------------------------------


def test_store_errors_are_caught_only_by_store_errors_and_main():
    hits = _hits(r"except \(?StoreError|except store_write_errors\(\)", CLI)
    # store_access.store_errors for the verbs; main() for what a verb let through (exit
    # codes); store_access.store_or_save_aside, which saves a finished measurement aside
    # instead of giving a message; train's Progress, which keeps a training run going
    # while its progress cannot be written (its end is saved aside)
    assert _files(hits) == {"cli/store_access.py", "cli/__init__.py", "cli/train.py"}, hits
    assert len(hits) == 4, hits
    assert _files(_hits(r"sqlite3\.DatabaseError", CLI)) == {"cli/store_access.py"}


@pytest.mark.parametrize(
    ("error", "prefix", "message"),
    [
        (StoreError("not a database"), "cannot read x.db", "cannot read x.db: not a database"),
        (sqlite3.DatabaseError("malformed"), "cannot read x.db", "cannot read x.db: malformed"),
        (StoreError("--db is a directory"), None, "--db is a directory"),
        (FilterError("no system 'z'"), "cannot read x.db", "no system 'z'"),
    ],
)
def test_store_errors_become_one_line_of_bad_input(error, prefix, message):
    with pytest.raises(BadInput) as caught, store_errors(prefix):
        raise error
    assert caught.value.format_message() == message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_store_errors_lets_an_unavailable_store_through_to_main():
    with pytest.raises(StoreUnavailable), store_errors("cannot read x.db"):
        raise StoreUnavailable(Path("x.db"), "LOCKED", 1.0)


# --- opening the store: reading_store to read, writing_store (after its check) to write ----


def test_verbs_open_the_store_only_through_common():
    opened = _hits(r"\bStore(\.read_only)?\(", CLI)
    assert _files(opened) == {"cli/store_access.py"}, opened
    assert len(opened) == 2, opened  # reading_store and writing_store
    checked = _hits(r"\bcheck_(writable|readable)\(", CLI)
    assert _files(checked) == {"cli/store_access.py"}, checked
    assert len(checked) == 2, checked  # check_db_writable and check_db_readable


def test_writing_store_makes_and_writes_the_database(tmp_path):
    from trainperf.cli.store_access import check_db_writable, writing_store

    db = tmp_path / "results.db"
    check_db_writable(db)
    assert not db.exists()  # the check writes nothing
    with writing_store(db) as store:
        store.add_system({"fingerprint": "f" * 16, "hostname": "h"})
    assert db.is_file()


def test_check_db_writable_is_bad_input_for_a_directory(tmp_path):
    from trainperf.cli.store_access import check_db_writable

    with pytest.raises(BadInput):
        check_db_writable(tmp_path)


# --- job folders: runner.job_directory, which the stale-folder cleanup knows ----------------

# Temporary folders made elsewhere, and why they are no job folder: the staging and
# retired copies of a data set sit beside it and are renamed or removed by the same call.
NOT_JOB_FOLDERS = {"datasets/sample.py"}


def test_job_folders_are_made_only_by_job_directory():
    made = _hits(r"\b(mkdtemp|TemporaryDirectory)\(", SRC)
    assert _files(made) - NOT_JOB_FOLDERS == {"launch/runner.py"}, made
    assert len([hit for hit in made if hit.startswith("launch/runner.py")]) == 1, made
    users = _files(_hits(r"\bjob_directory\(\)", SRC)) - {"launch/runner.py"}
    assert users >= {
        "cli/micro.py",
        "cli/inspect.py",
        "cli/train.py",
        "launch/maxbatch.py",
        "launch/equivalence.py",
        "launch/sweep.py",
    }, users


def test_a_job_folder_names_its_owner_and_is_removed_at_the_end(tmp_path, monkeypatch):
    import json
    import tempfile

    from trainperf.launch.runner import (
        OWNER_FILE,
        TEMP_PREFIX,
        job_directory,
        remove_stale_directories,
    )

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with job_directory() as folder:
        assert folder.parent == tmp_path and folder.name.startswith(TEMP_PREFIX)
        owner = json.loads((folder / OWNER_FILE).read_text())
        assert owner["pid"] > 0 and owner["host"]
        assert remove_stale_directories() == []  # its owner lives: kept
    assert not folder.exists()


def test_the_folder_of_a_killed_trainperf_is_removed_by_the_next_one(tmp_path, monkeypatch):
    import json
    import socket
    import subprocess
    import sys
    import tempfile

    from trainperf.launch.runner import OWNER_FILE, TEMP_PREFIX, job_directory

    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    left = tmp_path / f"{TEMP_PREFIX}left"
    left.mkdir()
    owner = {"host": socket.gethostname(), "pid": int(ended.stdout), "pid_started": 0.0}
    (left / OWNER_FILE).write_text(json.dumps(owner))
    foreign = tmp_path / f"{TEMP_PREFIX}no-owner"  # another tool's: not ours to judge
    foreign.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with job_directory():
        assert not left.exists()
        assert foreign.is_dir()
