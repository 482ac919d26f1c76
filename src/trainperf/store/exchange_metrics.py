"""What the metrics of an imported result or run must hold before the store takes them.

The readers (``results``, ``compare``, ``report``, ``predict``) format and divide the metrics
that trainperf writes (``trainperf.case.result.combine`` and the worker); a file that
spells one of them with another type (an interval of one number, a count as text) would
be stored and then break every reader. Two checks, both naming the offending key:

- ``metric_type_problem``: every metric trainperf writes has its type (``METRIC_KINDS``,
  by name, then by suffix: ``_absent_reason`` is text, ``_ci95`` an interval, ``_bytes`` a
  count); null is always allowed (an absent reading, with its reason beside it). Keys
  this trainperf does not know travel unchecked: a later version may write them.
- ``measured_problem``: the measured times and rates of an ok result or run are positive
  (``MEASURED_POSITIVE``), its throughputs within ``limits.THROUGHPUT_MIN..MAX``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainperf.core.limits import THROUGHPUT_MAX, THROUGHPUT_MIN
from trainperf.store.exchange_format import ExchangeError, Json, is_json_number, short_value

# --- the type of each metric --------------------------------------------------------------
# A kind is (what it must be, the test); the test sees a value that is not null.
Kind = tuple[str, Callable[[Any], bool]]

COUNT: Kind = ("an integer >= 0", lambda v: is_json_number(v) and isinstance(v, int) and v >= 0)
POSITIVE_COUNT: Kind = ("an integer >= 1", lambda v: COUNT[1](v) and v >= 1)
AMOUNT: Kind = ("a number >= 0", lambda v: is_json_number(v) and v >= 0)
PROBABILITY: Kind = ("a number from 0 to 1", lambda v: is_json_number(v) and 0 <= v <= 1)
NUMBER: Kind = ("a number", is_json_number)
FLAG: Kind = ("true or false", lambda v: isinstance(v, bool))
TEXT: Kind = ("text", lambda v: isinstance(v, str))
TEXTS: Kind = ("an array of text", lambda v: isinstance(v, list) and all(TEXT[1](t) for t in v))
# A 95% interval: [low, high], low <= high (trainperf.measure.stats writes it so).
INTERVAL: Kind = (
    "an array [low, high] of two numbers, low <= high",
    lambda v: isinstance(v, list) and len(v) == 2 and all(map(is_json_number, v)) and v[0] <= v[1],
)
# One reading per run, null where that run had none (``run_average_power_w``).
AMOUNTS_OR_NULL: Kind = (
    "an array of numbers >= 0 or null",
    lambda v: isinstance(v, list) and all(x is None or AMOUNT[1](x) for x in v),
)
TEXTS_OR_NULL: Kind = (
    "an array of text or null",
    lambda v: isinstance(v, list) and all(x is None or TEXT[1](x) for x in v),
)

METRIC_KINDS: dict[str, Kind] = {
    # how many
    "runs": POSITIVE_COUNT,
    "runs_needed": POSITIVE_COUNT,
    "global_batch": POSITIVE_COUNT,
    "device_batch": POSITIVE_COUNT,
    "device_count": POSITIVE_COUNT,
    "world_size": POSITIVE_COUNT,
    "image_size": POSITIVE_COUNT,
    "steps_per_run_optimal": POSITIVE_COUNT,
    "steps_measured": COUNT,
    "steps_warmup": COUNT,
    "slowest_rank": COUNT,
    # spreads, rates of work, energy and power: never negative
    "cv": AMOUNT,
    "jitter": AMOUNT,
    "between_run_cv": AMOUNT,
    "within_run_cv": AMOUNT,
    "rank_spread": AMOUNT,
    "ci95_relative": AMOUNT,
    "runs_needed_target": AMOUNT,
    "mfu": AMOUNT,
    "achieved_tflops": AMOUNT,
    "utilization_of_achievable": AMOUNT,
    "fwd_flops_per_sample": AMOUNT,
    "train_flops_per_sample": AMOUNT,
    "tokens_per_sample": AMOUNT,
    "energy_j_total": AMOUNT,
    "energy_per_sample_j": AMOUNT,
    "cpu_energy_j": AMOUNT,
    "gpu_energy_j": AMOUNT,
    "average_power_w": AMOUNT,
    "samples_per_s_per_w": AMOUNT,
    "run_average_power_w": AMOUNTS_OR_NULL,
    "runs_differ_p": PROBABILITY,
    # differences of medians (noise included) and a loss: any sign
    "comm_exposed_s": NUMBER,
    "comm_exposed_share": NUMBER,
    "final_loss": NUMBER,
    "unstable": FLAG,
    "energy_complete": FLAG,
    "unstable_reasons": TEXTS,
    "energy_sources": TEXTS,
    "run_stop_reasons": TEXTS_OR_NULL,
    "policy": TEXT,
    "run_policy": TEXT,
    "runs_policy": TEXT,
    "runs_stop_reason": TEXT,
    "stop_reason": TEXT,
    "warmup_reason": TEXT,
    "ci95_method": TEXT,
    "mem_peak_source": TEXT,
}
METRIC_SUFFIX_KINDS: tuple[tuple[str, Kind], ...] = (
    ("_absent_reason", TEXT),
    ("_ci95", INTERVAL),
    ("_bytes", COUNT),
)


def metric_kind(key: str) -> Kind | None:
    """The kind of metric ``key`` (by name, then by suffix), None for one not known."""
    if key in METRIC_KINDS:
        return METRIC_KINDS[key]
    return next((kind for suffix, kind in METRIC_SUFFIX_KINDS if key.endswith(suffix)), None)


def metric_type_problem(metrics: Json) -> tuple[str, str] | None:
    """(key, what) of the first metric of ``metrics`` that is not null and not of its kind
    (``metric_kind``), or None."""
    for key, value in metrics.items():
        kind = metric_kind(key)
        if value is not None and kind is not None and not kind[1](value):
            return key, f"expected {kind[0]} or null, got {short_value(value)}"
    return None


# --- measured times and rates -------------------------------------------------------------
# Measured times and rates of an ok result or run: each a positive, finite number (or a list
# of them, per step or per rank). A time that may be negative (an exposed communication
# time is a difference of medians, noise included) is not among them.
MEASURED_POSITIVE = (
    "step_s",
    "warmup_step_s",
    "step_s_median",
    "step_s_mean",
    "samples_per_s_median",
    "samples_per_s_mean",
    "run_samples_per_s",
    "tokens_per_s_median",
    "tokens_per_s_mean",
    "measure_elapsed_s",
    "wall_s",
    "compute_step_s",
    "compute_step_s_median",
    "gather_free_step_s_median",
    "rank_step_s",
)

# A throughput, under any key that names one (a result's own, a run's, one a later trainperf
# adds): samples or tokens a second, within the bounds a prediction takes one in
# (limits.THROUGHPUT_MIN to THROUGHPUT_MAX), so that no stored rate is refused only later.
RATE_SUFFIXES = ("samples_per_s", "tokens_per_s")
RATE_KEYS = ("samples_per_s_median", "samples_per_s_mean", "tokens_per_s_median")
RATE_KEYS += ("tokens_per_s_mean",)


def measured_problem(metrics: Json) -> tuple[str, str] | None:
    """(key, what) of the first measured time or rate of ``metrics`` that is not a
    positive number (``MEASURED_POSITIVE``), or a throughput outside the bounds
    (``RATE_KEYS`` and any key ending in a ``RATE_SUFFIXES``), or None."""
    rates = [key for key in metrics if key.endswith(RATE_SUFFIXES) or key in RATE_KEYS]
    for key in dict.fromkeys([*MEASURED_POSITIVE, *rates]):
        if key not in metrics or metrics[key] is None:
            continue
        stack, path = [(key, metrics[key])], key
        while stack:
            path, value = stack.pop()
            if isinstance(value, list):
                stack.extend((f"{path}[{i}]", v) for i, v in enumerate(value))
            elif not is_json_number(value) or value <= 0:
                return path, f"a measured time or rate must be a positive number, got {value!r}"
            elif key in rates and not THROUGHPUT_MIN <= value <= THROUGHPUT_MAX:
                return path, (
                    f"a throughput must be from {THROUGHPUT_MIN:g} to {THROUGHPUT_MAX:g} a "
                    f"second, got {value!r}"
                )
    return None


def check_throughput(metrics: Json, where: str) -> None:
    """An ok result must say its throughput (the comparisons divide by it), and every
    measured time and rate of it must be positive (``measured_problem``)."""
    if metrics.get("samples_per_s_median") is None:
        raise ExchangeError(f"{where}.samples_per_s_median: expected a positive number, got null")
    runs = metrics.get("run_samples_per_s")
    if runs is not None and not (isinstance(runs, list) and runs):
        found = short_value(runs)
        raise ExchangeError(
            f"{where}.run_samples_per_s: expected an array of positive numbers, got {found}"
        )
    if bad := measured_problem(metrics):
        raise ExchangeError(f"{where}.{bad[0]}: {bad[1]}")
