"""The largest batch size per device that trains: doubling, then bisection, every probe isolated.

The same search finds the longest sequence a language model trains at a given batch
(``dimension="seq_len"``), e.g. per device of a sharded (fsdp) case on N ranks: a probe
of a data-parallel case is the whole torchrun job, and a rank that runs out of memory
fails the probe.

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

from trainperf.case.spec import Case, parallel_mode

PROBE_STEPS = "fixed:1:2"
DEFAULT_LIMIT = 65536
DEFAULT_PROBE_TIMEOUT_S = 900.0
# What a search varies: the batch per device, or a language model's sequence length.
DIMENSIONS = ("batch_size", "seq_len")
# Fields added since max-batch results were first stored, with the value every case had
# before: they enter the memory key only away from it, so stored keys stay theirs.
ADDED_MEMORY_FIELDS = {
    "framework": "pytorch",
    "activation_checkpointing": "none",
    "reshard_after_forward": True,
    "fsdp_reduce": "fp32",
}
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
    for name, before in ADDED_MEMORY_FIELDS.items():
        if (value := fields.get(name, before)) != before:
            identity[name] = value
    # Sharding divides the state over the ranks; ddp and a single device keep the keys
    # stored before fsdp existed.
    if parallel_mode(fields) == "fsdp":
        identity["parallel"] = "fsdp"
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def search(
    fits: Callable[[int], Probe], start: int = 1, limit: int = DEFAULT_LIMIT, what: str = "batch"
) -> MaxBatch:
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
            outcome.note = f"reached the limit of {limit}; no larger {what} was tried"
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
        outcome.note = f"{what} {start} does not fit" if start == 1 else f"no {what} fits"
    if any(p.status == "crashed" for p in outcome.probes if not p.fits):
        outcome.note = (outcome.note + "; " if outcome.note else "") + (
            "probes killed by SIGKILL were counted as out of host memory (the OOM killer)"
        )
    return outcome


def probe_verdict(result: dict[str, Any], batch_size: int, what: str = "batch") -> Probe:
    """Turn the result of a probe run into fits / does not fit, or raise SearchFailed."""
    status = result["status"]
    message = (result.get("error") or {}).get("message", "")
    if status == "ok":
        return Probe(batch_size, True, status)
    if status == "oom":
        return Probe(batch_size, False, status, message)
    if status == "crashed" and "SIGKILL" in message:
        return Probe(batch_size, False, status, message)
    raise SearchFailed(f"the probe at {what} {batch_size} ended {status}: {message}")


def probe_case(template: Case, value: int, dimension: str = "batch_size") -> Case:
    """The case run by a probe: ``template`` with ``dimension`` (batch_size or seq_len) set
    to ``value``, under a short fixed policy."""
    fields = template.model_dump() | {dimension: value, "steps": PROBE_STEPS}
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
    dimension: str = "batch_size",
) -> MaxBatch:
    """Search the largest batch (or ``dimension`` seq_len: sequence length) of ``template``
    that trains, each probe in a child process (a torchrun job for ddp and fsdp). A probe's
    ``batch_size`` field holds the value tried.

    ``stop`` is the runner's StopFlag: a stop request kills the running probe and raises
    ``runner.Interrupted``.
    """
    from trainperf.launch.runner import run_in_child

    what = "batch" if dimension == "batch_size" else "sequence length"

    def fits(batch_size: int) -> Probe:
        result = run_in_child(probe_case(template, batch_size, dimension), workdir, stop)
        verdict = probe_verdict(result, batch_size, what)
        on_probe(verdict)
        return verdict

    return search(fits, start, limit, what)


class NotALanguageModel(ValueError):
    """A sequence-length search of a model that is no language model of the zoo."""


def search_limit(template: Case, dimension: str, limit: int | None) -> int:
    """The largest value a search of ``template`` tries: ``limit`` when given, else
    DEFAULT_LIMIT; a sequence length no longer than the model's longest (its ``max_size``).
    ``NotALanguageModel`` for a sequence-length search of another model."""
    if dimension == "seq_len":
        from trainperf import models as zoo

        spec = zoo.look_up(template.model)  # None for a user's network (never run here)
        if spec is None or not spec.is_language_model:
            raise NotALanguageModel(template.model)
        ceiling = spec.max_size or DEFAULT_LIMIT
        return min(limit, ceiling) if limit else ceiling
    return limit or DEFAULT_LIMIT


def run_search(
    template: Case,
    *,
    start: int = 1,
    limit: int = DEFAULT_LIMIT,
    on_probe: Callable[[Probe], None] = lambda p: None,
    dimension: str = "batch_size",
) -> MaxBatch:
    """``find_max_batch`` in a job folder of its own (``runner.job_directory``), stopped by
    Ctrl-C or SIGTERM: the search of ``trainperf maxbatch``. Raises ``SearchFailed``, and
    ``runner.Interrupted`` when stopped."""
    from trainperf.launch.runner import StopFlag, job_directory

    with job_directory() as workdir, StopFlag().installed() as stop:
        return find_max_batch(
            template,
            workdir,
            start=start,
            limit=limit,
            on_probe=on_probe,
            stop=stop,
            dimension=dimension,
        )


def store_answer(store: Any, record: dict[str, Any], template: Case, found: MaxBatch) -> dict:
    """Store the largest batch ``found`` for ``template`` on the system ``record`` (added
    when new), where suites' ``batch_size: max`` finds it; return its document (the
    search, the case, the system and the stored row's ``id``)."""
    store.add_system(record)
    document = found.as_dict() | {"case": template.model_dump(), "system": record["fingerprint"]}
    document["id"] = store.add_max_batch(
        record["fingerprint"],
        memory_key(template),
        template.model_dump(),
        found.batch_size,
        document["probes"],
        found.note,
    )
    return document


def longest_sequence(found: MaxBatch, template: Case) -> dict[str, Any]:
    """The document of a sequence-length search (not stored): its probes name the value
    tried ``seq_len``."""
    probes = found.as_dict()["probes"]
    for probe in probes:
        probe["seq_len"] = probe.pop("batch_size")
    return {
        "seq_len": found.batch_size,
        "batch_size": template.batch_size,
        "note": found.note,
        "probes": probes,
        "case": template.model_dump(),
        "stored": False,
    }
