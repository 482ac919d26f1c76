import re
import sqlite3
from pathlib import Path

import pytest

from trainperf.case.stored import ADDED_CASE_FIELDS
from trainperf.store import database as store_module
from trainperf.store.access import StoreError
from trainperf.store.checks import check_writable
from trainperf.store.database import SCHEMA_VERSION, Store

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
        run = store.start_sweep(SYSTEM, label="t")
        store.add_result(
            run, SYSTEM["fingerprint"], result(samples_per_s_median=12.5, step_s=[0.1, 0.2])
        )
        store.add_result(run, SYSTEM["fingerprint"], result("bert-squad", "oom"))
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    with Store(path) as store:
        rows = store.results()
        assert [r["case"]["model"] for r in rows] == ["resnet18", "bert-squad"]
        assert rows[0]["metrics"] == {"samples_per_s_median": 12.5, "step_s": [0.1, 0.2]}
        assert rows[0]["system"] == SYSTEM and rows[0]["runs"] == []
        assert rows[1]["status"] == "oom" and rows[1]["error"]["message"] == "boom"
        assert [r["case"]["model"] for r in store.results("bert-squad")] == ["bert-squad"]


def test_same_system_is_stored_once(tmp_path):
    with Store(tmp_path / "r.db") as store:
        store.start_sweep(SYSTEM)
        store.start_sweep(SYSTEM)
        assert store.db.execute("SELECT count(*) FROM systems").fetchone()[0] == 1
        assert store.db.execute("SELECT count(*) FROM sweeps").fetchone()[0] == 2


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
    with pytest.raises(StoreError, match="not SQLite"):
        check_writable(text)
    with pytest.raises(StoreError, match="does not exist"):
        check_writable(text / "x.db")


def write_old_database(path, scripts, version, results, extra=()):
    """A database as an older trainperf (schema ``version``, made by ``scripts``) left it: one
    system 'abc123', one sweep 'r1' with an ok result per ``(model, case_json)``, then the
    ``extra`` statements. The migration tests start from one."""
    db = sqlite3.connect(path)
    for script in scripts:
        db.executescript(script)
    db.execute("INSERT INTO systems VALUES ('abc123', 'node1', '{}', 'then')")
    db.execute("INSERT INTO runs VALUES ('r1', 'then', 'abc123', NULL)")
    for model, case_json in results:
        db.execute(
            "INSERT INTO results (run_id, system, created_at, model, status, result_schema,"
            " case_json, device_json, metrics_json) VALUES"
            " ('r1', 'abc123', 'then', ?, 'ok', 1, ?, 'null', '{}')",
            (model, case_json),
        )
    for statement in extra:
        db.execute(statement)
    db.execute(f"PRAGMA user_version = {version}")
    db.commit()
    db.close()


def test_version_1_database_is_migrated_keeping_its_rows(tmp_path):
    from trainperf.store.schema import SCHEMA_V1

    path = tmp_path / "old.db"
    write_old_database(path, [SCHEMA_V1], 1, [("resnet18", '{"model": "resnet18"}')])
    with Store(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        (row,) = store.results()
        # A case stored before the fields added since (framework, FSDP, checkpointing)
        # reads with the values every case had then.
        expected = {"model": "resnet18", "runs": 1} | ADDED_CASE_FIELDS
        assert row["case"] == expected and row["suite_version"] is None
        assert row["sweep_id"] == "r1" and len(row["runs"]) == 1  # the one process it was
        assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_finished_cases_of_a_suite_version(tmp_path):
    with Store(tmp_path / "r.db") as store:
        run = store.start_sweep(SYSTEM)
        fp = SYSTEM["fingerprint"]
        store.add_result(run, fp, result(), suite=("s", "v1"), case_key="k1")
        store.add_result(run, fp, result(status="oom"), suite=("s", "v1"), case_key="k2")
        store.add_result(run, fp, result(), suite=("s", "v2"), case_key="k3")
        store.add_result(run, fp, result())  # a run from flags: never matched
        done = store.finished(fp, "v1")
        assert set(done) == {"k1"} and done["k1"]["suite"] == "s"
        assert store.finished("other-system", "v1") == {}


def test_max_batch_round_trip(tmp_path):
    with Store(tmp_path / "r.db") as store:
        store.add_system(SYSTEM)
        assert store.max_batch("abc123", "key") is None
        store.add_max_batch("abc123", "key", {"model": "m"}, 48, [{"batch_size": 64}], "n")
        store.add_max_batch("abc123", "key", {"model": "m"}, 40, [], None)
        found = store.max_batch("abc123", "key")
        assert found["batch_size"] == 40  # the newest search wins


def test_train_run_starts_running_and_keeps_what_an_update_leaves_out(tmp_path):
    with Store(tmp_path / "r.db") as store:
        first = store.add_train_run(SYSTEM, {"model": "cifarnet", "seed": 1}, "key-a")
        store.add_train_run(SYSTEM, {"model": "cifarnet", "seed": 2}, "key-b")
        (started,) = store.train_runs("key-a")
        assert started["status"] == "running" and started["evaluations"] == []
        assert started["metrics"] == {} and started["error"] is None
        assert started["system"] == SYSTEM
        evaluations = [{"epoch": 1, "top1": 0.5, "time_s": 2.0}]
        store.update_train_run(first, evaluations, metrics={"epochs": 1})
        store.update_train_run(
            first, evaluations * 2, status="ok", reached=True, time_to_target_s=4.0
        )
        done = store.train_run(str(first))
        assert done["status"] == "ok" and done["reached"] and done["time_to_target_s"] == 4.0
        assert done["metrics"] == {"epochs": 1} and len(done["evaluations"]) == 2
        assert store.train_run(done["uid"][:6]) == done
        assert store.train_run(done["uid"][:5]) is None  # too short a prefix to be trusted
        assert store.train_run("999") is None
        assert [r["config_key"] for r in store.train_runs()] == ["key-a", "key-b"]


def test_a_uid_that_begins_with_digits_is_found_by_its_prefix(tmp_path):
    """'667108' is no run's id: it is the start of a uid (6% of uids start with 6 digits)."""
    with Store(tmp_path / "r.db") as store:
        first = store.add_train_run(SYSTEM, {"model": "cifarnet", "seed": 1}, "key-a")
        uid = "667108" + "a" * 26
        store.db.execute("UPDATE train_runs SET uid = ? WHERE id = ?", (uid, first))
        assert store.train_run("667108")["uid"] == uid
        assert store.train_run(str(first))["uid"] == uid  # an id is still an id


def test_only_the_store_speaks_sql():
    """Every table is read and written through Store's public methods (store_schema holds
    the migrations, store_query the queries of its readers, on the connection Store gives
    them): no other module runs SQL on its connection or opens its transactions."""
    root = Path(store_module.__file__).parent.parent
    pattern = re.compile(
        r"\.db\.execute\(|\._write\(\)|from trainperf\.store\.database import .*\b_\w"
    )
    speakers = sorted(
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if pattern.search(path.read_text())
    )
    assert speakers == ["store/database.py"]


def test_runs_wait_for_their_result_then_belong_to_it(tmp_path):
    with Store(tmp_path / "r.db") as store:
        sweep = store.start_sweep(SYSTEM, order_seed=7)
        fp = SYSTEM["fingerprint"]
        run = result(samples_per_s_median=10.0, step_s=[0.4]) | {"run_number": 1}
        uid = store.add_run(sweep, fp, run, suite_version="v1", case_key="k1")
        store.add_run(sweep, fp, run | {"run_number": 2, "status": "crashed"}, case_key="k1")
        (pending,) = store.pending_runs(fp, "v1", "k1")  # ok runs only, of that suite case
        assert pending["uid"] == uid and pending["result_uid"] is None
        assert store.pending_runs(fp, "v2", "k1") == []
        later = result(samples_per_s_median=11.0, step_s=[0.35]) | {"run_number": 2}
        store.add_result(sweep, fp, result() | {"runs": [pending, later]}, case_key="k1")
        (stored,) = store.results()
        assert [r["run_number"] for r in stored["runs"]] == [1, 2]
        assert {r["result_uid"] for r in stored["runs"]} == {stored["uid"]}
        assert store.pending_runs(fp, "v1", "k1") == []
        assert len(store.runs()) == 3  # the crashed run is kept, in no result
        assert store.sweeps()[0]["order_seed"] == 7


def test_copy_of_an_old_database_writes_nothing_to_it(tmp_path):
    from trainperf.store.schema import SCHEMA_V1

    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(SCHEMA_V1)
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    before = path.read_bytes()
    with Store.copy_of(path) as copy:
        assert copy.schema_version == SCHEMA_VERSION and copy.results() == []
    assert path.read_bytes() == before


def _write_many(path, writer, count):
    with Store(path) as store:
        run = store.start_sweep(SYSTEM, label=f"writer {writer}")
        for index in range(count):
            store.add_result(run, SYSTEM["fingerprint"], result(f"m{writer}", index=index))


def test_concurrent_writers_lose_nothing(tmp_path):
    import multiprocessing

    path = tmp_path / "shared.db"
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_write_many, args=(path, w, 60)) for w in range(3)]
    for process in writers:
        process.start()
    for process in writers:
        process.join(timeout=120)
        assert process.exitcode == 0
    with Store(path) as store:
        rows = store.results()
    assert len(rows) == 180
    for writer in range(3):
        indexes = [r["metrics"]["index"] for r in rows if r["case"]["model"] == f"m{writer}"]
        assert sorted(indexes) == list(range(60))


def test_version_3_database_gets_a_uid_on_every_row(tmp_path):
    from trainperf.store.schema import SCHEMA_V1, SCHEMA_V2, SCHEMA_V3

    path = tmp_path / "v3.db"
    micro = (
        "INSERT INTO micro (system, created_at, kind, status, params_json, metrics_json)"
        " VALUES ('abc123', 'then', 'gemm', 'ok', '{\"kind\": \"gemm\"}', '{}')"
    )
    max_batch = (
        "INSERT INTO max_batch (system, created_at, memory_key, case_json, probes_json)"
        " VALUES ('abc123', 'then', 'key', '{}', '[]')"
    )
    results = [("resnet18", "{}"), ("bert-squad", "{}")]
    write_old_database(path, [SCHEMA_V1, SCHEMA_V2, SCHEMA_V3], 3, results, [micro, max_batch])
    with Store(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        run = store.start_sweep(SYSTEM)
        store.add_result(run, SYSTEM["fingerprint"], result())
        store.add_micro(SYSTEM, {"kind": "memory"}, {"status": "ok", "metrics": {}})
        store.add_max_batch("abc123", "key", {}, 8, [])
        uids = [r["uid"] for r in store.results() + store.micro() + store.max_batches()]
        assert len(uids) == 7 and len(set(uids)) == 7
        assert all(re.fullmatch(r"[0-9a-f]{32}", uid) for uid in uids)
        assert store.max_batch("abc123", "key")["uid"] == uids[-1]
        with pytest.raises(sqlite3.IntegrityError):  # a uid is unique
            store.db.execute("UPDATE results SET uid = ? WHERE id = 2", (uids[0],))
