"""Statistics across independent runs: a case measured in several worker processes.

A case's steps are nested in runs (fresh processes). What changes between processes (memory
layout, allocator state, thread placement, clocks, the rest of the machine) is invisible
inside one process, so an interval computed from one run's step times describes that
process, not the machine. Following Kalibera & Jones ("Rigorous Benchmarking in Reasonable
Time", ISMM 2013), the model has two levels:

    x_ij = mu + b_i + e_ij,   b_i ~ (0, sigma_b^2) between runs,   e_ij ~ (0, sigma_w^2) within

where x_ij is the throughput of step j of run i (samples per step / step time).

Choices, each with its formula:
- **Run estimate** y_i = B / median(t_i): one number per run, the median step robust to a
  stray slow step inside the run (it is ``samples_per_s_median`` of that run).
- **Case estimate** = mean of the y_i (every run weighs the same: a run is the independent
  unit), and its **95% interval** the Student t interval over the runs,
  ybar ± t(0.975, R-1) · s_y / sqrt(R). This uses the between-run variation only: the
  within-run noise is in each y_i already, so it is counted once. With three to ten runs a
  t interval keeps its coverage, where a bootstrap that resamples runs cannot (three runs
  have ten distinct resamples). Below 2 runs there is no interval. The run estimates are
  rates (samples/s, watts), which cannot be below 0, so the low end is clamped at 0: with
  2 runs t(0.975, 1) = 12.7, and the unclamped low end is negative as soon as the two runs
  differ by more than 16% of their mean. Such an interval is kept (never below 0) but not
  used for a decision (``MIN_RUNS_FOR_DECISION``); the tables show it as "n/a (2 runs)".
- **Variance components** from the one-way random-effects ANOVA of the per-step throughputs
  (unbalanced form; Searle, Casella & McCulloch, "Variance Components", 1992, ch. 3):
      MSW = sum_i sum_j (x_ij - xbar_i)^2 / (N - R),      sigma_w^2 = MSW
      MSB = sum_i n_i (xbar_i - xbar)^2 / (R - 1)
      n0  = (N - sum_i n_i^2 / N) / (R - 1),               sigma_b^2 = max(0, (MSB - MSW) / n0)
  and the F test of MSB / MSW (df R-1, N-R): whether the runs differ more than their own
  step noise allows.
- **Runs needed** for a relative precision p: the smallest R with
  t(0.975, R-1) · cv_y / sqrt(R) <= p, cv_y the measured coefficient of variation of the
  run estimates.
- **Steps per run** that buy the most precision per second, the optimal allocation of a
  two-stage design (Kalibera & Jones's repetition counts; Cochran, "Sampling Techniques",
  1977, sec. 10.6): n_opt = sqrt(c_run / c_step · sigma_w^2 / sigma_b^2), c_run what a run
  costs besides its measured steps (process start, build, warm-up), c_step one step.
- **Ratio of two cases** (a comparison, a speedup): Fieller's interval for the ratio of two
  independent means, rho = ybar_B / ybar_A, the set of rho with
      (ybar_B - rho ybar_A)^2 <= t^2 (v_B + rho^2 v_A),   v = s^2 / R,
  t from Welch-Satterthwaite degrees of freedom at the estimated rho. It is exact for
  normal run estimates, asymmetric as a ratio should be, and the interval of A/B is the
  reciprocal of that of B/A. A ratio of throughputs cannot be below 0: when the other
  side's mean cannot be told from zero the low root is negative, and it is clamped at 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trainperf.measure.stats import MeanCI

CONFIDENCE = 0.95
MIN_RUNS_FOR_INTERVAL = 2
# A faster/slower decision needs at least this many runs on each side (pyperf asks for
# several processes too; with 2 runs the t quantile is 12.7 and one run can swing it).
MIN_RUNS_FOR_DECISION = 3


def _t(df: float) -> float:
    # scipy.stats.t.ppf(q, df) is special.stdtrit(df, q), the same value, and
    # scipy.special imports in a third of the time of scipy.stats (reading verbs start fast).
    from scipy import special

    return float(special.stdtrit(df, 0.5 + CONFIDENCE / 2))


def mean_interval(values: Sequence[float]) -> MeanCI | None:
    """Student t 95% interval of the mean of independent run estimates (rates: the low end
    clamped at 0, module doc); None below 2."""
    y = np.asarray(values, dtype=float)
    if y.size < MIN_RUNS_FOR_INTERVAL:
        return None
    mean = float(y.mean())
    half = _t(y.size - 1) * float(y.std(ddof=1)) / math.sqrt(y.size)
    return MeanCI(mean, max(0.0, mean - half), mean + half)


def coefficient_of_variation(values: Sequence[float]) -> float | None:
    """Sample standard deviation / mean of the run estimates; None below 2 values."""
    y = np.asarray(values, dtype=float)
    if y.size < 2 or y.mean() == 0:
        return None
    return float(y.std(ddof=1) / y.mean())


@dataclass(frozen=True)
class Components:
    """Variance components of a two-level measurement (see the module doc)."""

    grand_mean: float
    within_sd: float
    between_sd: float
    f_p_value: float | None  # None when the F test is undefined (no within-run variation)

    @property
    def within_cv(self) -> float:
        return self.within_sd / self.grand_mean if self.grand_mean else math.inf

    @property
    def between_cv(self) -> float:
        return self.between_sd / self.grand_mean if self.grand_mean else math.inf


def variance_components(groups: Sequence[Sequence[float]]) -> Components | None:
    """One-way random-effects ANOVA of ``groups`` (one sequence of values per run).

    None with fewer than 2 runs or no degree of freedom within runs (one value each).
    """
    arrays = [np.asarray(g, dtype=float) for g in groups if len(g)]
    runs = len(arrays)
    n = np.array([a.size for a in arrays], dtype=float)
    total = float(n.sum())
    if runs < 2 or total - runs < 1:
        return None
    means = np.array([a.mean() for a in arrays])
    grand = float(sum(a.sum() for a in arrays) / total)
    msw = float(sum(((a - a.mean()) ** 2).sum() for a in arrays) / (total - runs))
    msb = float((n * (means - grand) ** 2).sum() / (runs - 1))
    n0 = (total - float((n**2).sum()) / total) / (runs - 1)
    between = max(0.0, (msb - msw) / n0)
    p = None
    if msw > 0:
        from scipy import special  # stats.f.sf(x, a, b) is special.fdtrc(a, b, x)

        p = float(special.fdtrc(runs - 1, total - runs, msb / msw))
    return Components(grand, math.sqrt(msw), math.sqrt(between), p)


def runs_needed(cv: float, precision: float, at_most: int = 10_000) -> int:
    """Runs whose t interval would be within ±``precision`` (relative) given run estimates
    of coefficient of variation ``cv``; at least ``MIN_RUNS_FOR_DECISION``."""
    if not precision > 0:
        raise ValueError(f"precision must be positive, got {precision!r}")
    runs = MIN_RUNS_FOR_DECISION
    while runs < at_most and _t(runs - 1) * cv / math.sqrt(runs) > precision:
        runs += 1
    return runs


def optimal_steps_per_run(
    components: Components, run_overhead_s: float, step_s: float
) -> int | None:
    """Measured steps per run that minimise the variance of the case estimate for a given
    time (module doc); None when the runs do not differ (more runs would not help) or
    the costs are unknown."""
    if components.between_sd <= 0 or run_overhead_s <= 0 or step_s <= 0:
        return None
    ratio = (run_overhead_s / step_s) * (components.within_sd / components.between_sd) ** 2
    return max(1, math.ceil(math.sqrt(ratio)))


UNBOUNDED = (
    "Fieller's 95% interval of the ratio is unbounded: the runs vary too much for the "
    "baseline's mean to be told from zero (measure more runs)"
)


@dataclass(frozen=True)
class Ratio:
    """The ratio other / base of two case estimates with its Fieller 95% interval; ``low``
    and ``high`` are None when that interval is unbounded (``UNBOUNDED``)."""

    ratio: float
    low: float | None
    high: float | None

    @property
    def bounded(self) -> bool:
        return self.low is not None and self.high is not None

    def decision(self) -> str:
        if self.low is not None and self.low > 1:
            return "faster"
        if self.high is not None and self.high < 1:
            return "slower"
        return "no significant difference"


def ratio_interval(base: Sequence[float], other: Sequence[float]) -> Ratio | None:
    """Fieller's 95% interval of mean(other) / mean(base), independent run estimates.

    None when a side has fewer than 2 runs. The interval is unbounded (``low`` and
    ``high`` None) when the base mean is not distinguishable from zero: with 2 or 3 runs
    that vary a lot, a throughput can be.
    """
    a, b = np.asarray(base, dtype=float), np.asarray(other, dtype=float)
    if a.size < MIN_RUNS_FOR_INTERVAL or b.size < MIN_RUNS_FOR_INTERVAL:
        return None
    mean_a, mean_b = float(a.mean()), float(b.mean())
    rho = mean_b / mean_a
    var_a, var_b = float(a.var(ddof=1)) / a.size, float(b.var(ddof=1)) / b.size
    spread = var_b + rho**2 * var_a
    if spread == 0:
        return Ratio(rho, rho, rho)
    # Welch-Satterthwaite degrees of freedom of (mean_b - rho mean_a).
    df = spread**2 / (var_b**2 / (b.size - 1) + rho**4 * var_a**2 / (a.size - 1))
    t2 = _t(df) ** 2
    # (mean_b - r mean_a)^2 = t^2 (var_b + r^2 var_a): a quadratic in r.
    qa = mean_a**2 - t2 * var_a
    qb = -2 * mean_a * mean_b
    qc = mean_b**2 - t2 * var_b
    disc = qb**2 - 4 * qa * qc
    if qa <= 0 or disc < 0:  # the set of rho is not a finite interval
        return Ratio(rho, None, None)
    root = math.sqrt(disc)
    return Ratio(rho, max(0.0, (-qb - root) / (2 * qa)), (-qb + root) / (2 * qa))
