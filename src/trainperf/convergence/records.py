"""Time-to-accuracy runs in the results store (table ``train_runs``, schema v5).

A run is stored when it starts (status ``running``) and updated after every evaluation, so
an interrupted or killed run keeps what it reached; the final status replaces ``running``:
``ok`` (finished: target reached or epoch limit), ``aborted`` (stopped by the user),
``timeout``, ``crashed``, ``oom`` or ``error``.

``config_key`` groups the runs that repeat one configuration (every field except the seed
and the logging paths): the olympic mean of ``trainperf train --runs`` is taken over them.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

from trainperf.store import Store, _now

NOT_IN_KEY = ("seed", "mllog")


def config_key(config: dict[str, Any]) -> str:
    kept = {k: v for k, v in config.items() if k not in NOT_IN_KEY}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


def start_run(store: Store, system: dict[str, Any], config: dict[str, Any]) -> int:
    """Register a run that is starting; return its id."""
    fingerprint = store.add_system(system)
    now = _now()
    with store._write() as db:
        cursor = db.execute(
            "INSERT INTO train_runs (uid, system, created_at, updated_at, status, config_json,"
            " config_key, evaluations_json, metrics_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                uuid.uuid4().hex,
                fingerprint,
                now,
                now,
                "running",
                json.dumps(config),
                config_key(config),
                "[]",
                "{}",
            ),
        )
    return int(cursor.lastrowid)


def update_run(
    store: Store,
    run_id: int,
    evaluations: list[dict[str, Any]],
    *,
    status: str | None = None,
    reached: bool = False,
    time_to_target_s: float | None = None,
    metrics: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
) -> None:
    """Record the evaluations so far and, when the run has ended, its outcome."""
    with store._write() as db:
        db.execute(
            "UPDATE train_runs SET updated_at = ?, evaluations_json = ?, reached = ?,"
            " time_to_target_s = ?, status = COALESCE(?, status),"
            " metrics_json = COALESCE(?, metrics_json), error_json = COALESCE(?, error_json)"
            " WHERE id = ?",
            (
                _now(),
                json.dumps(evaluations),
                int(reached),
                time_to_target_s,
                status,
                json.dumps(metrics) if metrics is not None else None,
                json.dumps(error) if error is not None else None,
                run_id,
            ),
        )


def _document(row: Any) -> dict[str, Any]:
    return {
        "id": row["id"],
        "uid": row["uid"],
        "system": json.loads(row["record"]),
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "status": row["status"],
        "config": json.loads(row["config_json"]),
        "config_key": row["config_key"],
        "reached": bool(row["reached"]),
        "time_to_target_s": row["time_to_target_s"],
        "evaluations": json.loads(row["evaluations_json"]),
        "metrics": json.loads(row["metrics_json"]),
        "error": json.loads(row["error_json"]) if row["error_json"] else None,
    }


_SELECT = "SELECT t.*, s.record FROM train_runs t JOIN systems s ON s.fingerprint = t.system"


def load_runs(store: Store, key: str | None = None) -> list[dict[str, Any]]:
    """Stored runs, oldest first; only those of one configuration when ``key`` is given."""
    query, args = _SELECT, ()
    if key:
        query, args = query + " WHERE t.config_key = ?", (key,)
    return [_document(row) for row in store.db.execute(query + " ORDER BY t.id", args)]


def load_run(store: Store, ref: str) -> dict[str, Any] | None:
    """The run with id ``ref`` (a number) or uid (or a unique uid prefix of 6+ hex)."""
    if ref.isdigit():
        row = store.db.execute(_SELECT + " WHERE t.id = ?", (int(ref),)).fetchone()
        return _document(row) if row else None
    if len(ref) < 6:
        return None
    rows = store.db.execute(_SELECT + " WHERE t.uid LIKE ?", (ref.lower() + "%",)).fetchall()
    return _document(rows[0]) if len(rows) == 1 else None
