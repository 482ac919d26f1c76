"""A case's result from its runs: the measurements of several worker processes, combined.

A **run** is one worker process measuring a case (``trainperf.launch.worker``); its document is
what the worker writes (``RUN_SCHEMA``; every document is made by trainperf.case.outcome):
status, the case as the run measured it (its share of the step policy), device, metrics
with the raw step times, error. A **result** gathers the runs of a case (``RESULT_SCHEMA``)
and is what the store's ``results`` table holds; the runs stay beside it (table ``runs``),
so every raw step time is kept.

Metrics of an ok result (each run r has its estimate y_r = samples_per_s_median of r):
- ``samples_per_s_median``: mean of the y_r; ``samples_per_s_ci95`` and ``ci95_relative``
  its Student t 95% interval over the runs (trainperf.measure.hierarchy; its low end
  clamped at 0, as a throughput cannot be below 0; from 2 runs it is kept but too wide to
  decide anything: t = 12.7), absent with ``ci95_absent_reason`` for a single run;
  ``run_samples_per_s`` the y_r themselves;
- ``samples_per_s_mean``, ``step_s_median``, ``step_s_mean``, ``cv``, ``jitter``: over the
  measured steps of all runs pooled (what the whole measurement saw);
- ``within_run_cv``, ``between_run_cv`` (variance components of per-step throughput over
  their mean), ``runs_differ_p`` (F test: do the runs differ beyond their step noise?),
  ``runs_needed`` (runs for ±``runs_needed_target``), ``steps_per_run_optimal``;
- ``runs``, ``runs_policy``, ``runs_stop_reason``: how many runs, under which policy, and
  what ended them; ``steps_measured``, ``steps_warmup``, ``measure_elapsed_s`` summed;
- throughput-derived numbers (tokens/s, achieved TFLOP/s, MFU, compute-only samples/s,
  exposed communication and its all-gather and reduce-scatter parts, rank spread) and a
  JAX case's ``compile_s``: means over the runs; peak memory, the memory a forward pass
  holds and a JAX case's compilation counts: the largest; the training state's bytes
  (parameters, gradients, optimizer state): the first run's (they are the same in all);
- energy: the joules of the runs with a reading over their samples and seconds, with
  ``run_average_power_w`` per run and ``average_power_w_ci95`` over the runs;
- ``unstable`` with ``unstable_reasons`` (``instability``): the between-run interval wider
  than the run policy's target, runs that disagree beyond their step noise, steps that vary
  by more than 10% within runs (the within-run component; pyperf's threshold), a run whose
  step time drifted, or a GPU that slowed down for heat or by its hardware or whose SM
  clock varied (trainperf.measure.clock_events: a power cap is a condition, recorded as
  ``power_capped_share`` with ``clocks_event_shares``, not a reason);
- GPU window means ``sm_clock_mhz_mean`` and ``gpu_power_w_mean`` (with what the power
  reading is, ``gpu_power_source``): means over the runs, absent unless every run has them.

A failed run ends its case: the result takes that run's status and error (naming the run
when earlier ones were ok), and the ok runs stay stored with it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

from trainperf.case.outcome import RESULT_SCHEMA, RUN_SCHEMA, Outcome
from trainperf.measure import clock_events, hierarchy
from trainperf.measure.runs import RunsPolicy, parse_runs
from trainperf.measure.stats import DRIFT_FRACTION, DRIFT_P, UNSTABLE_CV, drift, summarize

# The runs of a case differ "beyond their step noise" when the F test says so (p below
# this) and the between-run component is material (a coefficient of variation above
# this): a quiet GPU can show a significant but harmless 0.3% between processes.
RUNS_DIFFER_P = 0.01
UNSTABLE_BETWEEN_CV = 0.03
# Above this share of step time spent waiting for data, a case is input-bound.
INPUT_BOUND_SHARE = 0.1
# The precision that ``runs_needed`` is computed for when the case set no target.
DEFAULT_PRECISION = 0.02
SINGLE_RUN = "a single run: no between-run interval (measure 3 or more runs: --runs)"

# Metrics equal in every run of a case: taken from the first.
SAME_IN_RUNS = (
    "image_size",
    "seq_len",
    "tokens_per_sample",
    "fwd_flops_per_sample",
    "train_flops_per_sample",
    "global_batch",
    "device_batch",
    "device_count",
    "world_size",
    "step_over_ranks",
    "mfu_peak_source",
    "mfu_absent_reason",
    "mem_peak_source",
    "mem_peak_absent_reason",
    "data_train_samples",
    "xla_flops_per_step",
    # The training state, counted from its tensors: the same in every run.
    "mem_params_bytes",
    "mem_grads_bytes",
    "mem_optimizer_bytes",
    "mem_activations_source",
    "mem_activations_absent",
    "mem_grads_absent",
    "attention_backend",
    "gpu_power_source",
)
# Rates and times of a run: the result gives their mean over the runs.
MEAN_OVER_RUNS = (
    "tokens_per_s_median",
    "mfu",
    "compute_samples_per_s",
    "data_wait_s_median",
    "compute_only_s_median",
    "compute_step_s_median",
    "comm_exposed_s",
    "comm_exposed_share",
    "gather_free_step_s_median",
    "comm_exposed_all_gather_s",
    "comm_exposed_reduce_scatter_s",
    "rank_spread",
    "sm_clock_mhz_mean",
    "gpu_power_w_mean",
    "compile_s",
)
# GPU window means (trainperf.measure.probes): absent with the reason unless every run has them.
WINDOW_MEANS = ("sm_clock_mhz_mean", "gpu_power_w_mean")
# The most of any run: peak memory; XLA compilations (JAX cases) before and inside the
# measured window, so a single run that compiled while measured shows.
MAX_OVER_RUNS = (
    "mem_peak_bytes",
    "mem_reserved_peak_bytes",
    "mem_activations_bytes",
    "compilations_before_measuring",
    "compilations_while_measuring",
)


def run_estimate(run: dict[str, Any]) -> float:
    """The throughput estimate of one run: samples per step over its median step time."""
    return float(run["metrics"]["samples_per_s_median"])


def run_estimates(result: dict[str, Any]) -> list[float]:
    """The throughput of each run of an ok result (one value for a result of one run)."""
    metrics = result["metrics"]
    return list(metrics.get("run_samples_per_s") or [metrics["samples_per_s_median"]])


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def combine(
    case: dict[str, Any],
    runs: Sequence[dict[str, Any]],
    runs_stop_reason: str,
    policy: RunsPolicy | None = None,
) -> dict[str, Any]:
    """The ok result of ``case`` (as given, with its case-level step policy) from its ok
    ``runs`` (worker documents, each with ``run_number``), in the order they ran."""
    if not runs:
        raise ValueError("an ok result needs at least one ok run")
    policy = policy or parse_runs(case.get("runs", 1))
    first = runs[0]["metrics"]
    batch = samples_per_step(runs[0])
    estimates = [run_estimate(r) for r in runs]
    steps = [list(r["metrics"]["step_s"]) for r in runs]
    pooled = summarize([t for s in steps for t in s], batch)
    metrics: dict[str, Any] = {k: first[k] for k in SAME_IN_RUNS if k in first}
    metrics |= _throughput(estimates, pooled.as_dict())
    metrics |= _components(runs, steps, batch, estimates, policy)
    metrics |= {
        "runs": len(runs),
        "runs_policy": str(policy),
        "runs_stop_reason": runs_stop_reason,
        "policy": case.get("steps"),
        "run_policy": runs[0]["case"].get("steps"),
        "steps_measured": sum(len(s) for s in steps),
        "steps_warmup": sum(r["metrics"].get("steps_warmup", 0) for r in runs),
        "measure_elapsed_s": math.fsum(r["metrics"].get("measure_elapsed_s", 0) for r in runs),
        "run_stop_reasons": [r["metrics"].get("stop_reason") for r in runs],
    }
    for key in MEAN_OVER_RUNS:
        values = [r["metrics"][key] for r in runs if r["metrics"].get(key) is not None]
        if len(values) == len(runs):
            metrics[key] = _mean(values)
    for key in MAX_OVER_RUNS:
        values = [r["metrics"][key] for r in runs if r["metrics"].get(key) is not None]
        if values:
            metrics[key] = max(values)
    if any(k in r["metrics"] for r in runs for k in WINDOW_MEANS):
        missing = [r["metrics"].get("window_absent_reason") for r in runs]
        if any(metrics.get(k) is None for k in WINDOW_MEANS):
            metrics |= {k: metrics.get(k) for k in WINDOW_MEANS}
            reasons = sorted({m for m in missing if m}) or ["a run has no window samples"]
            metrics["window_absent_reason"] = "; ".join(reasons)
    if "tokens_per_sample" in metrics:
        metrics["tokens_per_s_mean"] = metrics["samples_per_s_mean"] * metrics["tokens_per_sample"]
    if "train_flops_per_sample" in metrics:
        achieved = metrics["train_flops_per_sample"] * metrics["samples_per_s_median"]
        metrics["achieved_tflops"] = achieved / 1e12
    if "mfu" not in metrics and "mfu_absent_reason" in metrics:
        metrics["mfu"] = None
    metrics |= _data(runs)
    metrics |= _energy(runs)
    metrics |= clock_events.over_runs([r["metrics"] for r in runs])
    metrics["final_loss"] = runs[-1]["metrics"].get("final_loss")
    reasons = instability(metrics, runs, policy)
    metrics |= {"unstable": bool(reasons), "unstable_reasons": reasons}
    body = {"device": runs[0].get("device"), "metrics": metrics}
    return Outcome.ok(case, body, schema=RESULT_SCHEMA).document()


def samples_per_step(run: dict[str, Any]) -> float:
    """Samples per step of a run: recorded, or implied by its median (an old result)."""
    m = run["metrics"]
    if m.get("global_batch"):
        return m["global_batch"]
    steps = sorted(m["step_s"])
    median = (steps[(len(steps) - 1) // 2] + steps[len(steps) // 2]) / 2
    return m["samples_per_s_median"] * median


def _throughput(estimates: list[float], pooled: dict[str, Any]) -> dict[str, Any]:
    interval = hierarchy.mean_interval(estimates)
    out = {
        "samples_per_s_median": _mean(estimates),
        "run_samples_per_s": estimates,
        "samples_per_s_mean": pooled["samples_per_s_mean"],
        "step_s_median": pooled["step_s_median"],
        "step_s_mean": pooled["step_s_mean"],
        "cv": pooled["cv"],
        "jitter": pooled["jitter"],
    }
    if pooled.get("cv_absent_reason"):
        out["cv_absent_reason"] = pooled["cv_absent_reason"]
    if interval is None:
        return out | {
            "samples_per_s_ci95": None,
            "ci95_relative": None,
            "ci95_absent_reason": SINGLE_RUN,
        }
    return out | {
        "samples_per_s_ci95": [interval.low, interval.high],
        "ci95_relative": interval.relative_half_width,
        "ci95_method": "Student t over the runs",
        "ci95_absent_reason": None,
    }


def _components(
    runs: Sequence[dict[str, Any]],
    steps: list[list[float]],
    batch: float,
    estimates: list[float],
    policy: RunsPolicy,
) -> dict[str, Any]:
    """Within- and between-run variation, and what it says about the next measurement."""
    components = hierarchy.variance_components([[batch / t for t in s if t > 0] for s in steps])
    cv = hierarchy.coefficient_of_variation(estimates)
    precision = policy.target or DEFAULT_PRECISION
    out: dict[str, Any] = {
        "within_run_cv": None,
        "between_run_cv": None,
        "runs_differ_p": None,
        "runs_needed": None if cv is None else hierarchy.runs_needed(cv, precision),
        "runs_needed_target": precision,
        "steps_per_run_optimal": None,
    }
    if components is None:
        return out
    out |= {
        "within_run_cv": components.within_cv,
        "between_run_cv": components.between_cv,
        "runs_differ_p": components.f_p_value,
    }
    # What a run costs besides its measured steps: process start, build, warm-up.
    walls = [r["metrics"].get("wall_s") for r in runs]
    if all(walls):
        overhead = _mean(
            [w - r["metrics"]["measure_elapsed_s"] for w, r in zip(walls, runs, strict=True)]
        )
        step = _mean([t for s in steps for t in s])
        out["steps_per_run_optimal"] = hierarchy.optimal_steps_per_run(components, overhead, step)
    return out


def _data(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Data wait of cases on real data: its share of all measured time, over all runs."""
    if not all(r["metrics"].get("data_wait_s") is not None for r in runs):
        return {}
    waited = math.fsum(t for r in runs for t in r["metrics"]["data_wait_s"])
    stepped = math.fsum(t for r in runs for t in r["metrics"]["step_s"])
    share = waited / stepped
    return {"data_wait_share": share, "input_bound": share > INPUT_BOUND_SHARE}


def _energy(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Energy over the runs that read it: joules / seconds and joules / samples."""
    metered = [r for r in runs if r["metrics"].get("energy_j_total") is not None]
    sources = sorted({s for r in runs for s in r["metrics"].get("energy_sources") or []})
    absent = {
        (a["source"], a["domain"]): a for r in runs for a in r["metrics"].get("energy_absent") or []
    }
    out: dict[str, Any] = {
        "energy_j_total": None,
        "average_power_w": None,
        "energy_per_sample_j": None,
        "samples_per_s_per_w": None,
        "energy_sources": sources,
        "energy_absent": list(absent.values()),
        "energy_complete": all(r["metrics"].get("energy_complete") for r in runs),
        "energy_absent_reason": runs[0]["metrics"].get("energy_absent_reason"),
        "run_average_power_w": [r["metrics"].get("average_power_w") for r in runs],
        "average_power_w_ci95": None,
    }
    for side in ("gpu", "cpu"):
        values = [r["metrics"].get(f"{side}_energy_j") for r in metered]
        out[f"{side}_energy_j"] = math.fsum(values) if values and None not in values else None
        reasons = [r["metrics"].get(f"{side}_energy_absent_reason") for r in runs]
        out[f"{side}_energy_absent_reason"] = next((x for x in reasons if x), None)
    if not metered:
        return out
    joules = math.fsum(r["metrics"]["energy_j_total"] for r in metered)
    seconds = math.fsum(r["metrics"]["measure_elapsed_s"] for r in metered)
    samples = math.fsum(len(r["metrics"]["step_s"]) * samples_per_step(r) for r in metered)
    power = joules / seconds
    interval = hierarchy.mean_interval([r["metrics"]["average_power_w"] for r in metered])
    out |= {
        "energy_j_total": joules,
        "average_power_w": power,
        "energy_per_sample_j": joules / samples if samples else None,
        "samples_per_s_per_w": samples / seconds / power if samples and power > 0 else None,
        "energy_absent_reason": None,
        "average_power_w_ci95": [interval.low, interval.high] if interval else None,
    }
    return out


def instability(
    metrics: dict[str, Any], runs: Sequence[dict[str, Any]], policy: RunsPolicy
) -> list[str]:
    """Why a result should not be trusted as it stands (empty when it is stable)."""
    reasons = []
    relative, target = metrics.get("ci95_relative"), policy.target
    if relative is not None and target is not None and relative > target:
        reasons.append(
            f"between-run 95% CI ±{relative:.1%} wider than the target ±{target:.1%} "
            f"after {len(runs)} runs ({metrics['runs_stop_reason']})"
        )
    p, between = metrics.get("runs_differ_p"), metrics.get("between_run_cv")
    if p is not None and p < RUNS_DIFFER_P and between > UNSTABLE_BETWEEN_CV:
        low, high = min(metrics["run_samples_per_s"]), max(metrics["run_samples_per_s"])
        reasons.append(
            f"runs disagree beyond their own step noise: {low:.3g} to {high:.3g} samples/s, "
            f"between-run CV {between:.1%} (F test p={p:.1g})"
        )
    # The steps' own spread: the within-run component, or a single run's CV.
    within = metrics.get("within_run_cv")
    if within is None and len(runs) == 1:
        within = runs[0]["metrics"].get("cv")
    if within is not None and within > UNSTABLE_CV:
        reasons.append(f"step-time variation within runs {within:.1%}, above {UNSTABLE_CV:.0%}")
    drifted = []
    for r in runs:
        change, p_drift = drift(r["metrics"]["step_s"])
        if abs(change) > DRIFT_FRACTION and p_drift < DRIFT_P:
            drifted.append(change)
    if drifted:
        worst = max(drifted, key=abs)
        reasons.append(
            f"step time drifted within {len(drifted)} of {len(runs)} runs "
            f"(first to second half, up to {worst:+.1%})"
        )
    reasons += clock_events.instability(metrics)
    return reasons


def legacy_run_uid(result_uid: str) -> str:
    """The uid of the run made of a result stored before runs existed: derived from the
    result's, so that a migrated database and an old export of it agree on it (an import
    then adds nothing twice)."""
    return hashlib.sha256(f"legacy-run:{result_uid}".encode()).hexdigest()[:32]


def from_legacy(result: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A result stored before runs existed (one worker's document), as a 1-run result and
    its run; the run is None for a case that never ran (skipped). Nothing is dropped: the
    old metrics become the run's, and the result is computed from that run."""
    case = dict(result["case"]) | {"runs": 1}
    run = {
        "result_schema": RUN_SCHEMA,
        "status": result["status"],
        "case": result["case"],
        "device": result.get("device"),
        "metrics": result.get("metrics") or {},
        "error": result.get("error"),
        "run_number": 1,
    }
    upgraded = result | {"result_schema": RESULT_SCHEMA, "case": case}
    if result["status"] == "ok":
        try:
            return combine(case, [run], "fixed_runs", parse_runs(1)), run
        except (KeyError, TypeError, ValueError, ArithmeticError):
            # An ok result without its step times (damaged, or written by hand) keeps
            # its metrics as they were: nothing can be computed, and nothing is dropped.
            return upgraded | {"metrics": dict(run["metrics"]) | {"runs": 1}}, run
    error = result.get("error") or {}
    # A worker's failure has its traceback, one the parent saw its stderr; a case skipped
    # or failed before any process ran (a largest-batch search) has neither.
    if "traceback" in error or "stderr_tail" in error:
        return upgraded | {"error": error | {"run": 1}}, run
    return upgraded, None
