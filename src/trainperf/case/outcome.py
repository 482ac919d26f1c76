"""What became of a case, or of one run of it: one immutable record, one constructor per outcome.

Every result document trainperf writes (a worker's run, a job of another kind, a case's
combined result) is made here, so its shape is decided once:
``{result_schema, status, case, device, metrics, error}`` plus, for an ok job of another
kind, the keys that job adds. The constructors, by status:
- ``ok``: the work ended and returned its device and metrics;
- ``from_exception``: the work raised: ``oom`` when device or host memory ran out (told from
  the exception), ``diverged`` when the loss stopped being finite (with the phase, step and
  rank where it did; trainperf.measure.divergence), ``error`` otherwise, with the
  exception's type, message and traceback;
- ``crashed`` and ``timeout``: seen from outside by the parent (trainperf.launch.runner), with the
  tail of the child's stderr;
- ``skipped``: a case that was not run, and why;
- ``unmeasured``: a case that failed before any process measured it (its largest-batch
  search found no batch, or could not conclude);
- ``failed_run``: a case's result when one of its runs failed after others went well.

A record is frozen, and ``document()`` gives a fresh dict each time: a reader that adds
to a document (the sweep numbers its runs) changes its own copy, never the record.

Schemas. A run document (a worker's output) is ``RUN_SCHEMA``; a result that combines the
runs of a case (trainperf.case.result) is ``RESULT_SCHEMA``. History:
  run 1: the worker's document (the only kind of result before runs existed);
  result 2: a result combines its runs; migrated 1-run results are of this schema too.
"""

from __future__ import annotations

import copy
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal

RUN_SCHEMA = 1
RESULT_SCHEMA = 2

Status = Literal["ok", "oom", "error", "crashed", "timeout", "diverged", "skipped"]
FAILED_STATUSES: tuple[Status, ...] = ("oom", "timeout", "crashed", "error", "diverged")
# Messages by which PyTorch, XLA and the C++ allocators report exhausted memory.
OOM_MARKERS = (
    "out of memory",
    "can't allocate memory",
    "not enough memory",
    "failed to allocate",
    "resource_exhausted",  # XLA's status code (JAX), whatever the message after it
)
TRACEBACK_CHARS = 8000
MESSAGE_CHARS = 500


def _frozen(value: Any) -> Any:
    """A read-only deep copy of ``value``: mappings become read-only, lists tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: _frozen(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    return copy.deepcopy(value)


def _thawed(value: Any) -> Any:
    """A plain, deep copy of ``value`` (read-only mappings become dicts)."""
    if isinstance(value, Mapping):
        return {k: _thawed(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_thawed(v) for v in value]
    return copy.deepcopy(value)


@dataclass(frozen=True)
class Outcome:
    """One result document as a typed, read-only record."""

    status: Status
    case: Mapping[str, Any]
    device: Mapping[str, Any] | None = None
    metrics: Mapping[str, Any] = field(default_factory=dict)
    error: Mapping[str, Any] | None = None
    schema: int = RUN_SCHEMA
    extra: Mapping[str, Any] = field(default_factory=dict)  # further keys of an ok job

    def __post_init__(self) -> None:
        for name in ("case", "device", "metrics", "error", "extra"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))

    def document(self) -> dict[str, Any]:
        """The record as the JSON document the worker writes and the store keeps."""
        document = {
            "result_schema": self.schema,
            "status": self.status,
            "case": _thawed(self.case),
            "device": _thawed(self.device),
            "metrics": _thawed(self.metrics),
            "error": _thawed(self.error),
        }
        return document | _thawed(self.extra)

    def on_rank(self, rank: int) -> Outcome:
        """A failure as rank ``rank`` of a distributed job saw it (named in its message),
        unless it names its rank already (a divergence found on another rank)."""
        if self.error is None or "rank" in self.error:
            return self
        error = dict(self.error) | {"message": f"rank {rank}: {self.error.get('message', '')}"}
        return replace(self, error=error | {"rank": rank})

    # --- constructors, one per outcome -----------------------------------------------

    @classmethod
    def ok(
        cls, case: Mapping[str, Any], body: Mapping[str, Any], schema: int = RUN_SCHEMA
    ) -> Outcome:
        """The work ended; ``body`` holds its ``device``, ``metrics`` and any further keys."""
        rest = {k: v for k, v in body.items() if k not in ("device", "metrics", "error")}
        return cls("ok", case, body.get("device"), body.get("metrics") or {}, None, schema, rest)

    @classmethod
    def from_exception(cls, case: Mapping[str, Any], exc: BaseException) -> Outcome:
        """The work raised ``exc``: ``oom`` when memory ran out, ``diverged`` when the loss
        did not stay finite, ``error`` otherwise."""
        from trainperf.measure.divergence import Diverged

        if isinstance(exc, Diverged):
            error = {"type": "diverged", "message": str(exc)} | exc.details()
            return cls("diverged", case, error=error)
        out_of_memory = is_out_of_memory(exc)
        error = {
            "type": type(exc).__name__,
            "message": _oom_sentence(exc) if out_of_memory else first_line(exc),
            "traceback": "".join(traceback.format_exception(exc))[-TRACEBACK_CHARS:],
        }
        return cls("oom" if out_of_memory else "error", case, error=error)

    @classmethod
    def crashed(cls, case: Mapping[str, Any], message: str, stderr_tail: str) -> Outcome:
        """The child process ended without a result (a signal, an exit code)."""
        error = {"type": "crashed", "message": message, "stderr_tail": stderr_tail}
        return cls("crashed", case, error=error)

    @classmethod
    def timeout(cls, case: Mapping[str, Any], message: str, stderr_tail: str) -> Outcome:
        """The child ran out of time and was killed."""
        error = {"type": "timeout", "message": message, "stderr_tail": stderr_tail}
        return cls("timeout", case, error=error)

    @classmethod
    def skipped(cls, case: Mapping[str, Any], reason: str) -> Outcome:
        """A case that was not run, and why (excluded, no such hardware, ...)."""
        error = {"type": "skipped", "message": reason}
        return cls("skipped", case, error=error, schema=RESULT_SCHEMA)

    @classmethod
    def unmeasured(
        cls,
        case: Mapping[str, Any],
        status: Literal["oom", "error"],
        message: str,
        error_type: str,
    ) -> Outcome:
        """A case that failed before any run measured it (its largest-batch search)."""
        error = {"type": error_type, "message": message}
        return cls(status, case, error=error, schema=RESULT_SCHEMA)

    @classmethod
    def failed_run(
        cls,
        case: Mapping[str, Any],
        ok_runs: Sequence[Mapping[str, Any]],
        failure: Mapping[str, Any],
    ) -> Outcome:
        """The result of a case whose run ``failure`` (a run document) failed after
        ``ok_runs`` went well: that run's status and error, naming the run."""
        error = dict(failure.get("error") or {"type": failure["status"], "message": ""})
        number = failure.get("run_number", len(ok_runs) + 1)
        error["run"] = number
        if ok_runs:
            earlier = f"{len(ok_runs)} earlier run" + ("s" if len(ok_runs) > 1 else "")
            error["message"] = f"{error.get('message', '')} (run {number}; {earlier} ok)"
        device = failure.get("device") or (ok_runs[0].get("device") if ok_runs else None)
        return cls(failure["status"], case, device, {}, error, RESULT_SCHEMA)


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says that device or host memory ran out."""
    import torch

    if isinstance(exc, torch.OutOfMemoryError | MemoryError):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(m in text for m in OOM_MARKERS)


def first_line(exc: BaseException, limit: int = MESSAGE_CHARS) -> str:
    """The first line of an exception's message, cut to ``limit`` characters."""
    lines = str(exc).strip().splitlines()
    return lines[0][:limit] if lines else ""


def _oom_sentence(exc: BaseException) -> str:
    """From the sentence that says memory ran out: allocator messages often start with a
    C++ assertion ('[enforce fail at alloc_cpu.cpp:117] err == 0. DefaultCPUAllocator: ...')."""
    line = first_line(exc)
    lowered = line.lower()
    found = [lowered.find(m) for m in OOM_MARKERS if m in lowered]
    if not found:
        return line
    start = line.rfind(". ", 0, min(found))
    return line[start + 2 :] if start >= 0 else line
