"""The SQL of the tables beside the results: largest-batch searches (``max_batch``),
micro-benchmark runs (``micro``) and time-to-accuracy runs (``train_runs``).

Each function runs on the connection ``trainperf.store.database.Store`` gives it, inside the
write transaction Store opens (``Store._write``) for an insert or update: Store stays the
one way in to the database, and this module holds what those rows are.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from typing import Any

from trainperf.core import strict_json
from trainperf.core.limits import INT64_MAX, ascii_digits
from trainperf.store.rows import now, row_document, train_run_document


def insert_max_batch(
    db: sqlite3.Connection,
    system: str,
    memory_key: str,
    case: dict[str, Any],
    batch_size: int | None,
    probes: list[dict[str, Any]],
    note: str | None,
) -> int:
    """Insert the outcome of a largest-batch search; return its id."""
    cursor = db.execute(
        "INSERT INTO max_batch (uid, system, created_at, memory_key, case_json,"
        " batch_size, probes_json, note) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (uuid.uuid4().hex, system, now(), memory_key, strict_json.dumps(case), batch_size)
        + (strict_json.dumps(probes), note),
    )
    return int(cursor.lastrowid)


def newest_max_batch(db: sqlite3.Connection, system: str, memory_key: str) -> dict[str, Any] | None:
    """The newest largest-batch search for these memory settings on this system."""
    row = db.execute(
        "SELECT * FROM max_batch WHERE system = ? AND memory_key = ? ORDER BY id DESC LIMIT 1",
        (system, memory_key),
    ).fetchone()
    return None if row is None else row_document(row)


def max_batches(db: sqlite3.Connection) -> list[dict[str, Any]]:
    """Every stored largest-batch search, oldest first."""
    return [row_document(row) for row in db.execute("SELECT * FROM max_batch ORDER BY id")]


def insert_micro(
    db: sqlite3.Connection, system: str, params: dict[str, Any], result: dict[str, Any]
) -> int:
    """Insert one micro-benchmark run of ``system`` (a fingerprint); return its id."""
    cursor = db.execute(
        "INSERT INTO micro (uid, system, created_at, kind, status, params_json,"
        " device_json, metrics_json, error_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            uuid.uuid4().hex,
            system,
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


def micro(db: sqlite3.Connection, kind: str | None) -> list[dict[str, Any]]:
    """Stored micro-benchmark runs (of ``kind`` only, when given), oldest first."""
    query, args = "SELECT * FROM micro", ()
    if kind:
        query, args = query + " WHERE kind = ?", (kind,)
    return [row_document(row) for row in db.execute(query + " ORDER BY id", args)]


def insert_train_run(
    db: sqlite3.Connection,
    system: str,
    config: dict[str, Any],
    config_key: str,
    identity: tuple[str, str] | None,
) -> int:
    """Insert a time-to-accuracy run that is starting (status ``running``, no evaluation
    yet) with the (uid, created_at) ``identity`` when given, new ones otherwise; return
    its id."""
    written = now()
    uid, created = identity or (uuid.uuid4().hex, written)
    cursor = db.execute(
        "INSERT INTO train_runs (uid, system, created_at, updated_at, status,"
        " config_json, config_key, evaluations_json, metrics_json)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (uid, system, created, written, "running", strict_json.dumps(config))
        + (config_key, "[]", "{}"),
    )
    return int(cursor.lastrowid)


def update_train_run(
    db: sqlite3.Connection,
    run_id: int,
    evaluations: list[dict[str, Any]],
    *,
    status: str | None,
    reached: bool,
    time_to_target_s: float | None,
    metrics: dict[str, Any] | None,
    error: dict[str, Any] | None,
) -> None:
    """Replace a time-to-accuracy run's evaluations; ``status``, ``metrics`` and ``error``
    change only when given (not None)."""
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


_TRAIN_RUNS = "SELECT t.*, s.record FROM train_runs t JOIN systems s ON s.fingerprint = t.system"


def _train_run(row: sqlite3.Row) -> dict[str, Any]:
    return train_run_document(row, json.loads(row["record"]))


def train_runs(db: sqlite3.Connection, config_key: str | None) -> list[dict[str, Any]]:
    """Stored time-to-accuracy runs, oldest first, with their system record; only those of
    one configuration when ``config_key`` is given."""
    query, args = _TRAIN_RUNS, ()
    if config_key:
        query, args = query + " WHERE t.config_key = ?", (config_key,)
    return [_train_run(row) for row in db.execute(query + " ORDER BY t.id", args)]


def train_run(db: sqlite3.Connection, ref: str) -> dict[str, Any] | None:
    """The time-to-accuracy run with id ``ref`` (a number) or uid (or a unique uid prefix of
    6+ hex), or None. An id is digits 0-9 ('²' is a digit to ``isdigit``, not to ``int``)
    and fits SQLite's 64-bit INTEGER; no row has a larger one. Digits that are no run's id
    may still begin a uid ('667108...'): then they are one."""
    if ascii_digits(ref):
        significant = ref.lstrip("0") or "0"  # int() of thousands of digits raises
        number = int(significant) if len(significant) <= 19 else INT64_MAX + 1
        if number <= INT64_MAX:
            row = db.execute(_TRAIN_RUNS + " WHERE t.id = ?", (number,)).fetchone()
            if row:
                return _train_run(row)
    if len(ref) < 6:
        return None
    rows = db.execute(_TRAIN_RUNS + " WHERE t.uid LIKE ?", (ref.lower() + "%",)).fetchall()
    return _train_run(rows[0]) if len(rows) == 1 else None
