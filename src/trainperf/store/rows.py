"""Rows of the results store as documents, and documents as rows (used by trainperf.store.database
and by the migrations of trainperf.store.schema): each ``X_json`` column holds the
document's ``X`` as JSON.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from trainperf.case.stored import as_stored_now, train_config_as_stored_now
from trainperf.core import strict_json


def now() -> str:
    """The time a row is written: UTC, ISO 8601, to the second."""
    return datetime.now(UTC).isoformat(timespec="seconds")


RUN_COLUMNS = (
    "uid, sweep_id, system, created_at, result_uid, suite_version, case_key, run_number,"
    " status, result_schema, case_json, device_json, metrics_json, error_json"
)


def insert_run(db: sqlite3.Connection, run: dict[str, Any]) -> None:
    """Insert a run document that has every column of ``RUN_COLUMNS`` (``result_uid``
    may be missing: a run not yet part of a result)."""
    names = [name.strip() for name in RUN_COLUMNS.split(",")]
    defaults = {"result_uid": None, "device": None, "error": None}
    values = [column_value(name, defaults | run) for name in names]
    marks = ", ".join("?" * len(names))
    db.execute(f"INSERT INTO runs ({RUN_COLUMNS}) VALUES ({marks})", values)


# The columns an import fills, per table, tables in an order that inserts what a row refers
# to (systems, runs) before the row. ``X_json`` holds the document's ``X`` as JSON.
IMPORTED_COLUMNS: dict[str, str] = {
    "systems": "fingerprint, hostname, record, first_seen",
    "sweeps": "sweep_id, started_at, system, label, order_seed, doctor_json",
    "results": "uid, sweep_id, system, created_at, model, status, result_schema, suite,"
    " suite_version, case_key, case_json, device_json, metrics_json, error_json",
    "runs": RUN_COLUMNS,
    "micro": "uid, system, created_at, kind, status, params_json, device_json, metrics_json,"
    " error_json",
    "max_batch": "uid, system, created_at, memory_key, batch_size, note, case_json, probes_json",
    "train_runs": "uid, system, created_at, updated_at, status, config_key, reached,"
    " time_to_target_s, config_json, evaluations_json, metrics_json, error_json",
}


def column_value(column: str, document: dict[str, Any]) -> Any:
    """The value of ``column`` for an imported document (see ``IMPORTED_COLUMNS``)."""
    if column == "record":  # a system's document is its record
        return strict_json.dumps(document)
    if column == "first_seen":
        return now()
    if column == "model":
        return document["case"]["model"]
    if column.endswith("_json"):
        value = document[column.removesuffix("_json")]
        return None if value is None else strict_json.dumps(value)
    return document[column]


def maybe_json(text: str | None) -> Any:
    return json.loads(text) if text else None


def decoded_columns(rows: Sequence[sqlite3.Row]) -> list[dict[str, Any]]:
    """The ``X_json`` columns of ``rows`` decoded, per row ``{X: value}`` (None where a
    column is empty), all in one ``json.loads``: the decoder keeps one string per key it
    meets again (its memo lasts one call), so a chunk of documents decoded together holds
    each metric's name once, not once per row (a third less memory), and decodes faster."""
    if not rows:
        return []
    names = [key for key in rows[0].keys() if key.endswith("_json")]  # noqa: SIM118
    values = json.loads("[" + ",".join(row[n] or "null" for row in rows for n in names) + "]")
    keys, width = [name.removesuffix("_json") for name in names], len(names)
    return [
        dict(zip(keys, values[i * width : (i + 1) * width], strict=True)) for i in range(len(rows))
    ]


def row_document(row: sqlite3.Row, decoded: dict[str, Any] | None = None) -> dict[str, Any]:
    """A row as a document: each ``X_json`` column becomes ``X``, decoded (or taken from
    ``decoded``, as ``decoded_columns`` gives it)."""
    return {
        key.removesuffix("_json"): (
            (decoded[key[:-5]] if decoded is not None else maybe_json(row[key]))
            if key.endswith("_json")
            else row[key]
        )
        for key in row.keys()  # noqa: SIM118 (a Row iterates over its values)
    }


def result_document(
    row: sqlite3.Row, system: dict[str, Any], decoded: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A result row as a document, with its system's record (``system``: shared by every
    result of that system, decoded once by the reader); its JSON columns taken from
    ``decoded`` when given (``decoded_columns``)."""
    if decoded is None:
        decoded = decoded_columns([row])[0]
    return {
        "id": row["id"],
        "uid": row["uid"],
        "sweep_id": row["sweep_id"],
        "created_at": row["created_at"],
        "status": row["status"],
        "result_schema": row["result_schema"],
        "case": as_stored_now(decoded["case"]),
        "device": decoded["device"],
        "metrics": decoded["metrics"],
        "error": decoded["error"],
        "suite": row["suite"],
        "suite_version": row["suite_version"],
        "case_key": row["case_key"],
        "system": system,
    }


def train_run_document(row: sqlite3.Row, system: Any) -> dict[str, Any]:
    """A training run's row as a document; ``system``: its system's record (or, in an
    export, its fingerprint)."""
    return {
        "id": row["id"],
        "uid": row["uid"],
        "system": system,
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "status": row["status"],
        "config": train_config_as_stored_now(json.loads(row["config_json"])),
        "config_key": row["config_key"],
        "reached": bool(row["reached"]),
        "time_to_target_s": row["time_to_target_s"],
        "evaluations": json.loads(row["evaluations_json"]),
        "metrics": json.loads(row["metrics_json"]),
        "error": maybe_json(row["error_json"]),
    }
