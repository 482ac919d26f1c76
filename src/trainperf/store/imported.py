"""The rows of an import written into the store (``Store.import_documents``, in its one
transaction): each row the store lacks added, keeping its uid, times and sweep id; a row
it has left as it is, but for the two that a recovery file completes
(``trainperf.store.recovery``, ``trainperf.cli.train``):

- a run stored before its result (its sweep stopped first) joins the result the document
  gives it;
- a training run stored as ``running`` takes the document's state when that has ended and
  was written no earlier (the run ended while the database could not be written).

The documents are checked before (``exchange.validate``, ``exchange.resolve``).
"""

from __future__ import annotations

import sqlite3
from datetime import datetime
from typing import Any

from trainperf.store.rows import IMPORTED_COLUMNS, column_value

# What of a training run changes after it starts: the state a later copy brings.
_TRAIN_STATE = (
    "updated_at",
    "status",
    "reached",
    "time_to_target_s",
    "evaluations_json",
    "metrics_json",
    "error_json",
)
_LATER_TRAIN_STATE = (
    "UPDATE train_runs SET "
    + ", ".join(f"{column} = ?" for column in _TRAIN_STATE)
    + " WHERE uid = ? AND status = 'running'"
)


def insert_documents(
    db: sqlite3.Connection, documents: dict[str, list[dict[str, Any]]]
) -> dict[str, tuple[int, int, int]]:
    """Write ``documents`` (keyed by table) as the module doc says; return (added, already
    here, updated) per table."""
    counts = {}
    for table, columns in IMPORTED_COLUMNS.items():
        names = [name.strip() for name in columns.split(",")]
        marks = ", ".join("?" * len(names))
        sql = f"INSERT OR IGNORE INTO {table} ({columns}) VALUES ({marks})"
        rows = documents.get(table, [])
        added = updated = 0
        for row in rows:
            if db.execute(sql, [column_value(name, row) for name in names]).rowcount:
                added += 1
            elif table == "train_runs" and _finishes(db, row):
                state = [column_value(column, row) for column in _TRAIN_STATE]
                updated += db.execute(_LATER_TRAIN_STATE, [*state, row["uid"]]).rowcount
        counts[table] = (added, len(rows) - added - updated, updated)
    joined = [(r["result_uid"], r["uid"]) for r in documents.get("runs", [])]
    db.executemany(
        "UPDATE runs SET result_uid = ? WHERE uid = ? AND result_uid IS NULL",
        [pair for pair in joined if pair[0] is not None],
    )
    return counts


def _finishes(db: sqlite3.Connection, row: dict[str, Any]) -> bool:
    """Does the imported training run ``row`` end the run this store holds as running (same
    uid and system; ``row`` not running, written no earlier)? Times are compared as times:
    a file keeps each as written, with any UTC offset, and rows are written to the second,
    so a run that ended within the second of its last stored evaluation counts."""
    if row["status"] == "running":
        return False
    stored = db.execute(
        "SELECT updated_at FROM train_runs WHERE uid = ? AND system = ? AND status = 'running'",
        (row["uid"], row["system"]),
    ).fetchone()
    if stored is None:
        return False
    return datetime.fromisoformat(row["updated_at"]) >= datetime.fromisoformat(stored[0])
