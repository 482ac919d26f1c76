"""Statistics of measured step times: throughput, confidence interval, spread, stability.

Conventions (every function takes step times in seconds, warm-up already removed):
- mean throughput = samples of all steps / time of all steps (= B / mean step time), which
  is what a user's epoch would see; the median throughput = B / median step time is robust
  to the occasional slow step.
- the 95% confidence interval of the mean step time uses Student's t with n-1 degrees of
  freedom, mean ± t(0.975, n-1)·s/√n; the throughput interval is its image under B/t.
- cv = s / mean of the step times (s with Bessel's correction).
- What cannot be computed is None with the reason beside it (never an infinity): the
  interval below ``MIN_STEPS_FOR_CI`` steps (``ci95_absent_reason``), the throughput's upper
  end when the step-time interval reaches zero (``samples_per_s_ci95_absent_reason``: B/t
  is unbounded there), the cv of a single step (``cv_absent_reason``).
- jitter = 1.4826 · MAD of the per-step throughput: the median absolute deviation scaled
  to estimate a normal distribution's standard deviation, robust to outliers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

# Above this coefficient of variation a result is flagged unstable (pyperf uses 10% too).
UNSTABLE_CV = 0.10
# A drift between the first and second half of the measured steps larger than this, and
# significant (Mann-Whitney U, p < DRIFT_P), flags the result: the machine did not settle.
DRIFT_FRACTION = 0.05
DRIFT_P = 0.01
MIN_STEPS_FOR_CI = 3
MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class MeanCI:
    mean: float
    low: float
    high: float

    @property
    def relative_half_width(self) -> float:
        """(high - mean) / mean: the ± of the interval as a fraction of the mean (the upper
        half, which stays the ± when the low end of a rate's interval is clamped at 0)."""
        return (self.high - self.mean) / self.mean if self.mean else math.inf


def mean_ci95(values: Sequence[float]) -> MeanCI:
    """Student-t 95% confidence interval of the mean; infinite width below 3 values."""
    x = np.asarray(values, dtype=float)
    mean = float(x.mean())
    if x.size < MIN_STEPS_FOR_CI:
        return MeanCI(mean, -math.inf, math.inf)
    # stats.t.ppf(q, df) is special.stdtrit(df, q): the same value, and scipy.special
    # imports in a third of the time of scipy.stats (which the reading verbs then skip).
    from scipy import special

    half = float(special.stdtrit(x.size - 1, 0.975) * x.std(ddof=1) / math.sqrt(x.size))
    return MeanCI(mean, mean - half, mean + half)


@dataclass(frozen=True)
class ThroughputSummary:
    """Throughput of a measured window, with its uncertainty. Units in the names; a value
    that cannot be computed is None with its reason (module doc)."""

    steps_measured: int
    step_s_median: float
    step_s_mean: float
    samples_per_s_median: float
    samples_per_s_mean: float
    samples_per_s_ci95: tuple[float, float] | None
    ci95_relative: float | None
    cv: float | None
    jitter: float
    ci95_absent_reason: str | None = None
    samples_per_s_ci95_absent_reason: str | None = None
    cv_absent_reason: str | None = None

    def as_dict(self) -> dict:
        out = asdict(self)
        if self.samples_per_s_ci95 is not None:
            out["samples_per_s_ci95"] = list(self.samples_per_s_ci95)
        return {k: v for k, v in out.items() if v is not None or not k.endswith("_reason")}


def summarize(step_s: Sequence[float], samples_per_step: int) -> ThroughputSummary:
    """Throughput statistics of ``step_s`` for steps of ``samples_per_step`` samples."""
    if len(step_s) == 0:
        raise ValueError("no measured steps to summarize")
    t = np.asarray(step_s, dtype=float)
    ci = mean_ci95(t)
    per_step = samples_per_step / t
    uncertain: dict = {}
    if not math.isfinite(ci.high):
        steps = f"{t.size} measured step" + ("s" if t.size != 1 else "")
        reason = f"only {steps}: an interval needs {MIN_STEPS_FOR_CI}"
        uncertain = {"samples_per_s_ci95": None, "ci95_relative": None}
        uncertain["ci95_absent_reason"] = reason
    elif ci.low <= 0:
        # B/t is decreasing: the throughput interval is (B/high, B/low), unbounded above
        # when the step-time interval reaches zero.
        uncertain = {"samples_per_s_ci95": None, "ci95_relative": ci.relative_half_width}
        uncertain["samples_per_s_ci95_absent_reason"] = (
            "the step time's 95% interval reaches 0 s (few steps, widely spread): "
            "the throughput has no upper bound"
        )
    else:
        interval = (samples_per_step / ci.high, samples_per_step / ci.low)
        uncertain = {"samples_per_s_ci95": interval, "ci95_relative": ci.relative_half_width}
    cv = {"cv": float(t.std(ddof=1) / ci.mean)} if t.size > 1 else {}
    return ThroughputSummary(
        steps_measured=int(t.size),
        step_s_median=float(np.median(t)),
        step_s_mean=ci.mean,
        samples_per_s_median=samples_per_step / float(np.median(t)),
        samples_per_s_mean=samples_per_step * t.size / float(t.sum()),
        cv=cv.get("cv"),
        cv_absent_reason=None if cv else "one measured step: no spread",
        jitter=MAD_TO_SIGMA * float(np.median(np.abs(per_step - np.median(per_step)))),
        **uncertain,
    )


def drift(step_s: Sequence[float]) -> tuple[float, float]:
    """Relative change of the median from the first to the second half, and its p-value."""
    t = np.asarray(step_s, dtype=float)
    half = t.size // 2
    if half < 5:
        return 0.0, 1.0
    first, second = t[:half], t[half:]
    change = float(np.median(second) / np.median(first) - 1.0)
    from scipy import stats

    p = float(stats.mannwhitneyu(first, second, alternative="two-sided").pvalue)
    return change, p


def instability_reasons(
    step_s: Sequence[float], summary: ThroughputSummary, *, ci_target: float | None = None
) -> list[str]:
    """Why a measurement should not be trusted as it stands; empty when it is stable."""
    reasons = []
    if summary.steps_measured < MIN_STEPS_FOR_CI:
        reasons.append(f"only {summary.steps_measured} measured steps: no confidence interval")
    if summary.cv is not None and summary.cv > UNSTABLE_CV:
        reasons.append(f"coefficient of variation {summary.cv:.1%} above {UNSTABLE_CV:.0%}")
    change, p = drift(step_s)
    if abs(change) > DRIFT_FRACTION and p < DRIFT_P:
        reasons.append(
            f"step time drifted {change:+.1%} from the first to the second half (p={p:.1g})"
        )
    relative = summary.ci95_relative
    if ci_target is not None and relative is not None and relative > ci_target:
        reasons.append(f"95% CI ±{relative:.1%} wider than the target ±{ci_target:.1%}")
    return reasons
