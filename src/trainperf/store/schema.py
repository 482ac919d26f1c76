"""The schema of the results store and its migrations (used by ``trainperf.store.database``).

Schema version lives in ``PRAGMA user_version``. History (add a migration for every bump):
  1: tables ``systems`` (fingerprint -> system record), ``runs`` (one per invocation) and
     ``results`` (one per case: status, full case, metrics, raw step times, error).
  2: ``results`` gains ``suite``, ``suite_version`` and ``case_key`` (resuming a suite);
     table ``max_batch`` holds the largest batch found per system and memory settings.
  3: table ``micro`` holds micro-benchmark runs (kind, parameters, rows, summary); the
     profiles of ``trainperf profile`` are stored there too, with kind ``profile``.
  4: ``results``, ``micro`` and ``max_batch`` gain ``uid``, a random 32-hex id unique
     across databases (rows already there get a fresh one), so that an import
     (``trainperf.store.exchange``) recognises rows it has already copied.
  5: table ``train_runs`` holds time-to-accuracy runs (``trainperf train``): the
     configuration, every evaluation as it arrives, time to target, status
     (``trainperf.convergence.records`` reads and writes it).
  6: a case is measured in several runs (independent worker processes). The old table
     ``runs`` (one execution of a suite) becomes ``sweeps`` (``run_id`` -> ``sweep_id``,
     also in ``results``, plus the ``order_seed`` of its interleaved runs); a new table
     ``runs`` holds every run, committed as it finishes, with the ``result_uid`` of the
     result it belongs to (NULL while its case is unfinished: a resumed sweep counts
     them). ``results`` hold the combination of their runs (``trainperf.case.result``,
     result schema 2); each result stored before becomes a 1-run result and its run
     (``case_result.from_legacy``), nothing dropped.
  7: table ``leases``: the case (system, suite version, case key) that a running sweep is
     measuring, with its owner (sweep id, host, pid and the process's start time) and when
     the owner last renewed it, so that a concurrent sweep of the same suite skips it
     (``trainperf.store.lease``). Leases stay home: an export does not carry them.
  8: strict JSON: every number in a ``*_json`` column (and a system's record) is finite.
     trainperf before this wrote NaN and Infinity there (per-run intervals of runs of 1 to
     3 steps, Fieller's unbounded ratios, a diverged DDP loss); each becomes null with
     ``<key>_absent_reason`` beside it (``strict_json.finite``), the format 4 rule.
  9: ``sweeps`` gain ``doctor_json``: the verdict of ``trainperf doctor``'s checks taken as
     the sweep started (trainperf.doctor: each check's status, what was seen, its value),
     so that every result says under which conditions it was measured. NULL for sweeps
     stored before, and for sweeps of a trainperf that did not examine the machine.
"""

from __future__ import annotations

import sqlite3

from trainperf.core import strict_json

SCHEMA_VERSION = 9

SCHEMA_V1 = """
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

SCHEMA_V2 = """
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

SCHEMA_V3 = """
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

SCHEMA_V4 = """
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

SCHEMA_V5 = """
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

SCHEMA_V6 = """
ALTER TABLE runs RENAME TO sweeps;
ALTER TABLE sweeps RENAME COLUMN run_id TO sweep_id;
ALTER TABLE sweeps ADD COLUMN order_seed INTEGER;
ALTER TABLE results RENAME COLUMN run_id TO sweep_id;
CREATE TABLE runs (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    uid           TEXT NOT NULL UNIQUE,
    sweep_id      TEXT NOT NULL REFERENCES sweeps(sweep_id),
    system        TEXT NOT NULL REFERENCES systems(fingerprint),
    created_at    TEXT NOT NULL,
    result_uid    TEXT,
    suite_version TEXT,
    case_key      TEXT,
    run_number    INTEGER NOT NULL,
    status        TEXT NOT NULL,
    result_schema INTEGER NOT NULL,
    case_json     TEXT NOT NULL,
    device_json   TEXT,
    metrics_json  TEXT NOT NULL,
    error_json    TEXT
);
CREATE INDEX runs_result ON runs(result_uid);
CREATE INDEX runs_pending ON runs(system, suite_version, case_key) WHERE result_uid IS NULL
"""

SCHEMA_V7 = """
CREATE TABLE leases (
    system        TEXT NOT NULL,
    suite_version TEXT NOT NULL,
    case_key      TEXT NOT NULL,
    sweep_id      TEXT NOT NULL,
    host          TEXT NOT NULL,
    pid           INTEGER NOT NULL,
    pid_started   REAL NOT NULL,
    renewed_at    REAL NOT NULL,
    PRIMARY KEY (system, suite_version, case_key)
)
"""


def _results_to_runs(db: sqlite3.Connection) -> None:
    """Schema 6: every stored result becomes a 1-run result beside its run."""
    from trainperf.case.result import from_legacy, legacy_run_uid
    from trainperf.store.rows import insert_run, row_document

    rows = db.execute("SELECT * FROM results ORDER BY id").fetchall()
    for row in rows:
        result, run = from_legacy(row_document(row))
        db.execute(
            "UPDATE results SET result_schema = ?, case_json = ?, metrics_json = ?,"
            " error_json = ? WHERE id = ?",
            (
                result["result_schema"],
                strict_json.dumps(result["case"]),
                strict_json.dumps(result["metrics"]),
                strict_json.dumps(result["error"]) if result.get("error") else None,
                row["id"],
            ),
        )
        if run is not None:
            run |= {"uid": legacy_run_uid(row["uid"]), "result_uid": row["uid"]}
            run |= {k: row[k] for k in ("sweep_id", "system", "created_at", "suite_version")}
            insert_run(db, run | {"case_key": row["case_key"]})


# The JSON columns of each table (schema 8 makes their numbers finite).
JSON_COLUMNS = {
    "systems": ("record",),
    "results": ("case_json", "device_json", "metrics_json", "error_json"),
    "runs": ("case_json", "device_json", "metrics_json", "error_json"),
    "micro": ("params_json", "device_json", "metrics_json", "error_json"),
    "max_batch": ("case_json", "probes_json"),
    "train_runs": ("config_json", "evaluations_json", "metrics_json", "error_json"),
}


def _finite_numbers(db: sqlite3.Connection) -> None:
    """Schema 8: NaN and Infinity in stored JSON become null with their reason. Only the
    texts that can hold one (SQLite's LIKE is a quick filter) are decoded."""
    import json

    for table, columns in JSON_COLUMNS.items():
        for column in columns:
            rows = db.execute(
                f"SELECT rowid, {column} FROM {table}"
                f" WHERE {column} LIKE '%Infinity%' OR {column} LIKE '%NaN%'"
            ).fetchall()
            for rowid, text in rows:
                converted = strict_json.dumps(strict_json.finite(json.loads(text)))
                if converted != text:
                    db.execute(
                        f"UPDATE {table} SET {column} = ? WHERE rowid = ?", (converted, rowid)
                    )


# version reached -> SQL taking the previous version to it (statements split on ';'),
# then Python for what SQL cannot say
MIGRATIONS: dict[int, str] = {
    1: SCHEMA_V1,
    2: SCHEMA_V2,
    3: SCHEMA_V3,
    4: SCHEMA_V4,
    5: SCHEMA_V5,
    6: SCHEMA_V6,
    7: SCHEMA_V7,
    8: "",
    9: "ALTER TABLE sweeps ADD COLUMN doctor_json TEXT",
}
MIGRATION_STEPS = {6: _results_to_runs, 8: _finite_numbers}


# The store a verb opens without --db: a file in the current directory (``--db``'s default,
# trainperf.cli.common; the disk that ``trainperf doctor`` checks for room).
DEFAULT_DB = "trainperf.db"
