import sqlite3

import pytest

from trainperf.store import SCHEMA_VERSION, Store, StoreError, check_writable

SYSTEM = {"fingerprint": "abc123", "hostname": "node1", "cpu": {"model": "X"}, "gpus": []}


def result(model="resnet18", status="ok", **metrics):
    return {
        "result_schema": 1,
        "status": status,
        "case": {"model": model, "batch_size": 4, "precision": "fp32", "device": "cpu"},
        "device": {"type": "cpu", "name": "X"},
        "metrics": metrics,
        "error": None if status == "ok" else {"type": status, "message": "boom"},
    }


def test_round_trip_and_schema_version(tmp_path):
    path = tmp_path / "r.db"
    with Store(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        run = store.start_run(SYSTEM, label="t")
        store.add_result(
            run, SYSTEM["fingerprint"], result(samples_per_s_median=12.5, step_s=[0.1, 0.2])
        )
        store.add_result(run, SYSTEM["fingerprint"], result("bert-squad", "oom"))
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    with Store(path) as store:
        rows = store.results()
        assert [r["case"]["model"] for r in rows] == ["resnet18", "bert-squad"]
        assert rows[0]["metrics"] == {"samples_per_s_median": 12.5, "step_s": [0.1, 0.2]}
        assert rows[0]["system"] == SYSTEM
        assert rows[1]["status"] == "oom" and rows[1]["error"]["message"] == "boom"
        assert [r["case"]["model"] for r in store.results("bert-squad")] == ["bert-squad"]


def test_same_system_is_stored_once(tmp_path):
    with Store(tmp_path / "r.db") as store:
        store.start_run(SYSTEM)
        store.start_run(SYSTEM)
        assert store.db.execute("SELECT count(*) FROM systems").fetchone()[0] == 1
        assert store.db.execute("SELECT count(*) FROM runs").fetchone()[0] == 2


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "r.db"
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(StoreError, match="newer"):
        Store(path)


def test_check_writable(tmp_path):
    check_writable(tmp_path / "new.db")  # parent exists: fine, nothing created
    assert not (tmp_path / "new.db").exists()
    with pytest.raises(StoreError, match="does not exist"):
        check_writable(tmp_path / "missing" / "x.db")
    with pytest.raises(StoreError, match="is a directory"):
        check_writable(tmp_path)
    text = tmp_path / "notes.txt"
    text.write_text("hello, not a database")
    with pytest.raises(StoreError, match="not an SQLite"):
        check_writable(text)
    with pytest.raises(StoreError, match="does not exist"):
        check_writable(text / "x.db")
