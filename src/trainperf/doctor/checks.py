"""One check of ``trainperf doctor``: what was looked at, what was seen, and what to do.

A check has a status (pyperf's ``system show`` and NVIDIA's benchmarking guidance name the
same kinds of trouble; docs/doctor.md lists every check and its source):

- ``ok``: in a state to be measured;
- ``warn``: numbers can be measured but are likely to move or to differ from another
  machine's for a reason that is not the hardware (a governor on ``powersave``, swap in
  use, a GPU clock locked by someone else);
- ``fail``: numbers measured now would be wrong or meaningless (a timer that misreads a
  known sleep, an all_reduce that returns the wrong sum, a GPU held by another process);
- ``absent``: the machine cannot say (no NVML, no cpufreq in a container); ``seen`` gives
  the reason, never a guessed value.

A check whose ``condition`` is true reads a setting that changes results (the governor,
PCIe width, driver, clock lock...): its ``value`` is compared between systems by
``trainperf compare`` (trainperf.doctor.conditions), so a configuration difference is not
taken for a hardware one. Volatile readings (load, temperature, free disk) are not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

OK, WARN, FAIL, ABSENT = "ok", "warn", "fail", "absent"
STATUSES = (OK, WARN, FAIL, ABSENT)
# worst first: the verdict of a set of checks is the worst status among them (absent
# readings say nothing about the machine's state, so they never make it worse than ok)
SEVERITY = {FAIL: 2, WARN: 1, OK: 0, ABSENT: 0}


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report.

    ``name``: dotted and stable, the key stores and compares use ("host.governor",
    "gpu0.pcie_link", "chain.step_timer"). ``seen``: what was seen, one line for people
    (for ``absent``, why nothing could be read). ``why``: why it matters for a training
    benchmark. ``fix``: a command that fixes it, never run by trainperf (None when there
    is nothing to fix). ``value``: the reading, JSON-able (numbers, strings, lists, dicts
    of them; None when absent). ``condition``: ``value`` is a setting compared between
    systems.
    """

    name: str
    status: str
    seen: str
    why: str
    fix: str | None = None
    value: Any = None
    condition: bool = False

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"check {self.name}: status {self.status!r} is not one of {STATUSES}")

    def document(self) -> dict[str, Any]:
        """The check as stored and printed by ``--json``."""
        document = {
            "name": self.name,
            "status": self.status,
            "seen": self.seen,
            "why": self.why,
            "fix": self.fix,
            "value": self.value,
            "condition": self.condition,
        }
        if self.value is None:
            document["value_absent_reason"] = self.seen if self.status == ABSENT else "no reading"
        return document


def absent(name: str, reason: str, why: str, *, condition: bool = False) -> Check:
    """A check the machine cannot answer: ``reason`` says why."""
    return Check(name, ABSENT, reason, why, condition=condition)


def worst(statuses: list[str]) -> str:
    """The verdict of checks with these statuses: fail, warn or ok (absent counts as ok)."""
    return (
        max(statuses, key=lambda status: SEVERITY[status], default=OK)
        if any(SEVERITY[s] for s in statuses)
        else OK
    )
