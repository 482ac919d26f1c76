"""A database locked by another process, or on a full disk: the store waits, says so, tries
again for a bounded time, then raises one StoreUnavailable (trainperf.store.database)."""

import sqlite3
import threading
import time

import pytest

from trainperf.store.access import FULL, LOCKED, StoreError, StoreUnavailable, duration
from trainperf.store.database import Store

SYSTEM = {"fingerprint": "abc123", "hostname": "node1"}


def hold_write_lock(path):
    """Another process's connection holding the write lock, never committing."""
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    return other


def run_document(steps=5):
    metrics = {"samples_per_s_median": 10.0, "step_s": [0.1] * steps}
    case = {"model": "cifarnet", "batch_size": 4}
    return {"result_schema": 1, "status": "ok", "case": case, "metrics": metrics, "run_number": 1}


def test_a_locked_database_is_waited_for_visibly_then_given_up(tmp_path):
    path, said = tmp_path / "r.db", []
    Store(path).close()
    other = hold_write_lock(path)
    with Store(path, wait_s=0.6, on_wait=said.append) as store:
        started = time.monotonic()
        with pytest.raises(StoreUnavailable) as raised:
            store.add_system(SYSTEM)
        assert 0.6 <= time.monotonic() - started < 3
        assert raised.value.reason == LOCKED and raised.value.path == path
        assert str(raised.value) == f"results database {path} {LOCKED} (waited 0.6 s)"
        assert said and all(
            line.startswith(f"trainperf: results database {path} ") for line in said
        )
        assert "is locked by another process; waiting (0." in said[0]
        assert said[-1].endswith(" of 0.6 s)...")
        other.rollback()
        store.add_system(SYSTEM)  # the connection is usable again
        assert store.systems() == [SYSTEM]


def test_a_lock_let_go_during_the_wait_lets_the_write_through(tmp_path):
    path, said = tmp_path / "r.db", []
    Store(path).close()
    other = hold_write_lock(path)
    threading.Timer(0.8, other.rollback).start()
    with Store(path, wait_s=5, on_wait=said.append) as store:  # told every 0.5 s
        store.add_system(SYSTEM)
        assert store.systems() == [SYSTEM] and said


def test_a_full_database_is_waited_for_then_given_up_leaving_no_half_row(tmp_path):
    path = tmp_path / "r.db"
    with Store(path, wait_s=0.3, on_wait=lambda line: None) as store:
        sweep = store.start_sweep(SYSTEM)
        pages = store.db.execute("PRAGMA page_count").fetchone()[0]
        store.db.execute(f"PRAGMA max_page_count = {pages}")  # SQLite: SQLITE_FULL
        with pytest.raises(StoreUnavailable) as raised:
            store.add_run(sweep, "abc123", run_document(steps=20000))
        assert raised.value.reason == FULL and "database or disk is full" in str(raised.value)
        assert store.runs() == []
        store.db.execute("PRAGMA max_page_count = 1073741823")
        store.add_run(sweep, "abc123", run_document(steps=20000))
        assert len(store.runs()) == 1


def test_the_bound_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINPERF_STORE_WAIT_S", "2.5")
    with Store(tmp_path / "r.db") as store:
        assert store.wait_s == 2.5
        # SQLite's own wait is a tenth of the bound: the wait is told as it goes.
        assert store.db.execute("PRAGMA busy_timeout").fetchone()[0] == 250
    for bad in ("soon", "-1", "nan", "inf"):
        monkeypatch.setenv("TRAINPERF_STORE_WAIT_S", bad)
        with pytest.raises(StoreError, match=f"TRAINPERF_STORE_WAIT_S='{bad}' is not valid"):
            Store(tmp_path / "r.db")
    monkeypatch.delenv("TRAINPERF_STORE_WAIT_S")
    with Store(tmp_path / "r.db") as store:
        assert store.wait_s == 600
        assert store.db.execute("PRAGMA busy_timeout").fetchone()[0] == 60_000


def test_durations_read_as_people_say_them():
    assert [duration(s) for s in (0.25, 9.96, 45, 60, 65.4, 600)] == [
        "0.2 s",
        "10 s",
        "45 s",
        "1 min",
        "1 min 5 s",
        "10 min",
    ]


def test_other_errors_are_not_waited_for(tmp_path):
    said = []
    with Store(tmp_path / "r.db", wait_s=30, on_wait=said.append) as store:
        sweep = store.start_sweep(SYSTEM)
        with pytest.raises(sqlite3.IntegrityError):  # no such system: a bug, not a wait
            store.add_run(sweep, "no-such-system", run_document())
    assert said == []


def test_a_new_store_opened_while_another_process_holds_it_waits_to_turn_wal_on(tmp_path):
    """Two sweeps creating one database at once: the second's switch to WAL meets the
    first's lock and waits for it like a write, instead of failing 'database is locked'."""
    path, said = tmp_path / "new.db", []
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN EXCLUSIVE")  # a rollback-journal database, held whole
    other.execute("CREATE TABLE t (x)")
    threading.Timer(0.8, other.rollback).start()
    with Store(path, wait_s=5, on_wait=said.append) as store:
        assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert said and LOCKED in said[0]


def test_stores_created_at_the_same_instant_open_soon_with_the_default_bound(tmp_path):
    """Four connections turning WAL on in one new database at once: SQLite answers some of
    them SQLITE_BUSY at once, without its busy handler (about one try in twenty here).
    With the default bound (10 min, so a busy timeout of 60 s) such a try is made again
    after a pause that doubles from 10 ms, not one busy timeout later: every store opens
    within seconds (before, the second of two sweeps creating one store waited a minute)."""

    def open_store(path, start, failures):
        start.wait()
        try:
            with Store(path, on_wait=lambda line: None) as store:
                assert store.wait_s == 600
                assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        except Exception as exc:  # noqa: BLE001 - reported below, with the trial
            failures.append(exc)

    for trial in range(25):
        path, failures, start = tmp_path / f"new-{trial}.db", [], threading.Barrier(4)
        threads = [
            threading.Thread(target=open_store, args=(path, start, failures)) for _ in range(4)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=15)
        assert not any(t.is_alive() for t in threads), f"trial {trial}: a store still waits"
        assert failures == [], trial
