"""The results store: one SQLite file, written only by the parent process.

The schema and its migrations are in ``trainperf.store.schema``.

Each result is committed in its own transaction as soon as it arrives, so an interrupted
run keeps everything finished before the interruption, and a process killed in the middle
of a write leaves no half row (SQLite rolls the journal back). Several sweeps may write one
database at once: it is in WAL mode, and every write takes the write lock up front
(``BEGIN IMMEDIATE``).

A write that finds the database locked by another process (after SQLite's own wait, its
busy timeout) or the disk full (``SQLITE_FULL``, ``ENOSPC``) is tried again, the wait told
through ``on_wait`` each time, for up to ``wait_s`` in all (``TRAINPERF_STORE_WAIT_S``,
``STORE_WAIT_S`` by default); then it raises ``StoreUnavailable`` (the policy and the
errors are ``trainperf.store.access``'s). All of it is in ``Store._write``, the one way in
to a write transaction. Before anything opens a database, ``trainperf.store.checks``
says in one line what is wrong with its path. What a sweep measured and could
not store then goes to a recovery file (trainperf.store.recovery).
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from trainperf.core import strict_json
from trainperf.store import beside, imported, lease
from trainperf.store import query as store_query
from trainperf.store.access import (
    BUSY_TIMEOUT_S,
    RETRY_PAUSE_S,
    StoreError,
    StoreUnavailable,
    duration,
    read_only_uri,
    unavailable_reason,
    wait_from_environment,
)
from trainperf.store.checks import check_readable, check_store
from trainperf.store.lease import Owner
from trainperf.store.query import EVERYTHING, ResultFilter, Selection
from trainperf.store.rows import (
    IMPORTED_COLUMNS,
    insert_run,
    now,
    row_document,
)
from trainperf.store.schema import MIGRATION_STEPS, MIGRATIONS, SCHEMA_VERSION

T = TypeVar("T")


def _tell(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Store:
    """Open (creating or migrating) the database at ``path``."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        wait_s: float | None = None,
        on_wait: Callable[[str], None] | None = None,
    ) -> None:
        self.path = Path(path)
        if str(path) != ":memory:" and (self.path.exists() or self.path.is_symlink()):
            try:  # never add trainperf's tables to someone else's database
                check_store(self.path, empty_ok=True)
            except StoreError as exc:
                raise StoreError(f"{self.path}: {exc}") from None
        self.wait_s = wait_from_environment() if wait_s is None else wait_s
        self.on_wait = on_wait or _tell  # hears each wait for the database, one line
        busy_timeout_s = min(BUSY_TIMEOUT_S, self.wait_s / 10)
        # isolation_level=None: no implicit transactions; every write says where it begins.
        self.db = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA foreign_keys = ON")
        # Turning WAL on needs the database to itself for a moment: a second process
        # opening a new store at the same instant gets SQLITE_BUSY here, at once (SQLite
        # does not always call its busy handler for it), so it waits like any write.
        self._retrying(lambda: self.db.execute("PRAGMA journal_mode = WAL"))
        self._migrate()
        self._records: dict[str, dict[str, Any]] | None = None  # a reader's, read once

    @classmethod
    def read_only(cls, path: str | os.PathLike[str]) -> Store:
        """The database at ``path`` opened to read in place, writing nothing there or
        beside it (``read_only_uri``): how every verb that only reads opens it; a write
        through it fails. A database of an older schema cannot be read in place by this
        trainperf's queries: it is migrated in a copy in memory instead (``copy_of``;
        such stores predate labs of thousands of results). ``StoreError`` when ``path`` is
        missing, empty or not a trainperf store (``check_readable``)."""
        store = cls.__new__(cls)
        store.path, store.wait_s, store.on_wait = Path(path), 0.0, _tell
        check_readable(store.path)
        store.db = sqlite3.connect(read_only_uri(store.path), uri=True, isolation_level=None)
        if store.schema_version != SCHEMA_VERSION:  # older: check_readable refuses newer
            store.db.close()
            return cls.copy_of(path)
        store.db.row_factory = sqlite3.Row
        store._records = store_query.system_records(store.db)  # read once: nothing adds any
        return store

    @classmethod
    def copy_of(cls, path: str | os.PathLike[str]) -> Store:
        """An in-memory copy of the database at ``path``, migrated to this trainperf's
        schema, made without writing anything (``read_only_uri``): how ``read_only``
        reads a database of an older schema. ``StoreError`` when ``path`` is missing,
        empty or not a trainperf store (``check_readable``)."""
        store = cls.__new__(cls)
        store.path, store.wait_s, store.on_wait = Path(path), 0.0, _tell
        check_readable(store.path)
        source = sqlite3.connect(read_only_uri(store.path), uri=True)
        try:
            store.db = sqlite3.connect(":memory:", isolation_level=None)
            source.backup(store.db)
        finally:
            source.close()
        store.db.row_factory = sqlite3.Row
        store.db.execute("PRAGMA foreign_keys = ON")
        store._migrate()
        store._records = store_query.system_records(store.db)
        return store

    @classmethod
    def spool(cls) -> Store:
        """An in-memory store that checks no reference between its rows: where rows are
        gathered that may name a sweep it does not hold (trainperf.store.recovery)."""
        store = cls(":memory:", wait_s=0.0)
        store.db.execute("PRAGMA foreign_keys = OFF")
        return store

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self, body: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``body`` in one write transaction, holding the write lock from its start,
        and return what it returns. While another process holds the lock or the disk is
        full, try again (the whole transaction: a failed one leaves nothing), saying so to
        ``on_wait``, for up to ``wait_s`` in all; then raise ``StoreUnavailable``."""
        return self._retrying(lambda: self._transaction(body))

    def _retrying(self, attempt: Callable[[], T]) -> T:
        """``attempt()``, tried again while the database is locked or the disk full (see
        ``_write``).

        SQLite waits out another connection's lock itself (the busy timeout, ``pace``)
        before it says the database is locked, so a try that failed after that wait is
        made again at once. Some tries fail at once instead: a full disk, and a lock that
        SQLite does not wait for (turning WAL on while another process creates the same
        database, a deadlock it avoids). Those are made again after a pause that starts at
        ``RETRY_PAUSE_S`` and doubles up to ``pace``: a fixed pause of one busy timeout kept
        the second of two sweeps opening one new store idle for a minute. The wait is told
        to ``on_wait`` at its start and then at most once per ``pace``."""
        started = time.monotonic()
        pace = self.db.execute("PRAGMA busy_timeout").fetchone()[0] / 1000
        pause, told = RETRY_PAUSE_S, None
        while True:
            tried = time.monotonic()
            try:
                return attempt()
            except (sqlite3.OperationalError, OSError) as exc:
                reason = unavailable_reason(exc)
                if reason is None:
                    raise
                waited = time.monotonic() - started
                if waited >= self.wait_s:
                    raise StoreUnavailable(self.path, reason, self.wait_s) from exc
            if told is None or time.monotonic() - told >= pace:
                told = time.monotonic()
                self.on_wait(
                    f"trainperf: results database {self.path} {reason}; waiting "
                    f"({duration(waited)} of {duration(self.wait_s)})..."
                )
            time.sleep(max(0.0, min(pause - (time.monotonic() - tried), self.wait_s - waited)))
            pause = min(pace, 2 * pause)

    def _transaction(self, body: Callable[[sqlite3.Connection], T]) -> T:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            done = body(self.db)
            self.db.execute("COMMIT")
        except BaseException:
            if self.db.in_transaction:  # SQLite ends it itself on some errors (a full disk)
                self.db.execute("ROLLBACK")
            raise
        return done

    @property
    def schema_version(self) -> int:
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self) -> None:
        if self.schema_version == SCHEMA_VERSION:
            return

        def migrate(db: sqlite3.Connection) -> None:
            # Read the version again under the write lock: another process may be migrating.
            version = self.schema_version
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} has schema version {version}, newer than this trainperf "
                    f"({SCHEMA_VERSION}): upgrade trainperf to read it"
                )
            for target in range(version + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[target].split(";"):
                    if statement.strip():
                        db.execute(statement)
                if target in MIGRATION_STEPS:
                    MIGRATION_STEPS[target](db)
                db.execute(f"PRAGMA user_version = {target}")

        self._write(migrate)

    def add_system(self, record: dict[str, Any]) -> str:
        row = (record["fingerprint"], record["hostname"], strict_json.dumps(record), now())
        self._write(lambda db: db.execute("INSERT OR IGNORE INTO systems VALUES (?, ?, ?, ?)", row))
        return record["fingerprint"]

    def start_sweep(
        self,
        system: dict[str, Any],
        label: str | None = None,
        order_seed: int | None = None,
        doctor: dict[str, Any] | None = None,
    ) -> str:
        """Register the system and a new sweep, with the doctor's verdict on the machine
        as it started (trainperf.doctor; None when not examined); return the sweep id."""
        fingerprint = self.add_system(system)
        sweep_id = uuid.uuid4().hex[:12]
        verdict = None if doctor is None else strict_json.dumps(doctor)
        row = (sweep_id, now(), fingerprint, label, order_seed, verdict)
        columns = IMPORTED_COLUMNS["sweeps"]
        insert = f"INSERT INTO sweeps ({columns}) VALUES (?, ?, ?, ?, ?, ?)"
        self._write(lambda db: db.execute(insert, row))
        return sweep_id

    def add_run(
        self,
        sweep_id: str,
        system: str,
        run: dict[str, Any],
        *,
        suite_version: str | None = None,
        case_key: str | None = None,
    ) -> str:
        """Store one finished run (a worker's document with its ``run_number``), committed
        at once and not yet part of a result; return its uid."""
        uid = uuid.uuid4().hex
        row = run | {"uid": uid, "sweep_id": sweep_id, "system": system, "created_at": now()}
        row |= {"suite_version": suite_version, "case_key": case_key}
        self._write(lambda db: insert_run(db, row))
        return uid

    def pending_runs(self, system: str, suite_version: str, case_key: str) -> list[dict[str, Any]]:
        """The ok runs of a suite case on a system that no result holds yet (its sweep was
        interrupted), in the order they ran."""
        rows = self.db.execute(
            "SELECT * FROM runs WHERE system = ? AND suite_version = ? AND case_key = ?"
            " AND result_uid IS NULL AND status = 'ok' ORDER BY id",
            (system, suite_version, case_key),
        ).fetchall()
        return [row_document(row) for row in rows]

    def loose_runs(self, system: str) -> list[dict[str, Any]]:
        """The runs of a system that no result holds (yet): a run is stored as it ends,
        and joins its result when its case is done. Oldest first."""
        rows = self.db.execute(
            "SELECT * FROM runs WHERE system = ? AND result_uid IS NULL ORDER BY id", (system,)
        ).fetchall()
        return [row_document(row) for row in rows]

    def add_result(
        self,
        sweep_id: str,
        system: str,
        result: dict[str, Any],
        *,
        suite: tuple[str, str] | None = None,
        case_key: str | None = None,
    ) -> int:
        """Store one result with its runs (committed at once, together); return its id.

        ``result["runs"]``: its runs, those stored already (with a ``uid``, see
        ``add_run``) and those not. ``suite`` is (name, version) when the case came from
        a suite, ``case_key`` its key there; both let a rerun of the suite find the cases
        already done.
        """
        suite_name, suite_version = suite or (None, None)
        uid = uuid.uuid4().hex
        written = now()

        def insert(db: sqlite3.Connection) -> int:
            cursor = db.execute(
                "INSERT INTO results (uid, sweep_id, system, created_at, model, status,"
                " result_schema, case_json, device_json, metrics_json, error_json, suite,"
                " suite_version, case_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    uid,
                    sweep_id,
                    system,
                    written,
                    result["case"]["model"],
                    result["status"],
                    result["result_schema"],
                    strict_json.dumps(result["case"]),
                    strict_json.dumps(result.get("device")),
                    strict_json.dumps(result.get("metrics") or {}),
                    strict_json.dumps(result["error"]) if result.get("error") else None,
                    suite_name,
                    suite_version,
                    case_key,
                ),
            )
            for number, run in enumerate(result.get("runs") or [], start=1):
                if run.get("uid"):
                    db.execute("UPDATE runs SET result_uid = ? WHERE uid = ?", (uid, run["uid"]))
                    continue
                run = {"run_number": number} | run
                run |= {"uid": uuid.uuid4().hex, "sweep_id": sweep_id, "system": system}
                run |= {"created_at": written, "result_uid": uid, "suite_version": suite_version}
                insert_run(db, run | {"case_key": case_key})
            return int(cursor.lastrowid)

        return self._write(insert)

    def finished(
        self,
        system: str,
        suite_version: str,
        case_key: str | None = None,
        *,
        status: str = "ok",
    ) -> dict[str, dict[str, Any]]:
        """The newest result of ``status`` (ok, or skipped) of each case (or of the one
        ``case_key``) of a suite version on a system, by case key."""
        query = "SELECT * FROM results WHERE system = ? AND suite_version = ? AND status = ?"
        args: tuple[str, ...] = (system, suite_version, status)
        if case_key is not None:
            query, args = query + " AND case_key = ?", (*args, case_key)
        rows = self.db.execute(query + " ORDER BY id", args).fetchall()
        found = store_query.documents(self.db, rows, self.system_records(), runs=True, steps=True)
        return {document["case_key"]: document for document in found}

    def add_max_batch(
        self,
        system: str,
        memory_key: str,
        case: dict[str, Any],
        batch_size: int | None,
        probes: list[dict[str, Any]],
        note: str | None = None,
    ) -> int:
        """Store the outcome of a largest-batch search; return its id."""
        row = (system, memory_key, case, batch_size, probes, note)
        return self._write(lambda db: beside.insert_max_batch(db, *row))

    def max_batch(self, system: str, memory_key: str) -> dict[str, Any] | None:
        """The newest largest-batch search for these memory settings on this system."""
        return beside.newest_max_batch(self.db, system, memory_key)

    def max_batches(self) -> list[dict[str, Any]]:
        """Every stored largest-batch search, oldest first."""
        return beside.max_batches(self.db)

    def add_micro(
        self, system: dict[str, Any], params: dict[str, Any], result: dict[str, Any]
    ) -> int:
        """Store one micro-benchmark run (its rows and summary in ``metrics``)."""
        fingerprint = self.add_system(system)
        return self._write(lambda db: beside.insert_micro(db, fingerprint, params, result))

    def micro(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Stored micro-benchmark runs, oldest first."""
        return beside.micro(self.db, kind)

    def add_train_run(
        self,
        system: dict[str, Any],
        config: dict[str, Any],
        config_key: str,
        identity: tuple[str, str] | None = None,
    ) -> int:
        """Register a time-to-accuracy run that is starting (status ``running``, no
        evaluation yet); return its id. See ``trainperf.convergence.records``.
        ``identity``: the (uid, created_at) of the row another store holds for this run,
        when its later state is written here to be saved aside (trainperf.cli.train)."""
        fingerprint = self.add_system(system)
        row = (fingerprint, config, config_key, identity)
        return self._write(lambda db: beside.insert_train_run(db, *row))

    def update_train_run(
        self,
        run_id: int,
        evaluations: list[dict[str, Any]],
        *,
        status: str | None = None,
        reached: bool = False,
        time_to_target_s: float | None = None,
        metrics: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> None:
        """Replace a time-to-accuracy run's evaluations; ``status``, ``metrics`` and
        ``error`` change only when given."""
        changes = {"status": status, "reached": reached, "time_to_target_s": time_to_target_s}
        changes |= {"metrics": metrics, "error": error}
        self._write(lambda db: beside.update_train_run(db, run_id, evaluations, **changes))

    def train_runs(self, config_key: str | None = None) -> list[dict[str, Any]]:
        """Stored time-to-accuracy runs, oldest first, with their system record; only
        those of one configuration when ``config_key`` is given."""
        return beside.train_runs(self.db, config_key)

    def train_run(self, ref: str) -> dict[str, Any] | None:
        """The time-to-accuracy run with id or uid (or unique uid prefix) ``ref``, or None
        (``trainperf.store.beside.train_run``)."""
        return beside.train_run(self.db, ref)

    def achievable_tflops(self, system: str, device_type: str, dtype: str) -> float | None:
        """The best matmul TFLOP/s measured by ``micro gemm`` on this system and device type,
        over its full sweeps: a partial one (``--limit``, ``--shapes deepbench``) stores no
        ``max_achievable`` (trainperf.micro.gemm)."""
        best = None
        for run in self.micro("gemm"):
            if run["system"] != system or run["status"] != "ok":
                continue
            if run["params"].get("device") != device_type:
                continue
            found = (run["metrics"].get("max_achievable") or {}).get(dtype)
            if found and (best is None or found["tflops"] > best):
                best = found["tflops"]
        return best

    def select(
        self,
        result_filter: ResultFilter = EVERYTHING,
        *,
        runs: bool = False,
        steps: bool = False,
        oldest_first: bool = False,
    ) -> Selection:
        """The results ``result_filter`` selects, streamed as they are iterated, with their
        runs when ``runs`` and the runs' per-step lists when ``steps``
        (``trainperf.store.query.select``)."""
        return store_query.select(
            self.db,
            result_filter,
            runs=runs,
            steps=steps,
            oldest_first=oldest_first,
            systems=self.system_records(),
            where=str(self.path),
        )

    def rows_beside(
        self, table: str, result_filter: ResultFilter = EVERYTHING
    ) -> Iterator[dict[str, Any]]:
        """The sweeps, micro-benchmark runs, largest-batch searches or training runs
        (``table``) of the systems and time of ``result_filter``, streamed
        (``trainperf.store.query.rows_beside``)."""
        return store_query.rows_beside(
            self.db, table, result_filter, systems=self.system_records(), where=str(self.path)
        )

    def export_tables(
        self, result_filter: ResultFilter = EVERYTHING
    ) -> Iterator[tuple[str, Iterable[dict[str, Any]]]]:
        """What an export of ``result_filter`` holds, table by table, streamed
        (``trainperf.store.query.export_tables``)."""
        return store_query.export_tables(
            self.db, result_filter, systems=self.system_records(), where=str(self.path)
        )

    def present(self, table: str, keys: Iterable[str]) -> set[str]:
        """Those of ``keys`` (fingerprints, sweep ids or uids) that ``table`` holds, looked
        up by key alone (``trainperf.store.query.present``)."""
        return store_query.present(self.db, table, keys)

    def results(self, model: str | None = None) -> list[dict[str, Any]]:
        """Every stored result (of ``model`` only, when given), oldest first, as documents
        with their system record and their runs, per-step lists included."""
        chosen = ResultFilter(model=(model,)) if model else EVERYTHING
        return list(self.select(chosen, runs=True, steps=True))

    def doctor_verdicts(self, sweep_ids: Iterable[str]) -> dict[str, Any]:
        """The doctor's verdict of each of these sweeps by id (None where none was stored:
        sweeps before schema 9); ids the store lacks map to None too."""
        return store_query.doctor_verdicts(self.db, sweep_ids)

    def system_records(self) -> dict[str, dict[str, Any]]:
        """Every stored system's record by fingerprint: decoded once for a store opened to
        read (``read_only``, ``copy_of``), shared by every document read from it; read
        afresh each time from a store that writes (it may add systems)."""
        if self._records is not None:
            return self._records
        return store_query.system_records(self.db)

    def systems(self, result_filter: ResultFilter = EVERYTHING) -> list[dict[str, Any]]:
        """The records of the stored systems (those ``result_filter`` names, when it names
        some), in the order they were first seen."""
        records = self.system_records()
        chosen = store_query.chosen_systems(records, result_filter.system, str(self.path))
        return [records[fingerprint] for fingerprint in chosen]

    def sweeps(self) -> list[dict[str, Any]]:
        """The stored sweeps, oldest first: sweep_id, started_at, system (fingerprint),
        label, order_seed, doctor (the verdict, or None)."""
        rows = self.db.execute("SELECT * FROM sweeps ORDER BY rowid").fetchall()
        return [row_document(row) for row in rows]

    def runs(self) -> list[dict[str, Any]]:
        """Every stored run (one worker process measuring a case), oldest first."""
        rows = self.db.execute("SELECT * FROM runs ORDER BY id").fetchall()
        return [row_document(row) for row in rows]

    def claim(self, case: tuple[str, str, str], owner: Owner) -> dict[str, Any] | None:
        """Take or renew the lease of ``case`` (system, suite version, case key) for
        ``owner``, unless another live owner holds it (``trainperf.store.lease``): then return
        that owner's lease and change nothing."""
        where = "system = ? AND suite_version = ? AND case_key = ?"

        def take(db: sqlite3.Connection) -> dict[str, Any] | None:
            row = db.execute(f"SELECT * FROM leases WHERE {where}", case).fetchone()
            if row is not None and row["sweep_id"] != owner.sweep_id and lease.is_live(dict(row)):
                return dict(row)
            db.execute(
                "INSERT OR REPLACE INTO leases VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (*case, owner.sweep_id, owner.host, owner.pid, owner.pid_started, time.time()),
            )
            return None

        return self._write(take)

    def release(self, owner: Owner, case: tuple[str, str, str] | None = None) -> None:
        """Give up ``owner``'s lease of ``case``, or all of its leases."""
        where, args = "sweep_id = ?", (owner.sweep_id,)
        if case is not None:
            where += " AND system = ? AND suite_version = ? AND case_key = ?"
            args += case
        self._write(lambda db: db.execute(f"DELETE FROM leases WHERE {where}", args))

    def import_documents(
        self, documents: dict[str, list[dict[str, Any]]]
    ) -> dict[str, tuple[int, int, int]]:
        """Insert documents as ``trainperf.store.exchange`` exports them, keyed by table name
        (``systems``, ``sweeps``, ``results``, ``runs``, ``micro``, ``max_batch``,
        ``train_runs``), keeping their uids, times and sweep ids, all in one transaction:
        all or nothing. A row already here (same fingerprint, sweep id or uid) is left as
        it is, but for the two a recovery file completes (``trainperf.store.imported``).
        Return (added, already here, updated) per table. The caller checks the documents
        first (``exchange.validate``).
        """
        return self._write(lambda db: imported.insert_documents(db, documents))
