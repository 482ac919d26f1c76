"""A database of schema 5, as trainperf wrote it before results were made of runs: for the
migration tests (tests/store/test_store_migration.py) and the comparison of one-run
results (tests/test_cli_compare.py). A module of its own so that either imports it
whatever else pytest collected."""

import json
import sqlite3
import uuid
from pathlib import Path

from trainperf.store import schema as store_schema

SEED = Path(__file__).parent / "data" / "cpu_measurements.json"


def old_database(path):
    """A schema-5 database holding real single-process results (the first run of each
    case of the seed file: a run's document is what a result was before runs existed),
    a skipped case and a crashed one."""
    seed = json.loads(SEED.read_text())
    system = seed["system"]
    results = [
        {k: v for k, v in r["runs"][0].items() if k != "run_number"} for r in seed["results"]
    ]
    results.append(
        results[0]
        | {
            "status": "skipped",
            "metrics": {},
            "device": None,
            "error": {"type": "skipped", "message": "no cuda"},
        }
    )
    crash = {"type": "crashed", "message": "killed by signal SIGKILL", "stderr_tail": "..."}
    results.append(results[0] | {"status": "crashed", "metrics": {}, "error": crash})
    db = sqlite3.connect(path, isolation_level=None)
    for version in range(1, 6):
        for statement in store_schema.MIGRATIONS[version].split(";"):
            if statement.strip():
                db.execute(statement)
    db.execute("PRAGMA user_version = 5")
    db.execute(
        "INSERT INTO systems VALUES (?, ?, ?, ?)",
        (system["fingerprint"], system["hostname"], json.dumps(system), "2026-11-01"),
    )
    db.execute(
        "INSERT INTO runs VALUES (?, ?, ?, ?)",
        ("oldrun000001", "2026-11-01T00:00:00+00:00", system["fingerprint"], "suite quick 0123"),
    )
    rows = []
    for r in results:
        row = {
            "uid": uuid.uuid4().hex,
            "run_id": "oldrun000001",
            "system": system["fingerprint"],
            "created_at": "2026-11-01T00:00:00+00:00",
            "model": r["case"]["model"],
            "status": r["status"],
            "result_schema": 1,
            "case_json": json.dumps(r["case"]),
            "device_json": json.dumps(r.get("device")),
            "metrics_json": json.dumps(r["metrics"]),
            "error_json": json.dumps(r["error"]) if r.get("error") else None,
            "suite": "quick",
            "suite_version": "0123",
            "case_key": uuid.uuid4().hex[:16],
        }
        db.execute(
            f"INSERT INTO results ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
            list(row.values()),
        )
        rows.append(row)
    db.close()
    return system, rows
