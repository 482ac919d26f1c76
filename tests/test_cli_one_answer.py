"""One answer per question on the command line's side (DESIGN.md): each thing the verbs do
alike is defined once, in trainperf.cli.common or the library, and the verbs use it.

The grep-style tests read the source: a second definition written by hand in a verb fails
here, not only when its message drifts.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

import trainperf
from trainperf.cli.common import BadInput, store_errors
from trainperf.store import StoreError, StoreUnavailable
from trainperf.store_query import FilterError

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
    hits = _hits(r"except \(?StoreError", CLI)
    # common.store_errors for the verbs; main() for what a verb let through (exit codes)
    assert _files(hits) == {"cli/common.py", "cli/__init__.py"}, hits
    assert len(hits) == 2, hits
    assert _files(_hits(r"sqlite3\.DatabaseError", CLI)) == {"cli/common.py"}


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
    assert _files(opened) == {"cli/common.py"}, opened
    assert len(opened) == 2, opened  # reading_store and writing_store
    checked = _hits(r"\bcheck_(writable|readable)\(", CLI)
    assert _files(checked) == {"cli/common.py"}, checked
    assert len(checked) == 2, checked  # check_db_writable and check_db_readable


def test_writing_store_makes_and_writes_the_database(tmp_path):
    from trainperf.cli.common import check_db_writable, writing_store

    db = tmp_path / "results.db"
    check_db_writable(db)
    assert not db.exists()  # the check writes nothing
    with writing_store(db) as store:
        store.add_system({"fingerprint": "f" * 16, "hostname": "h"})
    assert db.is_file()


def test_check_db_writable_is_bad_input_for_a_directory(tmp_path):
    from trainperf.cli.common import check_db_writable

    with pytest.raises(BadInput):
        check_db_writable(tmp_path)
