"""The results store: one SQLite file, written only by the parent process.

Schema version lives in ``PRAGMA user_version``. History (add a migration for every bump):
  1: tables ``systems`` (fingerprint -> system record), ``runs`` (one per invocation) and
     ``results`` (one per case: status, full case, metrics, raw step times, error).

Each result is committed in its own transaction as soon as it arrives, so an interrupted
run keeps everything finished before the interruption.
"""

from __future__ import annotations

import json
import os
import sqlite3
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1

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

# version reached -> SQL taking the previous version to it
_MIGRATIONS: dict[int, str] = {1: _SCHEMA_V1}


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
        self.db = sqlite3.connect(self.path)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA foreign_keys = ON")
        self._migrate()

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self) -> None:
        version = self.schema_version
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} has schema version {version}, newer than this trainperf "
                f"({SCHEMA_VERSION}): upgrade trainperf to read it"
            )
        for target in range(version + 1, SCHEMA_VERSION + 1):
            with self.db:
                self.db.executescript(_MIGRATIONS[target])
                self.db.execute(f"PRAGMA user_version = {target}")

    def add_system(self, record: dict[str, Any]) -> str:
        with self.db:
            self.db.execute(
                "INSERT OR IGNORE INTO systems VALUES (?, ?, ?, ?)",
                (record["fingerprint"], record["hostname"], json.dumps(record), _now()),
            )
        return record["fingerprint"]

    def start_run(self, system: dict[str, Any], label: str | None = None) -> str:
        """Register the system and a new run; return the run id."""
        fingerprint = self.add_system(system)
        run_id = uuid.uuid4().hex[:12]
        with self.db:
            self.db.execute(
                "INSERT INTO runs VALUES (?, ?, ?, ?)", (run_id, _now(), fingerprint, label)
            )
        return run_id

    def add_result(self, run_id: str, system: str, result: dict[str, Any]) -> int:
        """Store one result (committed at once); return its id."""
        with self.db:
            cursor = self.db.execute(
                "INSERT INTO results (run_id, system, created_at, model, status, result_schema,"
                " case_json, device_json, metrics_json, error_json)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
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
                ),
            )
        return int(cursor.lastrowid)

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


def _document(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "run_id": row["run_id"],
        "created_at": row["created_at"],
        "status": row["status"],
        "result_schema": row["result_schema"],
        "case": json.loads(row["case_json"]),
        "device": json.loads(row["device_json"]) if row["device_json"] else None,
        "metrics": json.loads(row["metrics_json"]),
        "error": json.loads(row["error_json"]) if row["error_json"] else None,
        "system": json.loads(row["system_json"]),
    }
