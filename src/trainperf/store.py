"""The results store: one SQLite file, written only by the parent process.

Schema version lives in ``PRAGMA user_version``. History (add a migration for every bump):
  1: tables ``systems`` (fingerprint -> system record), ``runs`` (one per invocation) and
     ``results`` (one per case: status, full case, metrics, raw step times, error).
  2: ``results`` gains ``suite``, ``suite_version`` and ``case_key`` (resuming a suite);
     table ``max_batch`` holds the largest batch found per system and memory settings.
  3: table ``micro`` holds micro-benchmark runs (kind, parameters, rows, summary); the
     profiles of ``trainperf profile`` are stored there too, with kind ``profile``.
  4: ``results``, ``micro`` and ``max_batch`` gain ``uid``, a random 32-hex id unique
     across databases (rows already there get a fresh one), so that an import
     (``trainperf.exchange``) recognises rows it has already copied.
  5: table ``train_runs`` holds time-to-accuracy runs (``trainperf train``): the
     configuration, every evaluation as it arrives, time to target, status
     (``trainperf.convergence.records`` reads and writes it).

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
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 5
# How long a writer waits for another to finish its transaction (ours take milliseconds).
BUSY_TIMEOUT_S = 60.0

_SCHEMA_V1 = """
CREATE TABLE systems (
    fingerprint TEXT PRIMARY KEY,
    hostname    TEXT NOT NULL,
    record      TEXT NOT NULL,
    first_seen  TEXT NOT NULL
);
CREATE TABLE runs (
    run_id      TEXT PRIMARY KEY,
    started_at  TEXT NOT NULL,
    system      TEXT NOT NULL REFERENCES systems(fingerprint),
    label       TEXT
);
CREATE TABLE results (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id        TEXT NOT NULL REFERENCES runs(run_id),
    system        TEXT NOT NULL REFERENCES systems(fingerprint),
    created_at    TEXT NOT NULL,
    model         TEXT NOT NULL,
    status        TEXT NOT NULL,
    result_schema INTEGER NOT NULL,
    case_json     TEXT NOT NULL,
    device_json   TEXT,
    metrics_json  TEXT NOT NULL,
    error_json    TEXT
);
CREATE INDEX results_model ON results(model);
"""

_SCHEMA_V2 = """
ALTER TABLE results ADD COLUMN suite TEXT;
ALTER TABLE results ADD COLUMN suite_version TEXT;
ALTER TABLE results ADD COLUMN case_key TEXT;
CREATE INDEX results_resume ON results(system, suite_version, case_key, status);
CREATE TABLE max_batch (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    system      TEXT NOT NULL REFERENCES systems(fingerprint),
    created_at  TEXT NOT NULL,
    memory_key  TEXT NOT NULL,
    case_json   TEXT NOT NULL,
    batch_size  INTEGER,
    probes_json TEXT NOT NULL,
    note        TEXT
);
CREATE INDEX max_batch_lookup ON max_batch(system, memory_key);
"""

_SCHEMA_V3 = """
CREATE TABLE micro (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    system      TEXT NOT NULL REFERENCES systems(fingerprint),
    created_at  TEXT NOT NULL,
    kind        TEXT NOT NULL,
    status      TEXT NOT NULL,
    params_json TEXT NOT NULL,
    device_json TEXT,
    metrics_json TEXT NOT NULL,
    error_json  TEXT
);
CREATE INDEX micro_kind ON micro(system, kind)
"""

_SCHEMA_V4 = """
ALTER TABLE results ADD COLUMN uid TEXT;
UPDATE results SET uid = lower(hex(randomblob(16)));
CREATE UNIQUE INDEX results_uid ON results(uid);
ALTER TABLE micro ADD COLUMN uid TEXT;
UPDATE micro SET uid = lower(hex(randomblob(16)));
CREATE UNIQUE INDEX micro_uid ON micro(uid);
ALTER TABLE max_batch ADD COLUMN uid TEXT;
UPDATE max_batch SET uid = lower(hex(randomblob(16)));
CREATE UNIQUE INDEX max_batch_uid ON max_batch(uid)
"""

_SCHEMA_V5 = """
CREATE TABLE train_runs (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    uid              TEXT NOT NULL UNIQUE,
    system           TEXT NOT NULL REFERENCES systems(fingerprint),
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    status           TEXT NOT NULL,
    config_json      TEXT NOT NULL,
    config_key       TEXT NOT NULL,
    reached          INTEGER NOT NULL DEFAULT 0,
    time_to_target_s REAL,
    evaluations_json TEXT NOT NULL,
    metrics_json     TEXT NOT NULL,
    error_json       TEXT
);
CREATE INDEX train_runs_config ON train_runs(config_key)
"""

# version reached -> SQL taking the previous version to it (statements split on ';')
_MIGRATIONS: dict[int, str] = {
    1: _SCHEMA_V1,
    2: _SCHEMA_V2,
    3: _SCHEMA_V3,
    4: _SCHEMA_V4,
    5: _SCHEMA_V5,
}


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
        if head and head != b"SQLite format 3\x00":
            raise StoreError(f"--db {path} exists and is not an SQLite database")
        return
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise StoreError(f"--db {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise StoreError(f"--db {path}: directory {parent} is not writable by this user")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


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
                for statement in _MIGRATIONS[target].split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {target}")

    def add_system(self, record: dict[str, Any]) -> str:
        with self._write() as db:
            db.execute(
                "INSERT OR IGNORE INTO systems VALUES (?, ?, ?, ?)",
                (record["fingerprint"], record["hostname"], json.dumps(record), _now()),
            )
        return record["fingerprint"]

    def start_run(self, system: dict[str, Any], label: str | None = None) -> str:
        """Register the system and a new run; return the run id."""
        fingerprint = self.add_system(system)
        run_id = uuid.uuid4().hex[:12]
        with self._write() as db:
            db.execute("INSERT INTO runs VALUES (?, ?, ?, ?)", (run_id, _now(), fingerprint, label))
        return run_id

    def add_result(
        self,
        run_id: str,
        system: str,
        result: dict[str, Any],
        *,
        suite: tuple[str, str] | None = None,
        case_key: str | None = None,
    ) -> int:
        """Store one result (committed at once); return its id.

        ``suite`` is (name, version) when the case came from a suite, ``case_key`` its key
        there; both let a rerun of the suite find the cases already done.
        """
        suite_name, suite_version = suite or (None, None)
        with self._write() as db:
            cursor = db.execute(
                "INSERT INTO results (uid, run_id, system, created_at, model, status,"
                " result_schema, case_json, device_json, metrics_json, error_json, suite,"
                " suite_version, case_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    uuid.uuid4().hex,
                    run_id,
                    system,
                    _now(),
                    result["case"]["model"],
                    result["status"],
                    result["result_schema"],
                    json.dumps(result["case"]),
                    json.dumps(result.get("device")),
                    json.dumps(result.get("metrics") or {}),
                    json.dumps(result["error"]) if result.get("error") else None,
                    suite_name,
                    suite_version,
                    case_key,
                ),
            )
        return int(cursor.lastrowid)

    def finished(self, system: str, suite_version: str) -> dict[str, dict[str, Any]]:
        """The newest ok result of each case of a suite version on a system, by case key."""
        rows = self.db.execute(
            "SELECT r.*, s.record AS system_json FROM results r"
            " JOIN systems s ON s.fingerprint = r.system"
            " WHERE r.system = ? AND r.suite_version = ? AND r.status = 'ok'"
            " ORDER BY r.id",
            (system, suite_version),
        ).fetchall()
        return {row["case_key"]: _document(row) for row in rows}

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
                (uuid.uuid4().hex, system, _now(), memory_key, json.dumps(case), batch_size)
                + (json.dumps(probes), note),
            )
        return int(cursor.lastrowid)

    def max_batch(self, system: str, memory_key: str) -> dict[str, Any] | None:
        """The newest largest-batch search for these memory settings on this system."""
        row = self.db.execute(
            "SELECT * FROM max_batch WHERE system = ? AND memory_key = ? ORDER BY id DESC LIMIT 1",
            (system, memory_key),
        ).fetchone()
        return None if row is None else _row_document(row)

    def max_batches(self) -> list[dict[str, Any]]:
        """Every stored largest-batch search, oldest first."""
        rows = self.db.execute("SELECT * FROM max_batch ORDER BY id").fetchall()
        return [_row_document(row) for row in rows]

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
                    _now(),
                    params["kind"],
                    result["status"],
                    json.dumps(params),
                    json.dumps(result.get("device")),
                    json.dumps(result.get("metrics") or {}),
                    json.dumps(result["error"]) if result.get("error") else None,
                ),
            )
        return int(cursor.lastrowid)

    def micro(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Stored micro-benchmark runs, oldest first."""
        query, args = "SELECT * FROM micro", ()
        if kind:
            query, args = query + " WHERE kind = ?", (kind,)
        rows = self.db.execute(query + " ORDER BY id", args).fetchall()
        return [_row_document(row) for row in rows]

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
        return [_document(row) for row in rows]

    def systems(self) -> list[dict[str, Any]]:
        """The records of the stored systems, in the order they were first seen."""
        rows = self.db.execute("SELECT record FROM systems ORDER BY rowid").fetchall()
        return [json.loads(row["record"]) for row in rows]

    def runs(self) -> list[dict[str, Any]]:
        """The stored runs, oldest first: run_id, started_at, system (fingerprint), label."""
        rows = self.db.execute("SELECT * FROM runs ORDER BY rowid").fetchall()
        return [dict(row) for row in rows]

    def import_documents(
        self, documents: dict[str, list[dict[str, Any]]]
    ) -> dict[str, tuple[int, int]]:
        """Insert documents as ``trainperf.exchange`` exports them, keyed by table name
        (``systems``, ``runs``, ``results``, ``micro``, ``max_batch``, ``train_runs``),
        keeping their uids,
        times and run ids. All go in one transaction: all or nothing. A row already here
        (same fingerprint, run id or uid) is left as it is. Return (added, already here)
        per table. The caller checks the documents first (``exchange.validate``).
        """
        counts = {}
        with self._write() as db:
            for table, columns in _IMPORTED.items():
                names = [name.strip() for name in columns.split(",")]
                marks = ", ".join("?" * len(names))
                sql = f"INSERT OR IGNORE INTO {table} ({columns}) VALUES ({marks})"
                rows = documents.get(table, [])
                added = sum(
                    db.execute(sql, [_column_value(name, row) for name in names]).rowcount
                    for row in rows
                )
                counts[table] = (added, len(rows) - added)
        return counts


# The columns an import fills, per table, tables in an order that inserts what a row refers
# to (systems, runs) before the row. ``X_json`` holds the document's ``X`` as JSON.
_IMPORTED: dict[str, str] = {
    "systems": "fingerprint, hostname, record, first_seen",
    "runs": "run_id, started_at, system, label",
    "results": "uid, run_id, system, created_at, model, status, result_schema, suite,"
    " suite_version, case_key, case_json, device_json, metrics_json, error_json",
    "micro": "uid, system, created_at, kind, status, params_json, device_json, metrics_json,"
    " error_json",
    "max_batch": "uid, system, created_at, memory_key, batch_size, note, case_json, probes_json",
    "train_runs": "uid, system, created_at, updated_at, status, config_key, reached,"
    " time_to_target_s, config_json, evaluations_json, metrics_json, error_json",
}


def _column_value(column: str, document: dict[str, Any]) -> Any:
    """The value of ``column`` for an imported document (see ``_IMPORTED``)."""
    if column == "record":  # a system's document is its record
        return json.dumps(document)
    if column == "first_seen":
        return _now()
    if column == "model":
        return document["case"]["model"]
    if column.endswith("_json"):
        value = document[column.removesuffix("_json")]
        return None if value is None else json.dumps(value)
    return document[column]


def _maybe_json(text: str | None) -> Any:
    return json.loads(text) if text else None


def _row_document(row: sqlite3.Row) -> dict[str, Any]:
    """A row as a document: each ``X_json`` column becomes ``X``, decoded."""
    return {
        key.removesuffix("_json"): _maybe_json(row[key]) if key.endswith("_json") else row[key]
        for key in row.keys()  # noqa: SIM118 (a Row iterates over its values)
    }


def _document(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "uid": row["uid"],
        "run_id": row["run_id"],
        "created_at": row["created_at"],
        "status": row["status"],
        "result_schema": row["result_schema"],
        "case": json.loads(row["case_json"]),
        "device": _maybe_json(row["device_json"]),
        "metrics": json.loads(row["metrics_json"]),
        "error": _maybe_json(row["error_json"]),
        "suite": row["suite"],
        "suite_version": row["suite_version"],
        "case_key": row["case_key"],
        "system": json.loads(row["system_json"]),
    }
