"""``trainperf doctor``: is this machine fit to be measured, and does each instrument read true?

Three families of checks, each a function returning ``Check``s (trainperf.doctor.checks):

- ``host.host_checks``: the CPU, memory, disk, container limits, software versions and
  environment variables, read from /proc and /sys under a root (a temp tree in tests);
- ``gpu.gpu_checks``: each GPU through NVML (a fake NVML in tests);
- ``chain.chain_checks``: the measuring chain measured: the step timer against a known
  sleep, the allocator's peak against a known allocation, a small GEMM's rate against the
  catalog's peak, the energy source against integrated power where both exist, and a
  2-process all_reduce on the local backend.

``examine`` runs them and returns the verdict document that ``doctor --json`` prints and
every sweep stores with its system (``sweeps.doctor``, store schema 9). Nothing here
changes the machine: every fix is a command for the user to run.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainperf.doctor.checks import ABSENT, FAIL, OK, STATUSES, WARN, Check, worst

DOCTOR_SCHEMA = 1

__all__ = ["DOCTOR_SCHEMA", "Check", "examine", "summary_line", "sweep_verdict", "verdict_document"]


def examine(
    *,
    db: str | os.PathLike[str] | None = None,
    root: Path = Path("/"),
    nvml: Any = None,
    environ: Mapping[str, str] | None = None,
    full: bool = True,
) -> dict[str, Any]:
    """Run every check and return the verdict document. ``db``: the store whose disk is
    checked for room. ``full=False`` leaves out the measuring chain's slower checks (the
    GEMM, the energy counters, the 2-process all_reduce: seconds), as a sweep does."""
    from trainperf.doctor.chain import chain_checks
    from trainperf.doctor.gpu import gpu_checks
    from trainperf.doctor.host import host_checks

    environ = os.environ if environ is None else environ
    started = time.monotonic()
    checks = [
        *host_checks(root=root, environ=environ, db=None if db is None else Path(db)),
        *gpu_checks(nvml=nvml, environ=environ),
        *chain_checks(full=full),
    ]
    return verdict_document(checks, seconds=time.monotonic() - started)


def sweep_verdict(db: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The verdict a sweep stores as it starts, in a fraction of a second: the host and
    GPU checks, the step timer and the allocator (``examine(full=False)``)."""
    return examine(db=db, full=False)


def verdict_document(checks: list[Check], seconds: float | None = None) -> dict[str, Any]:
    """The stored and printed form of ``checks``: the verdict (worst status), the count
    per status, and each check's document."""
    counts = Counter(check.status for check in checks)
    return {
        "doctor_schema": DOCTOR_SCHEMA,
        "verdict": worst([check.status for check in checks]),
        "counts": {status: counts.get(status, 0) for status in STATUSES},
        "seconds": None if seconds is None else round(seconds, 3),
        **({"seconds_absent_reason": "not timed"} if seconds is None else {}),
        "checks": [check.document() for check in checks],
    }


def summary_line(verdict: Mapping[str, Any]) -> str:
    """One line for the start of a sweep: the counts, and the checks that warned or failed
    by name, e.g. 'doctor: warn: 21 ok, 2 warn (host.governor, host.swap), 0 fail, 9 absent'."""
    counts = verdict["counts"]
    named = {
        status: [c["name"] for c in verdict["checks"] if c["status"] == status]
        for status in (WARN, FAIL)
    }
    parts = []
    for status in (OK, WARN, FAIL, ABSENT):
        part = f"{counts.get(status, 0)} {status}"
        if named.get(status):
            shown = named[status][:4]
            more = len(named[status]) - len(shown)
            part += f" ({', '.join(shown)}{f', +{more} more' if more else ''})"
        parts.append(part)
    return f"doctor: {verdict['verdict']}: {', '.join(parts)}"


def problems(verdict: Mapping[str, Any] | None) -> list[str]:
    """The names of the checks of a stored verdict that warned or failed ([] for none, or
    for a sweep stored before the doctor existed)."""
    if not verdict:
        return []
    return [c["name"] for c in verdict.get("checks", []) if c["status"] in (WARN, FAIL)]
