"""The shape of trainperf's results file (see trainperf.exchange): its format and version,
its tables and the fields of their rows, as pydantic models checked strictly; and the one
error an export or import raises. Both the current reader (trainperf.exchange) and the
reader of older formats (trainperf.exchange_legacy) build on these.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from trainperf.limits import MAX_COUNT

FORMAT = "trainperf-results"
FORMAT_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
TABLES = ("systems", "sweeps", "results", "runs", "micro", "max_batch", "train_runs")
ROW_TABLES = ("results", "runs", "micro", "max_batch", "train_runs")  # rows with a uid
# The statuses a result or micro-benchmark run can have (sweep.py: ok, FAILED_STATUSES,
# skipped); spelled out here so that reading a file does not import torch.
STATUSES = ("ok", "oom", "timeout", "crashed", "error", "skipped")


class ExchangeError(Exception):
    """An export or import that cannot be done; the message is one line for the user."""


# --- the file's shape -------------------------------------------------------------------

Uid = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]
Key = Annotated[str, StringConstraints(min_length=1)]
Status = Literal["ok", "oom", "timeout", "crashed", "error", "skipped"]
Json = dict[str, Any]


class Item(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _Open(BaseModel):
    """A free-form object of which a few fields are checked."""

    model_config = ConfigDict(extra="allow", strict=True)


class SystemItem(_Open):
    fingerprint: Key
    hostname: str


class CaseItem(_Open):
    model: Key


class SweepItem(Item):
    sweep_id: Key
    started_at: str
    system: Key
    label: str | None
    order_seed: Annotated[int, Field(ge=0)] | None = None


class Measured(Item):
    """What a result and a run both hold: where and when, the outcome, the case and its
    measurements."""

    uid: Uid
    system: Key
    created_at: str
    status: Status
    result_schema: Annotated[int, Field(ge=1)]
    case: CaseItem
    device: Json | None
    metrics: Json
    error: Json | None
    suite_version: str | None
    case_key: str | None


class ResultFields(Measured):
    """A result's fields but the sweep it belongs to (named differently by format)."""

    suite: str | None


class ResultItem(ResultFields):
    sweep_id: Key


class RunItem(Measured):
    sweep_id: Key
    result_uid: Uid | None
    run_number: Annotated[int, Field(ge=1)]


class MicroItem(Item):
    uid: Uid
    system: Key
    created_at: str
    kind: Key
    status: Status
    params: Json
    device: Json | None
    metrics: Json
    error: Json | None


class MaxBatchItem(Item):
    uid: Uid
    system: Key
    created_at: str
    memory_key: str
    case: Json
    batch_size: Annotated[int, Field(ge=1, le=MAX_COUNT)] | None
    probes: list[Json]
    note: str | None


class TrainRunItem(Item):
    uid: Uid
    system: Key
    created_at: str
    updated_at: str
    status: Literal["running", "ok", "aborted", "oom", "timeout", "crashed", "error"]
    config: CaseItem
    config_key: Key
    reached: bool
    time_to_target_s: float | None
    evaluations: list[Json]
    metrics: Json
    error: Json | None


class ExportFile(Item):
    format: Literal["trainperf-results"]
    format_version: int
    exported_at: str
    trainperf_version: str
    systems: list[SystemItem]
    sweeps: list[SweepItem]
    results: list[ResultItem]
    runs: list[RunItem]
    micro: list[MicroItem]
    max_batch: list[MaxBatchItem]
    train_runs: list[TrainRunItem] = []  # absent from version 1 files


def without(document: Json, *keys: str) -> Json:
    return {k: v for k, v in document.items() if k not in keys}


def check_throughput(metrics: Json, where: str) -> None:
    """An ok result must say its throughput: the comparisons divide by it."""

    def positive(value: Any) -> bool:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        return number and value > 0 and value != float("inf")

    if not positive(metrics.get("samples_per_s_median")):
        found = short_value(metrics.get("samples_per_s_median"))
        raise ExchangeError(
            f"{where}.samples_per_s_median: expected a positive number, got {found}"
        )
    runs = metrics.get("run_samples_per_s")
    if runs is not None and not (isinstance(runs, list) and runs and all(map(positive, runs))):
        found = short_value(runs)
        raise ExchangeError(
            f"{where}.run_samples_per_s: expected an array of positive numbers, got {found}"
        )


def short_value(value: Any, limit: int = 60) -> str:
    """A value for an error message, cut to ``limit`` characters."""
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
