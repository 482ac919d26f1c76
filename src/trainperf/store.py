"""The results store: one SQLite file, written only by the parent process.

The schema and its migrations are in ``trainperf.store_schema``.

Each result is committed in its own transaction as soon as it arrives, so an interrupted
run keeps everything finished before the interruption, and a process killed in the middle
of a write leaves no half row (SQLite rolls the journal back). Several sweeps may write one
database at once: it is in WAL mode, every write takes the write lock up front
(``BEGIN IMMEDIATE``) and waits up to ``BUSY_TIMEOUT_S`` for it.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainperf import lease, strict_json
from trainperf.lease import Owner
from trainperf.limits import INT64_MAX
from trainperf.store_rows import (
    IMPORTED_COLUMNS,
    column_value,
    insert_run,
    now,
    result_document,
    row_document,
    train_run_document,
)
from trainperf.store_schema import MIGRATION_STEPS, MIGRATIONS, SCHEMA_VERSION

# How long a writer waits for another to finish its transaction (ours take milliseconds).
BUSY_TIMEOUT_S = 60.0
SQLITE_HEADER = b"SQLite format 3\x00"


class StoreError(Exception):
    """A database path that cannot be used; the message is one line for the user."""


def check_writable(path: Path) -> None:
    """Raise ``StoreError`` unless ``path`` can hold the database. Writes nothing."""
    if path.exists():
        if path.is_dir():
            raise StoreError(
                f"--db {path} is a directory: give a file path, e.g. {path}/trainperf.db"
            )
        if not os.access(path, os.R_OK | os.W_OK):
            raise StoreError(f"--db {path} is not readable and writable by this user")
        with path.open("rb") as f:
            head = f.read(16)
        if head and head != SQLITE_HEADER:
            raise StoreError(f"--db {path} exists and is not an SQLite database")
        return
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise StoreError(f"--db {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise StoreError(f"--db {path}: directory {parent} is not writable by this user")


def check_readable(path: Path) -> None:
    """Raise ``StoreError`` unless ``path`` is an SQLite file this user can read (callers
    name the path: the message says what is wrong with it)."""
    if not path.is_file():
        kind = ": it is a directory" if path.is_dir() else ""
        raise StoreError(
            f"no results database at {path}{kind}: run `trainperf run` first or give --db"
        )
    if not os.access(path, os.R_OK):
        raise StoreError("not readable by this user")
    with path.open("rb") as f:
        head = f.read(16)
    if not head:
        raise StoreError("the file is empty: not a trainperf database")
    if head != SQLITE_HEADER:
        raise StoreError("not a trainperf database (not SQLite)")


def read_only_uri(path: Path) -> str:
    """The SQLite URI that reads ``path`` without writing anything, there or beside it.

    ``mode=ro`` alone is not enough for a WAL database: it makes the ``-wal`` and ``-shm``
    files when they are absent, owned by the reader (the owner's next write then fails),
    and cannot open the database in a directory the reader cannot write. Without a
    ``-wal`` file no writer has the database open (the last one to close removes it), so
    it is read ``immutable``: no lock, no file made. With one, a writer may be at work, and
    ``mode=ro`` reads its committed transactions through the files that are there.
    """
    uri = path.resolve().as_uri()
    wal = path.with_name(path.name + "-wal")
    return f"{uri}?mode=ro" if wal.exists() else f"{uri}?immutable=1"


class Store:
    """Open (creating or migrating) the database at ``path``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        # isolation_level=None: no implicit transactions; every write says where it begins.
        self.db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA foreign_keys = ON")
        self.db.execute("PRAGMA journal_mode = WAL")
        self._migrate()

    @classmethod
    def copy_of(cls, path: str | os.PathLike[str]) -> Store:
        """An in-memory copy of the database at ``path``, migrated to this trainperf's
        schema: reading a database this way writes nothing (``read_only_uri``), which is
        how every verb that only reads opens it. ``StoreError`` when ``path`` is missing,
        empty or not SQLite."""
        store = cls.__new__(cls)
        store.path = Path(path)
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
        return store

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, holding the write lock from its start."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    @property
    def schema_version(self) -> int:
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self) -> None:
        if self.schema_version == SCHEMA_VERSION:
            return
        # Read the version again under the write lock: another process may be migrating.
        with self._write() as db:
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

    def add_system(self, record: dict[str, Any]) -> str:
        with self._write() as db:
            db.execute(
                "INSERT OR IGNORE INTO systems VALUES (?, ?, ?, ?)",
                (record["fingerprint"], record["hostname"], strict_json.dumps(record), now()),
            )
        return record["fingerprint"]

    def start_sweep(
        self, system: dict[str, Any], label: str | None = None, order_seed: int | None = None
    ) -> str:
        """Register the system and a new sweep; return the sweep id."""
        fingerprint = self.add_system(system)
        sweep_id = uuid.uuid4().hex[:12]
        with self._write() as db:
            db.execute(
                "INSERT INTO sweeps VALUES (?, ?, ?, ?, ?)",
                (sweep_id, now(), fingerprint, label, order_seed),
            )
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
        with self._write() as db:
            insert_run(db, row | {"suite_version": suite_version, "case_key": case_key})
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
        with self._write() as db:
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

    def finished(
        self, system: str, suite_version: str, case_key: str | None = None
    ) -> dict[str, dict[str, Any]]:
        """The newest ok result of each case (or of the one ``case_key``) of a suite version
        on a system, by case key."""
        query = (
            "SELECT r.*, s.record AS system_json FROM results r"
            " JOIN systems s ON s.fingerprint = r.system"
            " WHERE r.system = ? AND r.suite_version = ? AND r.status = 'ok'"
        )
        args: tuple[str, ...] = (system, suite_version)
        if case_key is not None:
            query, args = query + " AND r.case_key = ?", (*args, case_key)
        rows = self.db.execute(query + " ORDER BY r.id", args).fetchall()
        return {row["case_key"]: document for row, document in self._with_runs(rows)}

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
        with self._write() as db:
            cursor = db.execute(
                "INSERT INTO max_batch (uid, system, created_at, memory_key, case_json,"
                " batch_size, probes_json, note) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (uuid.uuid4().hex, system, now(), memory_key, strict_json.dumps(case), batch_size)
                + (strict_json.dumps(probes), note),
            )
        return int(cursor.lastrowid)

    def max_batch(self, system: str, memory_key: str) -> dict[str, Any] | None:
        """The newest largest-batch search for these memory settings on this system."""
        row = self.db.execute(
            "SELECT * FROM max_batch WHERE system = ? AND memory_key = ? ORDER BY id DESC LIMIT 1",
            (system, memory_key),
        ).fetchone()
        return None if row is None else row_document(row)

    def max_batches(self) -> list[dict[str, Any]]:
        """Every stored largest-batch search, oldest first."""
        rows = self.db.execute("SELECT * FROM max_batch ORDER BY id").fetchall()
        return [row_document(row) for row in rows]

    def add_micro(
        self, system: dict[str, Any], params: dict[str, Any], result: dict[str, Any]
    ) -> int:
        """Store one micro-benchmark run (its rows and summary in ``metrics``)."""
        fingerprint = self.add_system(system)
        with self._write() as db:
            cursor = db.execute(
                "INSERT INTO micro (uid, system, created_at, kind, status, params_json,"
                " device_json, metrics_json, error_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    uuid.uuid4().hex,
                    fingerprint,
                    now(),
                    params["kind"],
                    result["status"],
                    strict_json.dumps(params),
                    strict_json.dumps(result.get("device")),
                    strict_json.dumps(result.get("metrics") or {}),
                    strict_json.dumps(result["error"]) if result.get("error") else None,
                ),
            )
        return int(cursor.lastrowid)

    def micro(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Stored micro-benchmark runs, oldest first."""
        query, args = "SELECT * FROM micro", ()
        if kind:
            query, args = query + " WHERE kind = ?", (kind,)
        rows = self.db.execute(query + " ORDER BY id", args).fetchall()
        return [row_document(row) for row in rows]

    def add_train_run(self, system: dict[str, Any], config: dict[str, Any], config_key: str) -> int:
        """Register a time-to-accuracy run that is starting (status ``running``, no
        evaluation yet); return its id. See ``trainperf.convergence.records``."""
        fingerprint = self.add_system(system)
        written = now()
        with self._write() as db:
            cursor = db.execute(
                "INSERT INTO train_runs (uid, system, created_at, updated_at, status,"
                " config_json, config_key, evaluations_json, metrics_json)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    uuid.uuid4().hex,
                    fingerprint,
                    written,
                    written,
                    "running",
                    strict_json.dumps(config),
                )
                + (config_key, "[]", "{}"),
            )
        return int(cursor.lastrowid)

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
        with self._write() as db:
            db.execute(
                "UPDATE train_runs SET updated_at = ?, evaluations_json = ?, reached = ?,"
                " time_to_target_s = ?, status = COALESCE(?, status),"
                " metrics_json = COALESCE(?, metrics_json), error_json = COALESCE(?, error_json)"
                " WHERE id = ?",
                (now(), strict_json.dumps(evaluations), int(reached), time_to_target_s, status)
                + (
                    strict_json.dumps(metrics) if metrics is not None else None,
                    strict_json.dumps(error) if error is not None else None,
                    run_id,
                ),
            )

    def train_runs(self, config_key: str | None = None) -> list[dict[str, Any]]:
        """Stored time-to-accuracy runs, oldest first, with their system record; only
        those of one configuration when ``config_key`` is given."""
        query, args = _TRAIN_RUNS, ()
        if config_key:
            query, args = query + " WHERE t.config_key = ?", (config_key,)
        rows = self.db.execute(query + " ORDER BY t.id", args).fetchall()
        return [train_run_document(row) for row in rows]

    def train_run(self, ref: str) -> dict[str, Any] | None:
        """The time-to-accuracy run with id ``ref`` (a number) or uid (or a unique uid
        prefix of 6+ hex), or None. An id is ASCII digits ('²' is a digit to ``isdigit``,
        not to ``int``) and fits SQLite's 64-bit INTEGER; no row has a larger one."""
        if ref.isascii() and ref.isdigit():
            significant = ref.lstrip("0") or "0"  # int() of thousands of digits raises
            number = int(significant) if len(significant) <= 19 else INT64_MAX + 1
            if number > INT64_MAX:
                return None
            row = self.db.execute(_TRAIN_RUNS + " WHERE t.id = ?", (number,)).fetchone()
            return train_run_document(row) if row else None
        if len(ref) < 6:
            return None
        rows = self.db.execute(_TRAIN_RUNS + " WHERE t.uid LIKE ?", (ref.lower() + "%",)).fetchall()
        return train_run_document(rows[0]) if len(rows) == 1 else None

    def achievable_tflops(self, system: str, device_type: str, dtype: str) -> float | None:
        """The best matmul TFLOP/s measured by ``micro gemm`` on this system and device type."""
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

    def results(self, model: str | None = None) -> list[dict[str, Any]]:
        """Stored results, oldest first, as documents with their system record."""
        query = (
            "SELECT r.*, s.record AS system_json FROM results r"
            " JOIN systems s ON s.fingerprint = r.system"
        )
        args: tuple[Any, ...] = ()
        if model:
            query += " WHERE r.model = ?"
            args = (model,)
        rows = self.db.execute(query + " ORDER BY r.id", args).fetchall()
        return [document for _, document in self._with_runs(rows)]

    def _with_runs(self, rows: list[sqlite3.Row]) -> list[tuple[sqlite3.Row, dict[str, Any]]]:
        """Each result row with its document, which holds its runs (``runs``)."""
        runs: dict[str, list[dict[str, Any]]] = {}
        uids = [row["uid"] for row in rows]
        for start in range(0, len(uids), 500):  # SQLite takes a few hundred ? at least
            chunk = uids[start : start + 500]
            found = self.db.execute(
                f"SELECT * FROM runs WHERE result_uid IN ({', '.join('?' * len(chunk))})"
                " ORDER BY run_number, id",
                chunk,
            ).fetchall()
            for run in found:
                runs.setdefault(run["result_uid"], []).append(row_document(run))
        return [(row, result_document(row) | {"runs": runs.get(row["uid"], [])}) for row in rows]

    def systems(self) -> list[dict[str, Any]]:
        """The records of the stored systems, in the order they were first seen."""
        rows = self.db.execute("SELECT record FROM systems ORDER BY rowid").fetchall()
        return [json.loads(row["record"]) for row in rows]

    def sweeps(self) -> list[dict[str, Any]]:
        """The stored sweeps, oldest first: sweep_id, started_at, system (fingerprint),
        label, order_seed."""
        rows = self.db.execute("SELECT * FROM sweeps ORDER BY rowid").fetchall()
        return [dict(row) for row in rows]

    def runs(self) -> list[dict[str, Any]]:
        """Every stored run (one worker process measuring a case), oldest first."""
        rows = self.db.execute("SELECT * FROM runs ORDER BY id").fetchall()
        return [row_document(row) for row in rows]

    def claim(self, case: tuple[str, str, str], owner: Owner) -> dict[str, Any] | None:
        """Take or renew the lease of ``case`` (system, suite version, case key) for
        ``owner``, unless another live owner holds it (``trainperf.lease``): then return
        that owner's lease and change nothing."""
        where = "system = ? AND suite_version = ? AND case_key = ?"
        with self._write() as db:
            row = db.execute(f"SELECT * FROM leases WHERE {where}", case).fetchone()
            if row is not None and row["sweep_id"] != owner.sweep_id and lease.is_live(dict(row)):
                return dict(row)
            db.execute(
                "INSERT OR REPLACE INTO leases VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (*case, owner.sweep_id, owner.host, owner.pid, owner.pid_started, time.time()),
            )
        return None

    def release(self, owner: Owner, case: tuple[str, str, str] | None = None) -> None:
        """Give up ``owner``'s lease of ``case``, or all of its leases."""
        where, args = "sweep_id = ?", (owner.sweep_id,)
        if case is not None:
            where += " AND system = ? AND suite_version = ? AND case_key = ?"
            args += case
        with self._write() as db:
            db.execute(f"DELETE FROM leases WHERE {where}", args)

    def import_documents(
        self, documents: dict[str, list[dict[str, Any]]]
    ) -> dict[str, tuple[int, int]]:
        """Insert documents as ``trainperf.exchange`` exports them, keyed by table name
        (``systems``, ``sweeps``, ``results``, ``runs``, ``micro``, ``max_batch``,
        ``train_runs``), keeping their uids, times and sweep ids. All go in one
        transaction: all or nothing. A row already here (same fingerprint, sweep id or
        uid) is left as it is. Return (added, already here)
        per table. The caller checks the documents first (``exchange.validate``).
        """
        counts = {}
        with self._write() as db:
            for table, columns in IMPORTED_COLUMNS.items():
                names = [name.strip() for name in columns.split(",")]
                marks = ", ".join("?" * len(names))
                sql = f"INSERT OR IGNORE INTO {table} ({columns}) VALUES ({marks})"
                rows = documents.get(table, [])
                added = sum(
                    db.execute(sql, [column_value(name, row) for name in names]).rowcount
                    for row in rows
                )
                counts[table] = (added, len(rows) - added)
        return counts


_TRAIN_RUNS = "SELECT t.*, s.record FROM train_runs t JOIN systems s ON s.fingerprint = t.system"
