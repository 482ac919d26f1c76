"""A database of schema 5 (one process per result) opens as schema 6 (results of runs), and
a file exported before runs existed imports into it without adding anything twice."""

import json
import sqlite3

import pytest

from old_store import old_database
from trainperf.case.stored import ADDED_CASE_FIELDS
from trainperf.store import exchange
from trainperf.store.database import SCHEMA_VERSION, Store


@pytest.fixture
def migrated(tmp_path):
    path = tmp_path / "old.db"
    system, rows = old_database(path)
    with Store(path) as store:
        yield store, system, rows


def test_every_result_becomes_a_one_run_result_with_nothing_lost(migrated):
    store, system, rows = migrated
    assert store.schema_version == SCHEMA_VERSION == 9
    results = store.results()
    assert [r["uid"] for r in results] == [row["uid"] for row in rows]
    for result, row in zip(results, rows, strict=True):
        old = json.loads(row["metrics_json"])
        assert result["sweep_id"] == "oldrun000001"
        as_read = json.loads(row["case_json"]) | {"runs": 1} | ADDED_CASE_FIELDS
        assert result["case"] == as_read
        if row["status"] == "skipped":
            assert result["runs"] == []
            continue
        (run,) = result["runs"]
        assert run["metrics"] == old and run["status"] == row["status"]  # every old value
        assert run["case"] == json.loads(row["case_json"]) and run["run_number"] == 1
        if row["status"] == "ok":
            m = result["metrics"]
            assert m["samples_per_s_median"] == old["samples_per_s_median"]
            assert m["runs"] == 1 and m["samples_per_s_ci95"] is None
            assert "no between-run interval" in m["ci95_absent_reason"]
    assert store.sweeps() == [
        {
            "sweep_id": "oldrun000001",
            "started_at": "2026-11-01T00:00:00+00:00",
            "system": system["fingerprint"],
            "label": "suite quick 0123",
            "order_seed": None,
            "doctor": None,  # schema 9: not examined before
        }
    ]


def test_an_old_export_adds_nothing_to_the_migrated_database(migrated):
    store, system, rows = migrated
    old_file = {
        "format": "trainperf-results",
        "format_version": 2,
        "exported_at": "2026-11-02T00:00:00+00:00",
        "trainperf_version": "0.1.0",
        "systems": [system],
        "runs": [
            {
                "run_id": "oldrun000001",
                "started_at": "2026-11-01T00:00:00+00:00",
                "system": system["fingerprint"],
                "label": "suite quick 0123",
            }
        ],
        "results": [
            {
                k.removesuffix("_json"): (json.loads(v) if k.endswith("_json") and v else v)
                for k, v in row.items()
                if k != "model"
            }
            for row in rows
        ],
        "micro": [],
        "max_batch": [],
        "train_runs": [],
    }
    summary = exchange.import_document(store, old_file)
    assert sum(summary.added.values()) == 0
    assert summary.already_present["results"] == len(rows)
    assert summary.already_present["runs"] == len(rows) - 1  # the skipped case had none


def test_schema_7_adds_an_empty_table_of_leases(migrated):
    store, _, _ = migrated
    assert store.db.execute("SELECT count(*) FROM leases").fetchone()[0] == 0


def test_schema_8_turns_stored_nan_and_infinity_into_null_with_the_reason(tmp_path):
    """A database written before strict JSON holds Infinity (a run's interval of two steps)
    and NaN (a DDP run's diverged loss); opened now, each is null with its reason, and the
    database exports as strict JSON."""
    path = tmp_path / "old.db"
    old_database(path)
    with Store(path):
        pass  # migrated to the current schema
    db = sqlite3.connect(path, isolation_level=None)
    metrics = json.loads(db.execute("SELECT metrics_json FROM runs LIMIT 1").fetchone()[0])
    metrics |= {"ci95_relative": float("inf"), "final_loss": float("nan")}
    db.execute("UPDATE runs SET metrics_json = ? WHERE id = 1", (json.dumps(metrics),))
    db.execute("ALTER TABLE sweeps DROP COLUMN doctor_json")  # back to schema 7's tables
    db.execute("PRAGMA user_version = 7")
    db.close()
    with Store(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        (stored,) = [r["metrics"] for r in store.runs() if r["id"] == 1]
        document = exchange.export_document(store)
    assert stored["ci95_relative"] is None and stored["final_loss"] is None
    assert "not a finite number (inf)" in stored["ci95_relative_absent_reason"]
    assert "not a finite number (nan)" in stored["final_loss_absent_reason"]
    from trainperf.core.strict_json import dumps, loads

    loads(dumps(document))
