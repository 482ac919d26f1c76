"""Verbs that only read a database write nothing: not into it, not beside it
(``Store.copy_of``, ``store.read_only_uri``)."""

import hashlib
import os
import sqlite3

import pytest

from trainperf.store.access import StoreError, read_only_uri
from trainperf.store.database import Store

READERS = [
    ["results"],
    ["results", "--json"],
    ["compare"],
    ["pareto"],
    ["scaling"],
]


def snapshot(directory):
    """Every file of ``directory`` with the hash of its bytes."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.iterdir())
        if p.is_file()
    }


@pytest.fixture
def db(report_db, tmp_path):
    """A closed database alone in its directory (no -wal or -shm beside it)."""
    path = tmp_path / "data" / "r.db"
    path.parent.mkdir()
    path.write_bytes(report_db.read_bytes())
    return path


@pytest.mark.parametrize("args", READERS + [["report", "--out", "REPORT"], ["export", "OUT"]])
def test_reading_verbs_leave_the_database_and_its_directory_as_they_were(
    db, tmp_path, run_cli, args
):
    args = [str(tmp_path / "out" / "x.json") if a == "OUT" else a for a in args]
    args = [str(tmp_path / "report") if a == "REPORT" else a for a in args]
    (tmp_path / "out").mkdir()
    before = snapshot(db.parent)
    code, _, err = run_cli([*args, "--db", db])
    assert code == 0, err
    assert snapshot(db.parent) == before  # no -wal, no -shm, not a byte changed


@pytest.mark.parametrize("args", READERS + [["report"], ["export", "x.json"]])
def test_an_empty_file_is_bad_input_and_stays_empty(tmp_path, run_cli, args, monkeypatch):
    monkeypatch.chdir(tmp_path)
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    code, out, err = run_cli([*args, "--db", empty])
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "empty" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"]
    assert empty.stat().st_size == 0


def test_a_database_in_use_is_read_with_what_its_writer_committed(db):
    with Store(db) as writer:  # open: its -wal holds what it wrote, not yet checkpointed
        writer.start_sweep({"fingerprint": "new", "hostname": "h"})
        assert (db.parent / "r.db-wal").exists()
        with Store.copy_of(db) as reader:
            assert "new" in {s["fingerprint"] for s in reader.systems()}


def test_an_older_database_is_read_migrated_in_memory_and_left_as_it_was(db, run_cli):
    connection = sqlite3.connect(db)
    connection.execute("DROP TABLE leases")
    connection.execute("ALTER TABLE sweeps DROP COLUMN doctor_json")  # schema 9's
    connection.execute("PRAGMA user_version = 6")
    connection.commit()
    connection.close()
    before = snapshot(db.parent)
    code, out, err = run_cli(["results", "--json", "--db", db])
    assert code == 0 and '"results"' in out, err
    assert snapshot(db.parent) == before  # still schema 6: migrated in memory only


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads and writes any directory")
def test_a_database_in_a_read_only_directory_can_be_read(db, run_cli):
    db.parent.chmod(0o555)
    try:
        code, _, err = run_cli(["results", "--db", db])
    finally:
        db.parent.chmod(0o755)
    assert code == 0, err


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"", "empty"), (b"not sqlite at all" * 10, "not SQLite")],
)
def test_copy_of_refuses_what_is_not_a_database(tmp_path, content, message):
    path = tmp_path / "x.db"
    path.write_bytes(content)
    with pytest.raises(StoreError, match=message):
        Store.copy_of(path)
    assert path.read_bytes() == content


def test_a_closed_database_is_read_immutable_one_in_use_through_its_wal(db):
    assert read_only_uri(db).endswith("?immutable=1")  # makes no file: any directory will do
    with Store(db):
        assert read_only_uri(db).endswith("?mode=ro")
