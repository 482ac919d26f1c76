"""The olympic mean of time-to-train runs, MLPerf Training's benchmark result.

MLPerf Training rules ("Benchmark Results"): a benchmark is run several times (5 for the
ImageNet ResNet benchmark; more for noisier ones, e.g. 10 for BERT) and its result is the
mean of the run times after dropping the fastest and the slowest run. A run that does not
reach the target quality does not converge; the rules allow a single such run, which
counts as the slowest and is the one dropped; with more than one the result is invalid.

Here a run that did not reach the target is given as ``None`` or ``math.inf``. Results:
- no failed run: sort, drop the first and the last, average the rest;
- one failed run: it is the slowest dropped; drop the fastest converged run too;
- two or more failed runs, or fewer than 3 runs (nothing would be left once the fastest
  and the slowest are dropped): the olympic mean is absent, with the reason.
The plain mean of the converged runs and the counts are reported in every case.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

MIN_RUNS = 3  # one to keep after dropping the fastest and the slowest


def olympic_mean(times: Sequence[float | None]) -> dict[str, Any]:
    """Olympic mean of the times to target in seconds (``None``/``inf``: target not reached).

    Returns ``olympic_mean_s`` (or None with ``olympic_mean_s_absent_reason``), ``mean_s``
    (converged runs; None when none converged), ``count``, ``failed``, ``kept_s`` (the
    averaged times) and ``dropped_s`` (``fastest``, and ``slowest``: None for a failed run).
    """
    converged = sorted(_converged(times))
    failed = len(times) - len(converged)
    result: dict[str, Any] = {
        "olympic_mean_s": None,
        "mean_s": sum(converged) / len(converged) if converged else None,
        "count": len(times),
        "failed": failed,
        "kept_s": [],
        "dropped_s": None,
    }
    reason = None
    if len(times) < MIN_RUNS:
        reason = (
            f"{len(times)} run(s): the olympic mean drops the fastest and the slowest,"
            f" so it needs at least {MIN_RUNS}"
        )
    elif failed > 1:
        reason = (
            f"{failed} of {len(times)} runs did not reach the target;"
            " MLPerf allows one, counted as the slowest"
        )
    if reason:
        return result | {"olympic_mean_s_absent_reason": reason}
    # The failed run, if any, is the slowest: drop it and keep every converged run but the fastest.
    kept = converged[1:] if failed else converged[1:-1]
    return result | {
        "olympic_mean_s": sum(kept) / len(kept),
        "kept_s": kept,
        "dropped_s": {"fastest": converged[0], "slowest": None if failed else converged[-1]},
    }


def _converged(times: Sequence[float | None]) -> list[float]:
    converged = []
    for i, time_s in enumerate(times):
        if time_s is None or time_s == math.inf:
            continue
        if not math.isfinite(time_s) or time_s < 0:
            raise ValueError(
                f"run {i}: time {time_s} is not a duration (>= 0 s, None or inf if failed)"
            )
        converged.append(float(time_s))
    return converged
