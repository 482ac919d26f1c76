"""The shape of trainperf's results file (see trainperf.store.exchange): its format and version,
its tables and the fields of their rows, as pydantic models checked strictly; and the one
error an export or import raises. Both the current reader (trainperf.store.exchange) and the
reader of older formats (trainperf.store.exchange_legacy) build on these.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from trainperf.core.limits import MAX_COUNT, control_problem

FORMAT = "trainperf-results"
FORMAT_VERSION = 5
READABLE_VERSIONS = (1, 2, 3, 4, 5)
# The first version whose numbers are all finite (RFC 8259); older files may hold NaN and
# Infinity, which read as null with their reason (trainperf.core.strict_json.finite).
FINITE_SINCE = 4
# The first version in which a result gathers runs (older files: trainperf.store.exchange_legacy).
RUNS_SINCE = 3
# The first version whose sweeps carry the doctor's verdict (store schema 9); in older
# files every sweep reads with ``doctor`` null.
DOCTOR_SINCE = 5
TABLES = ("systems", "sweeps", "results", "runs", "micro", "max_batch", "train_runs")
ROW_TABLES = ("results", "runs", "micro", "max_batch", "train_runs")  # rows with a uid
# The statuses a result or micro-benchmark run can have (sweep.py: ok, FAILED_STATUSES,
# skipped); spelled out here so that reading a file does not import torch.
STATUSES = ("ok", "oom", "timeout", "crashed", "error", "diverged", "skipped")


class ExchangeError(Exception):
    """An export or import that cannot be done; the message is one line for the user."""


# --- the file's shape -------------------------------------------------------------------


def _printable(text: str) -> str:
    if problem := control_problem(text):
        raise ValueError(problem)
    return text


def _timestamp(text: str) -> str:
    """An ISO 8601 time with its UTC offset, kept as written (the round trip is exact)."""
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text[:40]!r} is not an ISO 8601 time") from None
    if parsed.tzinfo is None:
        raise ValueError(f"{text!r} has no UTC offset (trainperf writes e.g. +00:00)")
    return text


Uid = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]
# A name (a host, a suite, a kind) or an id: printable text (limits.control_problem).
Name = Annotated[str, AfterValidator(_printable)]
Key = Annotated[str, StringConstraints(min_length=1), AfterValidator(_printable)]
Timestamp = Annotated[str, AfterValidator(_timestamp)]
Status = Literal["ok", "oom", "timeout", "crashed", "error", "diverged", "skipped"]
Json = dict[str, Any]


class Item(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _Open(BaseModel):
    """A free-form object of which a few fields are checked."""

    model_config = ConfigDict(extra="allow", strict=True)


class CpuItem(_Open):
    """A system's CPU (``trainperf.system.inventory.cpu_section``): its names are text the
    report and ``results`` print."""

    model: Name | None = None
    vendor: Name | None = None
    arch: Name | None = None


class GpuItem(_Open):
    """One GPU of a system (``trainperf.system.gpu``)."""

    name: Name | None = None


class SystemItem(_Open):
    """A system record (``trainperf.system.inventory.collect``): the sections its readers
    open, each of its type (a default: a record of an older trainperf may lack one)."""

    fingerprint: Key
    hostname: Name
    os: Name | None = None
    cpu: CpuItem | None = None
    memory: Json | None = None
    gpus: list[GpuItem] | None = None
    topology: Json | None = None
    network: list[Json] | None = None
    infiniband: list[Json] | None = None
    software: Json | None = None
    env: Json | None = None


class CaseItem(_Open):
    model: Key


CheckStatus = Literal["ok", "warn", "fail", "absent"]


class DoctorCheckItem(Item):
    """One check of the doctor's verdict (trainperf.doctor.checks.Check.document)."""

    name: Key
    status: CheckStatus
    seen: Name
    why: Name
    fix: Name | None
    value: Any
    condition: bool
    value_absent_reason: Name | None = None


class DoctorItem(Item):
    """The doctor's verdict on the machine as a sweep started (trainperf.doctor)."""

    doctor_schema: Annotated[int, Field(ge=1)]
    verdict: Literal["ok", "warn", "fail"]
    counts: dict[CheckStatus, Annotated[int, Field(ge=0)]]
    seconds: Annotated[float, Field(ge=0)] | None
    seconds_absent_reason: Name | None = None
    checks: list[DoctorCheckItem]


class SweepItem(Item):
    sweep_id: Key
    started_at: Timestamp
    system: Key
    label: Name | None
    order_seed: Annotated[int, Field(ge=0)] | None = None
    doctor: DoctorItem | None = None  # absent before version 5


class Measured(Item):
    """What a result and a run both hold: where and when, the outcome, the case and its
    measurements."""

    uid: Uid
    system: Key
    created_at: Timestamp
    status: Status
    result_schema: Annotated[int, Field(ge=1)]
    case: CaseItem
    device: Json | None
    metrics: Json
    error: Json | None
    suite_version: Name | None
    case_key: Name | None


class ResultFields(Measured):
    """A result's fields but the sweep it belongs to (named differently by format)."""

    suite: Name | None


class ResultItem(ResultFields):
    sweep_id: Key


class RunItem(Measured):
    sweep_id: Key
    result_uid: Uid | None
    run_number: Annotated[int, Field(ge=1)]


class MicroItem(Item):
    uid: Uid
    system: Key
    created_at: Timestamp
    kind: Key
    status: Status
    params: Json
    device: Json | None
    metrics: Json
    error: Json | None


class MaxBatchItem(Item):
    uid: Uid
    system: Key
    created_at: Timestamp
    memory_key: Name
    case: Json
    batch_size: Annotated[int, Field(ge=1, le=MAX_COUNT)] | None
    probes: list[Json]
    note: str | None


class TrainRunItem(Item):
    uid: Uid
    system: Key
    created_at: Timestamp
    updated_at: Timestamp
    status: Literal["running", "ok", "aborted", "oom", "timeout", "crashed", "error", "diverged"]
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
    exported_at: Timestamp
    trainperf_version: Name
    systems: list[SystemItem]
    sweeps: list[SweepItem]
    results: list[ResultItem]
    runs: list[RunItem]
    micro: list[MicroItem]
    max_batch: list[MaxBatchItem]
    train_runs: list[TrainRunItem] = []  # absent from version 1 files


def without(document: Json, *keys: str) -> Json:
    return {k: v for k, v in document.items() if k not in keys}


def is_json_number(value: Any) -> bool:
    """A JSON number (a bool is not one)."""
    return not isinstance(value, bool) and isinstance(value, int | float)


# What a system's description measures (``trainperf.system``): byte counts, clocks, link
# speeds and core counts are never negative (0: a machine without swap).
SYSTEM_AMOUNTS = ("_bytes", "_mhz", "_mbps")
SYSTEM_COUNTS = ("sockets", "cores", "threads")


def system_problem(system: Json, where: str) -> str | None:
    """The first amount of ``system`` (a key ending in ``SYSTEM_AMOUNTS``, or one of
    ``SYSTEM_COUNTS``; a dict under such a key holds amounts) that is not a number >= 0,
    named by its path; or None."""
    stack: list[tuple[str, Any, bool]] = [(where, system, False)]
    while stack:
        path, value, amount = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                named = isinstance(key, str) and (
                    key.endswith(SYSTEM_AMOUNTS) or key in SYSTEM_COUNTS
                )
                stack.append((f"{path}.{key}", item, amount or named))
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", item, False) for i, item in enumerate(value))
        elif amount and value is not None and not (is_json_number(value) and value >= 0):
            return f"{path}: expected a number >= 0, got {short_value(value)}"
    return None


def short_value(value: Any, limit: int = 60) -> str:
    """A value for an error message, cut to ``limit`` characters."""
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
