"""Run policies: how many independent runs (fresh worker processes) measure a case, and how
the case's step budget is shared between them.

The case field ``runs`` (``trainperf run --runs``, ``runs:`` in a suite file):

``N`` (a positive integer)
    exactly N runs (``1``: a single run, which has no between-run interval).
``adaptive[:TARGET[:MAX_RUNS[:MAX_SECONDS]]]`` (default ``adaptive:0.02:10:300``)
    at least ``MIN_RUNS`` runs; then one more while the between-run 95% interval of the
    throughput is wider than ±TARGET (trainperf.measure.hierarchy), until MAX_RUNS runs, or
    until one more run would take the case's runs past MAX_SECONDS of wall time (the
    processes' start-up included).

The result says what ended its runs (``runs_stop_reason``): ``fixed_runs``, ``ci_target``,
``max_runs`` or ``time_budget``.

**Sharing the step budget.** The step policy of a case (``steps``) is its budget over all
its runs; each run gets an equal part of it for the runs planned up front (N, or
``MIN_RUNS`` for adaptive), and each extra adaptive run the same part again:
``fixed:W:N`` gives every run W warm-up steps (each process needs its own) and ceil(N/R)
measured steps; ``adaptive:T:S:SEC`` gives every run ``adaptive:T:ceil(S/R):SEC/R``. More
runs of fewer steps buy more confidence per second than one long run whenever the runs
differ more than their steps do (the optimal split is in trainperf.measure.hierarchy), and
they cost what the case cost before. With ``--runs 1`` a case measures as it always did.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from trainperf.core.limits import MAX_COUNT
from trainperf.measure.hierarchy import MIN_RUNS_FOR_DECISION, mean_interval
from trainperf.measure.policy import AdaptivePolicy, FixedPolicy, adaptive_fields, parse_policy
from trainperf.measure.stats import MIN_STEPS_FOR_CI

MIN_RUNS = MIN_RUNS_FOR_DECISION  # an adaptive case has enough runs for a comparison
STOP_FIXED_RUNS = "fixed_runs"
STOP_RUNS_CI = "ci_target"
STOP_MAX_RUNS = "max_runs"
STOP_RUNS_TIME = "time_budget"
ALLOWED = "N (a positive integer) or adaptive[:TARGET[:MAX_RUNS[:MAX_SECONDS]]]"


class RunsError(ValueError):
    """A run policy that cannot be parsed; the message is one line for the user."""


@dataclass(frozen=True)
class FixedRuns:
    runs: int

    @property
    def planned(self) -> int:
        return self.runs

    @property
    def target(self) -> None:
        return None

    def done(self, estimates: Sequence[float], spent_s: float) -> str | None:
        """Why the case needs no more runs after these run estimates, or None."""
        return STOP_FIXED_RUNS if len(estimates) >= self.runs else None

    def __str__(self) -> str:
        return str(self.runs)


@dataclass(frozen=True)
class AdaptiveRuns:
    target: float = 0.02
    max_runs: int = 10
    max_seconds: float = 300.0

    @property
    def planned(self) -> int:
        return MIN_RUNS

    def done(self, estimates: Sequence[float], spent_s: float) -> str | None:
        """Why the case needs no more runs, given its run estimates (samples/s) and the
        wall time its runs took; None while another run is wanted and affordable."""
        runs = len(estimates)
        if runs < MIN_RUNS:
            return None
        interval = mean_interval(estimates)
        if interval is not None and interval.relative_half_width <= self.target:
            return STOP_RUNS_CI
        if runs >= self.max_runs:
            return STOP_MAX_RUNS
        if spent_s + spent_s / runs > self.max_seconds:
            return STOP_RUNS_TIME
        return None

    def __str__(self) -> str:
        return f"adaptive:{self.target:g}:{self.max_runs}:{self.max_seconds:g}"


RunsPolicy = FixedRuns | AdaptiveRuns


def parse_runs(value: int | str) -> RunsPolicy:
    """A run policy from a case's ``runs`` (an integer, or the adaptive form as text)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise RunsError(f"must be at least 1: allowed {ALLOWED}")
        if value > MAX_COUNT:
            raise RunsError(f"must be at most {MAX_COUNT}: allowed {ALLOWED}")
        return FixedRuns(value)
    text = str(value).strip()
    if re.fullmatch(r"[+-]?[0-9]{1,30}", text):
        return parse_runs(int(text))
    default = AdaptiveRuns()
    fields = adaptive_fields(text, (default.target, default.max_runs, default.max_seconds))
    if fields is None:
        raise RunsError(f"not valid: allowed {ALLOWED}")
    target, max_runs, max_seconds = fields
    if not 0 < target < 1:
        raise RunsError("TARGET must be between 0 and 1, e.g. adaptive:0.02")
    if max_runs < MIN_RUNS or not max_seconds > 0:
        raise RunsError(f"MAX_RUNS must be at least {MIN_RUNS} and MAX_SECONDS positive")
    if max_runs > MAX_COUNT or max_seconds == math.inf:
        raise RunsError(f"MAX_RUNS must be at most {MAX_COUNT} and MAX_SECONDS finite")
    return AdaptiveRuns(target, max_runs, max_seconds)


def share_steps(steps: str, runs: RunsPolicy) -> str:
    """The step policy of one run: the case's ``steps`` shared by its planned runs."""
    policy = parse_policy(steps)
    planned = runs.planned
    if planned == 1:
        return steps
    if isinstance(policy, FixedPolicy):
        return str(FixedPolicy(policy.warmup_steps, math.ceil(policy.measured_steps / planned)))
    assert isinstance(policy, AdaptivePolicy)
    # parse_policy takes no fewer (a within-run variance needs them).
    max_steps = max(MIN_STEPS_FOR_CI, math.ceil(policy.max_steps / planned))
    return str(AdaptivePolicy(policy.ci_target, max_steps, policy.max_seconds / planned))
