"""Step policies: how many warm-up steps to throw away and when to stop measuring.

Two policies, both written as pure decisions over the step times seen so far so they can
be tested on synthetic series:

``fixed:W:N``
    W warm-up steps, then exactly N measured steps (``fixed:10:100`` is the classic short
    test of the published studies).
``adaptive[:TARGET[:MAX_STEPS[:MAX_SECONDS]]]`` (default ``adaptive:0.01:1000:60``)
    Warm up until the step time stops drifting: the median of the last WINDOW steps is
    within DRIFT of the median of the WINDOW before (or a quarter of the time budget is
    spent). Then measure until the 95% confidence interval of the mean step time is within
    ±TARGET of the mean, or MAX_STEPS measured steps, or MAX_SECONDS of measuring.
    At least 10 steps are measured (MAX_STEPS if it is smaller; it must be 3 or more).
    The stop reason says which ended it.

A case measured in several runs (trainperf.measure.runs) shares its policy between them:
each run gets a part of W:N or of MAX_STEPS and MAX_SECONDS.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trainperf.core.limits import MAX_COUNT, TIMEOUT_S_MAX
from trainperf.measure.stats import MIN_STEPS_FOR_CI, mean_ci95

STOP_FIXED = "fixed_steps"
STOP_CI = "ci_target"
STOP_MAX_STEPS = "max_steps"
STOP_TIME = "time_budget"
WARMUP_FIXED = "fixed_steps"
WARMUP_STABLE = "stable"
WARMUP_BUDGET = "warmup_budget"


class PolicyError(ValueError):
    """A step policy string that cannot be parsed."""


@dataclass(frozen=True)
class FixedPolicy:
    warmup_steps: int
    measured_steps: int

    @property
    def ci_target(self) -> None:
        return None

    def warmup_done(self, warmup_s: Sequence[float], elapsed_s: float = 0.0) -> str | None:
        return WARMUP_FIXED if len(warmup_s) >= self.warmup_steps else None

    def steps_until_check(self, step_s: Sequence[float], elapsed_s: float) -> int:
        return self.measured_steps - len(step_s)

    def measure_done(self, step_s: Sequence[float], elapsed_s: float) -> str | None:
        return STOP_FIXED if len(step_s) >= self.measured_steps else None

    def __str__(self) -> str:
        return f"fixed:{self.warmup_steps}:{self.measured_steps}"


@dataclass(frozen=True)
class AdaptivePolicy:
    ci_target: float = 0.01
    max_steps: int = 1000
    max_seconds: float = 60.0
    min_steps: int = 10
    window: int = 3
    drift: float = 0.05
    max_warmup_steps: int = 50
    # Checks of the interval are spaced geometrically (each after ~25% more steps) so the
    # harness does O(log n) statistics and GPU synchronizations, not one per step.
    check_growth: float = 1.25

    def warmup_done(self, warmup_s: Sequence[float], elapsed_s: float = 0.0) -> str | None:
        n = len(warmup_s)
        # Step 0 carries one-off costs (allocation, autotuning, compilation): never judge
        # stability with it; two full windows after it are needed.
        if n >= 1 + 2 * self.window:
            last = float(np.median(warmup_s[-self.window :]))
            before = float(np.median(warmup_s[-2 * self.window : -self.window]))
            if abs(last / before - 1.0) <= self.drift:
                return WARMUP_STABLE
        if n >= self.max_warmup_steps or (n >= 2 and elapsed_s >= self.max_seconds / 4):
            return WARMUP_BUDGET
        return None

    def steps_until_check(self, step_s: Sequence[float], elapsed_s: float) -> int:
        measured = len(step_s)
        if measured < self.min_steps:
            return self.min_steps - measured
        target = min(self.max_steps, math.ceil(measured * self.check_growth))
        # Do not run far past the time budget between two checks.
        seconds_left = self.max_seconds - elapsed_s
        steps_left = math.ceil(seconds_left / (sum(step_s) / measured)) if seconds_left > 0 else 1
        return max(1, min(target - measured, steps_left))

    def measure_done(self, step_s: Sequence[float], elapsed_s: float) -> str | None:
        n = len(step_s)
        if n >= self.min_steps and mean_ci95(step_s).relative_half_width <= self.ci_target:
            return STOP_CI
        if n >= self.max_steps:
            return STOP_MAX_STEPS
        if elapsed_s >= self.max_seconds:
            return STOP_TIME
        return None

    def __str__(self) -> str:
        return f"adaptive:{self.ci_target:g}:{self.max_steps}:{self.max_seconds:g}"


StepPolicy = FixedPolicy | AdaptivePolicy

# Allowances of the default timeout of a run. They bound a hang, they do not judge speed,
# so they are set for the slowest machine trainperf supports (2 busy CPU cores):
# start-up: interpreter and torch import (7-10 s there), model build, torch.compile, data
# sets opened; a step: VGG-19 at 224x224, batch 64, fp32 is ~6 TFLOP per step, ~100 s at
# the ~60 GFLOP/s two such cores reach.
START_ALLOWANCE_S = 600.0
SLOW_STEP_S = 120.0


def default_timeout_s(policy: StepPolicy) -> float:
    """Seconds a run under ``policy`` may take before it is killed as a hang.

    timeout = START_ALLOWANCE_S + 2 x (budget_s + SLOW_STEP_S x steps), where ``budget_s``
    and ``steps`` bound what the policy can spend: ``fixed:W:N`` has no time budget and
    W + N steps, plus the loss step after them; ``adaptive:T:S:SEC`` spends at most SEC/4
    warming up and SEC measuring, beyond which it may still take the 2 warm-up steps it
    always needs, its ``min_steps`` before the first check, one step past the budget and
    the loss step. Doubled: a ddp run measures its steps again without communication
    (compute only), and a machine may be twice as busy as assumed. With the default
    ``adaptive`` shared by 3 runs (adaptive:0.01:334:20) this is 600 + 2 x (25 + 120 x 14)
    = 4010 s; with ``fixed:10:100``, 600 + 2 x 120 x 111 = 27240 s. At most
    ``TIMEOUT_S_MAX`` (a year), the most any timeout may be (``adaptive:0.01:334:1e300``
    would give 2.5e300 s, which a process group's timeout cannot hold).
    """
    if isinstance(policy, FixedPolicy):
        budget_s, steps = 0.0, policy.warmup_steps + policy.measured_steps + 1
    else:
        budget_s, steps = 1.25 * policy.max_seconds, 2 + policy.min_steps + 2
    return min(START_ALLOWANCE_S + 2 * (budget_s + SLOW_STEP_S * steps), TIMEOUT_S_MAX)


# ASCII digits (\d would take "٣"), matched whole (fullmatch: "$" lets a final newline by)
_FIXED = re.compile(r"fixed:([0-9]+):([0-9]+)")
_ADAPTIVE = re.compile(r"adaptive(?::([0-9.eE+-]+))?(?::([0-9]+))?(?::([0-9.eE+-]+))?")
ALLOWED = "fixed:W:N (e.g. fixed:10:100) or adaptive[:TARGET[:MAX_STEPS[:MAX_SECONDS]]]"


def adaptive_fields(
    text: str, default: tuple[float, int, float]
) -> tuple[float, int, float] | None:
    """TARGET, COUNT and SECONDS of ``adaptive[:TARGET[:COUNT[:SECONDS]]]``, each one left
    out taken from ``default``; None when ``text`` is not of that form or a number in it
    does not parse. The one grammar of the adaptive step policy (COUNT: most steps) and
    the adaptive run policy (COUNT: most runs, trainperf.measure.runs); each checks the
    ranges itself."""
    m = _ADAPTIVE.fullmatch(text)
    if not m:
        return None
    try:
        return (
            float(m[1]) if m[1] else default[0],
            int(m[2]) if m[2] else default[1],
            float(m[3]) if m[3] else default[2],
        )
    except ValueError:
        return None


def parse_policy(text: str) -> StepPolicy:
    """Parse ``fixed:W:N`` or ``adaptive[:TARGET[:MAX_STEPS[:MAX_SECONDS]]]``."""
    if m := _FIXED.fullmatch(text):
        if max(len(m[1]), len(m[2])) > len(str(MAX_COUNT)):  # int() of 5,000 digits raises
            raise PolicyError(f"steps '{text}': W and N must be at most {MAX_COUNT}")
        warmup, measured = int(m[1]), int(m[2])
        if measured < 1:
            raise PolicyError(f"steps '{text}': at least one measured step is needed")
        if max(warmup, measured) > MAX_COUNT:
            raise PolicyError(f"steps '{text}': W and N must be at most {MAX_COUNT}")
        return FixedPolicy(warmup, measured)
    default = AdaptivePolicy()
    fields = adaptive_fields(text, (default.ci_target, default.max_steps, default.max_seconds))
    if fields is not None:
        target, max_steps, max_seconds = fields
        if not 0 < target < 1:
            raise PolicyError(f"steps '{text}': TARGET must be between 0 and 1, e.g. 0.01")
        if max_steps < MIN_STEPS_FOR_CI or not max_seconds > 0:
            raise PolicyError(
                f"steps '{text}': MAX_STEPS must be at least {MIN_STEPS_FOR_CI} "
                "and MAX_SECONDS positive"
            )
        if max_steps > MAX_COUNT or max_seconds == math.inf:
            raise PolicyError(
                f"steps '{text}': MAX_STEPS must be at most {MAX_COUNT} and MAX_SECONDS finite"
            )
        return AdaptivePolicy(
            ci_target=target,
            max_steps=max_steps,
            max_seconds=max_seconds,
            min_steps=min(default.min_steps, max_steps),
        )
    raise PolicyError(f"steps {text!r} is not valid: allowed {ALLOWED}")
