"""Files of formats 1 and 2 (written before a case had runs), read as the current format.

In those files sweeps were called runs (``run_id``) and a result was one worker's
document. ``upgrade`` turns a checked file into the current format: each result becomes a
1-run result beside its run, made exactly as the store's migration makes them
(``case_result.from_legacy``, run uids derived from the result's), so that importing an
old file and a new export of the same database adds nothing twice.
"""

from __future__ import annotations

from typing import Literal

from trainperf.case.result import from_legacy, legacy_run_uid
from trainperf.store.exchange_format import (
    Item,
    Json,
    Key,
    MaxBatchItem,
    MicroItem,
    Name,
    ResultFields,
    SystemItem,
    Timestamp,
    TrainRunItem,
    without,
)
from trainperf.store.exchange_metrics import check_throughput


class LegacySweepItem(Item):
    """A sweep in a file of format 1 or 2, where sweeps were called runs."""

    run_id: Key
    started_at: Timestamp
    system: Key
    label: Name | None


class LegacyResultItem(ResultFields):
    """A result in a file of format 1 or 2: one worker's document."""

    run_id: Key


class LegacyExportFile(Item):
    format: Literal["trainperf-results"]
    format_version: int
    exported_at: Timestamp
    trainperf_version: Name
    systems: list[SystemItem]
    runs: list[LegacySweepItem]
    results: list[LegacyResultItem]
    micro: list[MicroItem]
    max_batch: list[MaxBatchItem]
    train_runs: list[TrainRunItem] = []  # absent from version 1 files


def upgrade(document: Json) -> Json:
    """A checked file of format 1 or 2 in the current format (see the format history)."""
    sweeps = [
        {"sweep_id": r["run_id"], **without(r, "run_id"), "order_seed": None}
        for r in document["runs"]
    ]
    results, runs = [], []
    for index, old in enumerate(document["results"]):
        if old["status"] == "ok":
            check_throughput(old["metrics"], f"results[{index}].metrics")
        result, run = from_legacy(old)
        shared = {"sweep_id": old["run_id"], "system": old["system"]}
        upgraded = {k: result[k] for k in ("result_schema", "status", "case", "device")}
        upgraded |= {"metrics": result["metrics"], "error": result["error"]}
        results.append(without(old, "run_id") | upgraded | shared)
        if run is not None:
            runs.append(
                run
                | shared
                | {
                    "uid": legacy_run_uid(old["uid"]),
                    "created_at": old["created_at"],
                    "result_uid": old["uid"],
                    "suite_version": old["suite_version"],
                    "case_key": old["case_key"],
                }
            )
    return document | {"sweeps": sweeps, "results": results, "runs": runs}
