"""Nothing measured is lost when the results database stays locked or the disk is full: the
sweep waits, says so, then stops and saves what it could not store in a recovery file that
`trainperf import` adds later (trainperf.store.recovery).

The worker process is replaced by a fake (as in test_runs_sweep.py) that, on a chosen run,
makes the database unwritable the way it happens for real: another connection holding the
write lock, or SQLite's page limit standing in for a full disk."""

import json
import sqlite3
import threading

import pytest

from report_fixture import worker_ok_run
from trainperf.case.spec import make_case
from trainperf.case.training import TrainConfig
from trainperf.launch import sweep as sweep_module
from trainperf.launch.sweep import run_sweep
from trainperf.launch.sweep_items import SweepItem
from trainperf.store import exchange
from trainperf.store.access import FULL, LOCKED, StoreUnavailable
from trainperf.store.database import Store

SYSTEM = {"fingerprint": "s" * 16, "hostname": "box"}
SUITE = ("grid", "v1")
MODELS = ("cifarnet", "alexnet")


class Worker:
    """Stands in for ``run_in_child``: an ok run per call (its throughput from the call's
    number), calling ``before(number)`` first; ``steps`` step times per run."""

    def __init__(self, before=None, steps=5):
        self.before, self.steps, self.calls = before or (lambda number: None), steps, []

    def __call__(self, case, workdir, stop=None, rendezvous=None):
        self.calls.append(case.model)
        self.before(len(self.calls))
        return worker_ok_run(case, 100.0 + len(self.calls), self.steps)


def items(runs=2):
    made = [make_case(model=m, batch_size=8, image_size=32, runs=runs) for m in MODELS]
    return [SweepItem(case, case.model) for case in made]


def lock(path):
    """Another process's connection holding the write lock of ``path``, never committing."""
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    return other


def export(path):
    """The database's export, without the time it was made."""
    with Store.copy_of(path) as store:
        document = exchange.export_document(store)
    return {key: value for key, value in document.items() if key != "exported_at"}


def strict_load(path):
    def refuse(name):
        raise ValueError(f"{name} is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


@pytest.fixture
def sweep(tmp_path, monkeypatch):
    """``sweep(worker, wait_s)``: a sweep of the two cases (2 runs each) of suite SUITE on
    ``tmp_path/r.db`` (its ``store``), every wait told into ``said``; returns its outcome."""
    said = []

    def run(worker, wait_s=1.0, **kwargs):
        monkeypatch.setattr(sweep_module, "run_in_child", worker)
        with Store(tmp_path / "r.db", wait_s=wait_s, on_wait=said.append) as run.store:
            return run_sweep(items(), run.store, SYSTEM, suite=SUITE, order_seed=3, **kwargs)

    run.said = said
    return run


def test_a_database_locked_for_good_keeps_every_run_in_a_recovery_file(tmp_path, sweep):
    db, held = tmp_path / "r.db", []
    outcome = sweep(Worker(lambda n: held.append(lock(db)) if n == 3 else None))
    assert any(f"results database {db} {LOCKED}; waiting" in line for line in sweep.said)
    # Two runs stored, the third measured when the lock came: the sweep stopped there.
    not_stored = outcome.not_stored
    assert not_stored.cause.reason == LOCKED and outcome.not_run == 1
    assert not_stored.counts == {"results": 1, "runs": 1, "max_batch": 0}
    assert not_stored.file.parent == tmp_path
    assert not_stored.file.name.startswith(f"r.db.recovered-{outcome.sweep_id}-")
    line = not_stored.line(outcome.not_run)
    assert line.startswith(f"could not store 1 result, 1 run in {db} (the database {LOCKED}")
    assert line.endswith(f"import them later with: trainperf import {not_stored.file} --db {db}")
    document = strict_load(not_stored.file)
    exchange.validate(document)  # trainperf's own import check
    (result,) = document["results"]
    assert outcome.results[0]["id"] is None  # not in the database (yet)
    # The result's runs: the one stored before the lock (to join it), the one after.
    assert [r["result_uid"] for r in document["runs"]] == [result["uid"]] * 2
    assert [r["run_number"] for r in document["runs"]] == [1, 2]
    assert [s["sweep_id"] for s in document["sweeps"]] == [outcome.sweep_id]

    held[0].rollback()
    before = export(db)
    assert len(before["runs"]) == 2 and before["results"] == []
    with Store(db) as store:
        exchange.import_document(store, exchange.read_file(not_stored.file))
    after = export(db)
    assert after["results"] == document["results"]
    uids = [r["uid"] for r in after["runs"]]
    assert set(uids) == {r["uid"] for r in before["runs"] + document["runs"]}
    assert len(uids) == 3  # the run in the file and in the database is there once
    assert [r for r in after["runs"] if r["result_uid"] == result["uid"]] == document["runs"]
    with Store(db) as store:  # a second import adds nothing
        summary = exchange.import_document(store, exchange.read_file(not_stored.file))
    assert sum(summary.added.values()) == 0 and export(db) == after

    # The suite resumes from there: one run is left to measure, and nothing was lost.
    rest = Worker()
    resumed = sweep(rest)
    assert len(rest.calls) == 1 and resumed.not_stored is None
    with Store(db) as store:
        stored = store.results()
        assert len(store.runs()) == 4
    assert sorted(r["case"]["model"] for r in stored) == sorted(MODELS)
    assert all(r["status"] == "ok" and len(r["runs"]) == 2 for r in stored)


def test_a_lock_let_go_during_the_wait_stores_as_usual(tmp_path, sweep):
    db = tmp_path / "r.db"

    def lock_for_a_while(number):
        if number == 3:
            threading.Timer(1.0, lock(db).rollback).start()

    outcome = sweep(Worker(lock_for_a_while), wait_s=4)  # SQLite's own wait: 0.4 s
    assert any(LOCKED in line for line in sweep.said)
    assert outcome.not_stored is None and outcome.not_run == 0
    assert list(tmp_path.glob("*.recovered-*")) == []
    with Store(db) as store:
        assert len(store.results()) == 2 and len(store.runs()) == 4
        assert store.db.execute("SELECT count(*) FROM leases").fetchone()[0] == 0


def test_a_full_disk_keeps_every_run_in_a_recovery_file(tmp_path, sweep):
    db = tmp_path / "r.db"

    def fill(number):
        if number == 2:  # no page more for the sweep's connection: SQLite says SQLITE_FULL
            pages = sweep.store.db.execute("PRAGMA page_count").fetchone()[0]
            sweep.store.db.execute(f"PRAGMA max_page_count = {pages}")

    outcome = sweep(Worker(fill, steps=20000), wait_s=0.5)
    assert any(f"results database {db} {FULL}; waiting" in line for line in sweep.said)
    not_stored = outcome.not_stored
    assert not_stored.cause.reason == FULL
    assert not_stored.counts == {"results": 0, "runs": 1, "max_batch": 0}
    document = strict_load(not_stored.file)
    exchange.validate(document)
    (run,) = document["runs"]  # the second run, its case not done: it waits for the rest
    assert run["result_uid"] is None and run["case_key"] in MODELS
    before = export(db)
    assert len(before["runs"]) == 1
    with Store(db) as store:  # room again (a new connection has no page limit)
        exchange.import_document(store, document)
    assert export(db)["runs"] == before["runs"] + document["runs"]


def test_a_lease_that_cannot_be_taken_stops_the_sweep_with_all_it_measured_stored(tmp_path, sweep):
    db, held = tmp_path / "r.db", []
    events = sweep_module.SweepEvents(on_result=lambda index, result: held.append(lock(db)))
    worker = Worker()
    outcome = sweep(worker, events=events)
    # The first case's result was stored, then the lock came: the lease of the next case
    # could not be renewed, and its second run was not measured.
    assert len(held) == 1 and len(worker.calls) == 3 and outcome.not_run == 1
    assert outcome.not_stored.file is None and not any(outcome.not_stored.counts.values())
    line = outcome.not_stored.line(outcome.not_run)
    assert line.startswith(f"could not write to {db} (the database {LOCKED}; waited 1")
    assert line.endswith(
        "the sweep stopped; 1 case(s) not run; everything it measured is "
        "stored: run the same command again to resume"
    )
    assert list(tmp_path.glob("*.recovered-*")) == []
    held[0].rollback()
    with Store(db) as store:
        assert len(store.results()) == 1 and len(store.runs()) == 3


def test_a_database_that_cannot_even_be_read_still_gets_its_runs_back(tmp_path, sweep, monkeypatch):
    def unreadable(self, system):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(Store, "loose_runs", unreadable)
    db, held = tmp_path / "r.db", []
    outcome = sweep(Worker(lambda n: held.append(lock(db)) if n == 2 else None), wait_s=0.3)
    document = strict_load(outcome.not_stored.file)
    # Its sweep is named, not held (the database has it); the run is there all the same.
    assert document["sweeps"] == [] and len(document["runs"]) == 1
    assert exchange.validate(document).unresolved[0].kind == "sweep"
    held[0].rollback()
    with Store(db) as store:
        exchange.import_document(store, document)
        assert len(store.runs()) == 2


def test_a_sweep_that_cannot_start_measures_nothing(tmp_path, sweep):
    Store(tmp_path / "r.db").close()
    held = lock(tmp_path / "r.db")
    worker = Worker()
    with pytest.raises(StoreUnavailable):
        sweep(worker, wait_s=0.3)
    held.rollback()
    assert worker.calls == []


def test_when_no_place_takes_the_file_the_line_says_so(tmp_path, monkeypatch):
    from trainperf.store import recovery

    def no_room(path, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(recovery, "write_atomic", no_room)
    cause = StoreUnavailable(tmp_path / "r.db", FULL, 600)
    file, problems = recovery.save_file({}, cause.path, "abc")
    assert file is None and len(problems) == 2
    line = recovery.NotStored(cause, {"runs": 2}, file, problems).line()
    assert line.startswith(f"could not store 2 runs in {cause.path} (the database {FULL}; ")
    assert "nor save them: cannot write " in line and "No space left on device" in line


def test_a_recovery_file_never_replaces_another(tmp_path):
    from trainperf.store import recovery

    first, _ = recovery.save_file({"n": 1}, tmp_path / "r.db", "abc")
    second, _ = recovery.save_file({"n": 2}, tmp_path / "r.db", "abc")
    assert first != second and json.loads(first.read_text()) == {"n": 1}


# --- the command line --------------------------------------------------------------------

RUN = ["run", "--model", "cifarnet", "--image-size", "32", "--device", "cpu", "--runs", "2"]


def test_run_names_the_recovery_file_in_one_error_line(tmp_path, run_cli, monkeypatch):
    db, held = tmp_path / "r.db", []
    monkeypatch.setenv("TRAINPERF_STORE_WAIT_S", "1")
    worker = Worker(lambda number: held.append(lock(db)) if number == 2 else None)
    monkeypatch.setattr(sweep_module, "run_in_child", worker)
    code, out, err = run_cli([*RUN, "--db", db])
    assert code == 1 and "Traceback" not in err
    assert f"trainperf: results database {db} {LOCKED}; waiting (" in err
    (file,) = tmp_path.glob("r.db.recovered-*.json")
    (line,) = [line for line in err.splitlines() if "error" in line]
    assert line.startswith(f"trainperf: error: could not store 1 result, 1 run in {db} (")
    assert line.endswith(
        f": saved them to {file}; import them later with: trainperf import {file} --db {db}"
    )
    assert "stored in" not in err
    held[0].rollback()
    code, out, err = run_cli(["import", file, "--db", db])
    assert code == 0, err
    assert out.startswith(f"imported 1 result, 1 run from {file} (1 run, 1 system, 1 sweep already")
    code, out, err = run_cli(["results", "--db", db, "--json"])
    (result,) = json.loads(out)["results"]
    assert [run["run_number"] for run in result["runs"]] == [1, 2]


def test_run_says_what_was_not_stored_in_its_json(tmp_path, run_cli, monkeypatch):
    db, held = tmp_path / "r.db", []
    monkeypatch.setenv("TRAINPERF_STORE_WAIT_S", "0.5")
    worker = Worker(lambda number: held.append(lock(db)) if number == 2 else None)
    monkeypatch.setattr(sweep_module, "run_in_child", worker)
    code, out, err = run_cli([*RUN, "--db", db, "--json"])
    held[0].rollback()
    assert code == 1
    document = json.loads(out)
    (file,) = tmp_path.glob("r.db.recovered-*.json")
    assert document["not_stored"] == {
        "message": next(line for line in err.splitlines() if "error" in line).removeprefix(
            "trainperf: error: "
        ),
        "db": str(db),
        "reason": LOCKED,
        "waited_s": 0.5,
        "counts": {"results": 1, "runs": 1, "max_batch": 0},
        "file": str(file),
        "problems": [],
    }
    assert document["results"][0]["id"] is None


def test_run_that_cannot_start_says_so_in_one_line(tmp_path, run_cli, monkeypatch):
    db = tmp_path / "r.db"
    Store(db).close()
    monkeypatch.setenv("TRAINPERF_STORE_WAIT_S", "0.5")
    worker = Worker()
    monkeypatch.setattr(sweep_module, "run_in_child", worker)
    held = lock(db)
    code, out, err = run_cli([*RUN, "--db", db])
    held.rollback()
    assert code == 1 and "Traceback" not in err and worker.calls == []
    assert err.splitlines()[-1] == (
        f"trainperf: error: results database {db} {LOCKED} (waited 0.5 s): the sweep could "
        "not start; nothing was measured"
    )
    assert list(tmp_path.glob("*.recovered-*")) == []


def test_a_bound_that_is_not_seconds_is_bad_input(tmp_path, run_cli, monkeypatch):
    monkeypatch.setenv("TRAINPERF_STORE_WAIT_S", "later")
    code, out, err = run_cli([*RUN, "--db", tmp_path / "r.db"])
    assert code == 2
    assert err == (
        "trainperf: error: TRAINPERF_STORE_WAIT_S='later' is not valid: give seconds, "
        "a number >= 0\n"
    )


# --- commands that measure one thing -------------------------------------------------------

GEMM = ["micro", "gemm", "--device", "cpu", "--shapes", "square", "--limit", "1"]
GEMM += ["--warmup", "0", "--iters", "1", "--no-flush"]


@pytest.mark.parametrize("as_json", [False, True])
def test_a_micro_benchmark_measured_while_the_database_is_locked_is_saved_aside(
    tmp_path, run_cli, monkeypatch, as_json
):
    """The GEMM really runs (one square shape); the database is locked throughout, so the
    write waits its bound and the result goes to a recovery file that imports later."""
    db = tmp_path / "r.db"
    Store(db).close()
    monkeypatch.setenv("TRAINPERF_STORE_WAIT_S", "0.5")
    held = lock(db)
    code, out, err = run_cli([*GEMM, "--db", db, *(["--json"] if as_json else [])])
    held.rollback()
    assert code == 1 and "Traceback" not in err and "stored in" not in err
    (file,) = tmp_path.glob("r.db.recovered-micro-gemm-*.json")
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"trainperf: error: could not store 1 micro run in {db} (")
    assert line.endswith(f"import them later with: trainperf import {file} --db {db}")
    if as_json:
        document = json.loads(out)
        assert document["id"] is None and document["not_stored"]["file"] == str(file)
        assert document["metrics"]["rows"]  # what was measured is printed all the same
    else:
        assert "TFLOP" in out
    code, out, err = run_cli(["import", file, "--db", db])
    assert code == 0, err
    assert out.startswith(f"imported 0 results, 1 micro run, 1 system from {file}")
    with Store.copy_of(db) as store:
        (row,) = store.micro()
    assert row["kind"] == "gemm" and row["status"] == "ok"


def test_a_largest_batch_found_while_the_database_is_locked_is_saved_aside(
    tmp_path, run_cli, monkeypatch
):
    """The search is a fake (its probes are processes of their own, tested elsewhere)."""
    from trainperf.launch import maxbatch

    found = maxbatch.MaxBatch(
        48, [maxbatch.Probe(64, False, "oom"), maxbatch.Probe(48, True, "ok")]
    )
    monkeypatch.setattr(maxbatch, "run_search", lambda *args, **kwargs: found)
    db = tmp_path / "r.db"
    Store(db).close()
    monkeypatch.setenv("TRAINPERF_STORE_WAIT_S", "0.5")
    held = lock(db)
    code, out, err = run_cli(["maxbatch", "cifarnet", "--device", "cpu", "--db", db, "--json"])
    held.rollback()
    assert code == 1 and "Traceback" not in err
    (file,) = tmp_path.glob("r.db.recovered-maxbatch-*.json")
    document = json.loads(out)
    assert document["batch_size"] == 48 and document["id"] is None
    assert document["not_stored"]["counts"]["max_batch"] == 1
    assert run_cli(["import", file, "--db", db])[0] == 0
    with Store.copy_of(db) as store:
        assert [row["batch_size"] for row in store.max_batches()] == [48]


def test_a_micro_benchmark_whose_database_broke_while_it_ran_is_saved_aside(tmp_path, run_cli):
    """The check before the run passed; by the time the result is written the store lacks
    a table (damaged, or replaced by another program): the result goes to a file too."""
    db = tmp_path / "r.db"
    Store(db).close()
    with sqlite3.connect(db) as connection:
        connection.execute("DROP TABLE micro")
    code, out, err = run_cli([*GEMM, "--db", db])
    assert code == 1 and "Traceback" not in err and "TFLOP" in out
    (file,) = tmp_path.glob("r.db.recovered-micro-gemm-*.json")
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"trainperf: error: could not store 1 micro run in {db} (the ")
    assert "cannot be written (" in line and "no such table: micro" in line and "waited" not in line
    assert exchange.read_file(file)["micro"][0]["kind"] == "gemm"


TRAIN_CONFIG = TrainConfig("cifarnet", "cifar10:/d", "top1", 0.8, 1, 64).to_dict()


def running_and_finished(tmp_path, stored_at, finished_at, status="ok"):
    """A database holding a training run as running (written at ``stored_at``), and the
    export of a copy of that run (same uid and start) whose end was written elsewhere at
    ``finished_at`` with ``status``: what ``trainperf train`` saves aside on a lock."""
    db = tmp_path / "r.db"
    with Store(db) as store:
        run_id = store.add_train_run(SYSTEM, TRAIN_CONFIG, "key")
        store.update_train_run(run_id, [{"epoch": 1}])
        (row,) = store.train_runs()
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE train_runs SET updated_at = ?", (stored_at,))
    with Store.spool() as spool:
        copy = spool.add_train_run(SYSTEM, TRAIN_CONFIG, "key", (row["uid"], row["created_at"]))
        spool.update_train_run(copy, [{"epoch": 1}, {"epoch": 2}], status=status, reached=True)
        document = exchange.export_document(spool)
    document["train_runs"][0]["updated_at"] = finished_at
    return db, document


def stored_train_state(db):
    with Store.copy_of(db) as store:
        return [(run["status"], len(run["evaluations"])) for run in store.train_runs()]


@pytest.mark.parametrize(
    "finished_at, status, finishes",
    [
        ("2026-12-03T14:00:05+00:00", "ok", True),
        ("2026-12-03T14:00:00+00:00", "ok", True),  # ended within the second it was stored
        ("2026-12-03T15:00:05+01:00", "aborted", True),  # a later time, another offset
        ("2026-12-03T14:59:59+01:00", "ok", False),  # earlier, though later as text
        ("2026-12-03T14:00:05+00:00", "running", False),  # a copy that has not ended
    ],
)
def test_a_saved_aside_end_finishes_the_run_the_database_holds_as_running(
    tmp_path, finished_at, status, finishes
):
    db, document = running_and_finished(tmp_path, "2026-12-03T14:00:00+00:00", finished_at, status)
    with Store(db) as store:
        summary = exchange.import_document(store, document)
    assert summary.updated["train_runs"] == int(finishes)
    assert summary.added["train_runs"] == 0
    assert summary.already_present["train_runs"] == int(not finishes)
    assert stored_train_state(db) == ([(status, 2)] if finishes else [("running", 1)])
    if finishes:
        assert "(1 training run finished; 1 system already present)" in summary.line("f.json")


def test_a_run_the_database_holds_as_ended_keeps_its_end(tmp_path):
    db, document = running_and_finished(
        tmp_path, "2026-12-03T14:00:00+00:00", "2026-12-03T14:00:05+00:00"
    )
    with Store(db) as store:
        (run,) = store.train_runs()
        store.update_train_run(run["id"], [{"epoch": 1}], status="crashed")
        summary = exchange.import_document(store, document)
    assert summary.updated["train_runs"] == 0 and stored_train_state(db) == [("crashed", 1)]
