"""What a sweep runs: its items, each a case validated once where it was asked for (the
command line, a suite) with its key within the suite and why it will not run, if so. A
case asking for the largest batch that trains (``batch_size: max``) is a request until
the sweep resolves it (trainperf.launch.sweep).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainperf.case.spec import Case, label_of
from trainperf.case.suite import MAX_BATCH, PlannedCase


@dataclass(frozen=True)
class SweepItem:
    """One case of a sweep, validated once where it was asked for (the command line, a
    suite) and run as it is. ``key`` identifies it within its suite (None: never resumed);
    ``skip_reason`` says why it will not run."""

    case: Case
    key: str | None = None
    skip_reason: str | None = None

    @property
    def fields(self) -> dict[str, Any]:
        """The case as asked for, as its results record it."""
        return self.case.model_dump()

    @property
    def label(self) -> str:
        return self.case.label()


@dataclass(frozen=True)
class MaxBatchRequest:
    """A case asking for the largest batch per device that trains (``batch_size: max``).
    ``case`` is the case at batch 1: the template of the largest-batch search. The sweep
    resolves the request into a SweepItem (the stored batch for these settings, or a
    search) when it first claims the case, so that two sweeps sharing the case never
    search for it twice; results of a request that fails record ``batch_size: max``."""

    case: Case
    key: str | None = None
    skip_reason: str | None = None

    @property
    def fields(self) -> dict[str, Any]:
        return self.case.model_dump() | {"batch_size": MAX_BATCH}

    @property
    def label(self) -> str:
        return label_of(self.fields)

    def resolved(self, batch_size: int) -> SweepItem:
        return SweepItem(self.case.model_copy(update={"batch_size": batch_size}), self.key)


def planned_item(planned: PlannedCase, skip_reason: str | None = None) -> Item:
    """The sweep's item for a case of a suite."""
    made = MaxBatchRequest if planned.wants_max_batch else SweepItem
    return made(planned.template, planned.key, skip_reason)


Item = SweepItem | MaxBatchRequest
