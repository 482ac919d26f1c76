"""The largest batch size per device that trains: doubling, then bisection, every probe isolated.

A probe is the case itself at one batch size with the step policy ``fixed:1:2`` (one
warm-up and two measured steps: the optimizer state exists from the first step, so the
third step has met the peak memory of training), run in its own child process like any
case. A probe that ends ``oom`` does not fit. On a CPU, Linux usually over-commits memory
and its OOM killer ends the process with SIGKILL instead of a failed allocation, so a probe
killed by SIGKILL counts as not fitting too (the note says so). Any other failure (an
error, a crash, a timeout) says nothing about memory and ends the search with that failure.

The search itself (``search``) is a pure function over a ``fits(batch_size)`` callback, so
it is tested without running a model.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trainperf.case import Case

PROBE_STEPS = "fixed:1:2"
DEFAULT_LIMIT = 65536
DEFAULT_PROBE_TIMEOUT_S = 900.0
# The case fields on which the memory of a training step depends.
MEMORY_FIELDS = (
    "model",
    "image_size",
    "seq_len",
    "precision",
    "device",
    "devices",
    "nodes",
    "channels_last",
    "compile",
)


class SearchFailed(RuntimeError):
    """A probe failed for a reason other than memory: the search cannot conclude."""


@dataclass(frozen=True)
class Probe:
    batch_size: int
    fits: bool
    status: str
    message: str = ""


@dataclass
class MaxBatch:
    """Outcome of a search: ``batch_size`` None when not even the smallest batch fits."""

    batch_size: int | None
    probes: list[Probe] = field(default_factory=list)
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "batch_size": self.batch_size,
            "note": self.note,
            "probes": [asdict(p) for p in self.probes],
        }


def memory_key(case: Case | dict[str, Any]) -> str:
    """16 hex of SHA-256 over the fields that decide a step's memory."""
    fields = case.model_dump() if isinstance(case, Case) else case
    identity = {name: fields.get(name) for name in MEMORY_FIELDS}
    # The framework decides the memory too; PyTorch's keys stay those stored before the
    # field existed.
    if (framework := fields.get("framework", "pytorch")) != "pytorch":
        identity["framework"] = framework
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def search(fits: Callable[[int], Probe], start: int = 1, limit: int = DEFAULT_LIMIT) -> MaxBatch:
    """Double from ``start`` until a batch does not fit (or ``limit``), then bisect.

    Invariant of the bisection: ``low`` fits (0: nothing fits yet), ``high`` does not.
    Returns the largest batch size that fits, found with about 2*log2(answer) probes.
    """
    if not 1 <= start <= limit:
        raise ValueError(f"start must be between 1 and the limit {limit}, got {start}")
    outcome = MaxBatch(batch_size=None)

    def probe(batch_size: int) -> bool:
        result = fits(batch_size)
        outcome.probes.append(result)
        return result.fits

    low, batch = 0, start
    while probe(batch):
        low = batch
        if batch >= limit:
            outcome.batch_size = low
            outcome.note = f"reached the limit of {limit}; larger batches were not tried"
            return outcome
        batch = min(2 * batch, limit)
    high = batch
    while high - low > 1:
        middle = (low + high) // 2
        if probe(middle):
            low = middle
        else:
            high = middle
    outcome.batch_size = low or None
    if low == 0:
        outcome.note = f"batch {start} does not fit" if start == 1 else "no batch size fits"
    if any(p.status == "crashed" for p in outcome.probes if not p.fits):
        outcome.note = (outcome.note + "; " if outcome.note else "") + (
            "probes killed by SIGKILL were counted as out of host memory (the OOM killer)"
        )
    return outcome


def probe_verdict(result: dict[str, Any], batch_size: int) -> Probe:
    """Turn the result of a probe run into fits / does not fit, or raise SearchFailed."""
    status = result["status"]
    message = (result.get("error") or {}).get("message", "")
    if status == "ok":
        return Probe(batch_size, True, status)
    if status == "oom":
        return Probe(batch_size, False, status, message)
    if status == "crashed" and "SIGKILL" in message:
        return Probe(batch_size, False, status, message)
    raise SearchFailed(f"the probe at batch {batch_size} ended {status}: {message}")


def probe_case(template: Case, batch_size: int) -> Case:
    """The case run by a probe: ``template`` at ``batch_size`` with a short fixed policy."""
    fields = template.model_dump() | {"batch_size": batch_size, "steps": PROBE_STEPS}
    if fields["timeout_s"] is None:
        fields["timeout_s"] = DEFAULT_PROBE_TIMEOUT_S
    return Case.model_validate(fields)


def find_max_batch(
    template: Case,
    workdir: Path,
    *,
    start: int = 1,
    limit: int = DEFAULT_LIMIT,
    on_probe: Callable[[Probe], None] = lambda p: None,
    stop: Any = None,
) -> MaxBatch:
    """Search the largest batch of ``template`` that trains, each probe in a child process.

    ``stop`` is the runner's StopFlag: a stop request kills the running probe and raises
    ``runner.Interrupted``.
    """
    from trainperf.runner import run_in_child

    def fits(batch_size: int) -> Probe:
        result = run_in_child(probe_case(template, batch_size), workdir, stop)
        verdict = probe_verdict(result, batch_size)
        on_probe(verdict)
        return verdict

    return search(fits, start, limit)
