"""The same cases on different systems: throughput ratios to a baseline, with significance.

Two results are of the same case when their case fields are equal except those that do not
change the workload: ``seed``, ``timeout_s``, ``steps`` (the step policy) and ``threads``.
Fields missing from an older stored case take the ``Case`` default, and ``parallel: auto``
is resolved (ddp above one device), so equal workloads written differently still meet. Per
case and system the newest result counts, ok or not.

Throughput is global_batch / median(step time) (``benchmark.derive_metrics``). The ratio of a
system to the baseline is of the recorded median samples/s; whether it differs from 1 is
decided from the raw step times: a bootstrap 95 % confidence interval of

    ratio = (global_batch / median(step_s)) / (baseline global_batch / median(baseline step_s))

resampling the two sides independently (the steps of two machines are not paired), with a
fixed seed so a report reads the same twice. The interval is the percentile one: BCa's
acceleration comes from a jackknife that is undefined on degenerate samples (all step times
equal, a few steps with tied medians), while the percentile interval is always defined and
transformation-respecting (B against A is the reciprocal of A against B). "faster" /
"slower" when the interval excludes 1, else "no significant difference". With fewer than
``MIN_STEPS`` step times on a side, or a side not ok, there is no decision, and the reason
says why.

Averages are geometric means of the ratios over the cases of a group (ratios multiply: a
case twice as fast and one half as fast average to 1), counting only cases ok on both sides.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from trainperf.case import Case, label_of, parallel_mode

NOT_WORKLOAD = ("seed", "timeout_s", "steps", "threads")
MIN_STEPS = 3
CONFIDENCE = 0.95
N_RESAMPLES = 9999
CASE_DEFAULTS = {
    name: field.default for name, field in Case.model_fields.items() if not field.is_required()
}
GROUP_FIELDS = tuple(name for name in Case.model_fields if name not in NOT_WORKLOAD)
CHOSEN_GIVEN = "given with --baseline"
CHOSEN_MOST_OK = "the system with the most ok cases (ties: the oldest first result)"


class UnknownSystem(ValueError):
    """A --baseline naming no system (or a hostname of several); one line for the user."""


class UnknownField(ValueError):
    """A --group-by field that is not a workload field of a case; one line for the user."""


@dataclass(frozen=True)
class Significance:
    """The bootstrap interval of a throughput ratio and its decision, or why there is none."""

    ci95: tuple[float, float] | None
    decision: str | None
    absent_reason: str | None = None


def case_fields(case: dict[str, Any]) -> dict[str, Any]:
    """The fields of ``case`` that define its workload, defaults filled, parallel resolved."""
    fields = CASE_DEFAULTS | case
    fields["parallel"] = parallel_mode(fields)
    ordered = {k: fields[k] for k in Case.model_fields} | fields  # Case's order, then extras
    return {k: v for k, v in ordered.items() if k not in NOT_WORKLOAD}


def case_key(case: dict[str, Any]) -> str:
    return json.dumps(case_fields(case), sort_keys=True)


def ratio_ci(
    base_steps: Sequence[float],
    steps: Sequence[float],
    base_batch: float = 1.0,
    batch: float = 1.0,
    n_resamples: int = N_RESAMPLES,
) -> tuple[float, float]:
    """Percentile bootstrap interval (``CONFIDENCE``) of the throughput ratio other/baseline."""

    def ratio(base: np.ndarray, other: np.ndarray, axis: int = -1) -> np.ndarray:
        return (batch / np.median(other, axis=axis)) / (base_batch / np.median(base, axis=axis))

    # scipy 1.15 renamed random_state to rng; the seed makes reports reproducible.
    seed = "rng" if "rng" in inspect.signature(stats.bootstrap).parameters else "random_state"
    result = stats.bootstrap(
        (np.asarray(base_steps, float), np.asarray(steps, float)),
        ratio,
        paired=False,
        vectorized=True,
        n_resamples=n_resamples,
        confidence_level=CONFIDENCE,
        method="percentile",
        **{seed: np.random.default_rng(0)},
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def significance(
    base_steps: Sequence[float],
    steps: Sequence[float],
    base_batch: float = 1.0,
    batch: float = 1.0,
    n_resamples: int = N_RESAMPLES,
) -> Significance:
    """Faster, slower or no significant difference, from the raw step times of both sides."""
    for side, times in (("baseline", base_steps), ("this system", steps)):
        if len(times) < MIN_STEPS:
            reason = f"fewer than {MIN_STEPS} step times on {side} ({len(times)})"
            return Significance(None, None, reason)
    low, high = ratio_ci(base_steps, steps, base_batch, batch, n_resamples)
    decision = "faster" if low > 1 else "slower" if high < 1 else "no significant difference"
    return Significance((low, high), decision)


def geomean(ratios: Sequence[float]) -> float | None:
    return float(stats.gmean(ratios)) if ratios else None


def compare(
    results: Iterable[dict[str, Any]],
    baseline: str | None = None,
    group_by: Sequence[str] = ("devices",),
    n_resamples: int = N_RESAMPLES,
) -> dict[str, Any]:
    """The comparison document (see ``trainperf compare --json``) of stored ``results``."""
    for field in group_by:
        if field not in GROUP_FIELDS:
            allowed = ", ".join(GROUP_FIELDS)
            raise UnknownField(f"cannot group by '{field}': allowed {allowed}, or none")
    newest: dict[str, dict[str, Any]] = {}  # case key -> fingerprint -> result
    hosts: dict[str, str] = {}
    for result in results:  # oldest first: later ones replace earlier ones
        fingerprint = result["system"]["fingerprint"]
        hosts.setdefault(fingerprint, result["system"].get("hostname"))
        newest.setdefault(case_key(result["case"]), {})[fingerprint] = result
    rows = _systems(hosts, newest)
    chosen = _choose(rows, baseline)
    for row in rows:
        row["baseline"] = row is chosen
    labels = {row["fingerprint"]: row["label"] for row in rows}
    cases = [
        _case(key, by_system, chosen["fingerprint"], labels, group_by, n_resamples)
        for key, by_system in newest.items()
    ]
    cases.sort(key=lambda c: (c["case"]["model"], c["label"]))
    how = CHOSEN_GIVEN if baseline else CHOSEN_MOST_OK
    return {
        "baseline": chosen | {"chosen": how},
        "systems": rows,
        "group_by": list(group_by),
        "cases": cases,
        "groups": _groups(cases, [r["fingerprint"] for r in rows if not r["baseline"]], group_by),
    }


def _systems(hosts: dict[str, str], newest: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The systems in order of first result, labelled by hostname (short id when shared)."""
    short = _short_ids(list(hosts))
    rows = []
    for fingerprint, hostname in hosts.items():
        shared = list(hosts.values()).count(hostname) > 1
        statuses = [by[fingerprint]["status"] for by in newest.values() if fingerprint in by]
        rows.append(
            dict(
                fingerprint=fingerprint,
                hostname=hostname,
                label=f"{hostname} ({short[fingerprint]})" if shared else str(hostname),
                ok_cases=statuses.count("ok"),
                cases=len(statuses),
            )
        )
    return rows


def _short_ids(fingerprints: list[str], length: int = 8) -> dict[str, str]:
    while len({f[:length] for f in fingerprints}) < len(fingerprints):
        length += 1
    return {f: f[:length] for f in fingerprints}


def _choose(rows: list[dict[str, Any]], wanted: str | None) -> dict[str, Any]:
    if wanted is None:  # rows are in order of first result: max keeps the first of a tie
        return max(rows, key=lambda row: row["ok_cases"])
    found = [r for r in rows if wanted in (r["fingerprint"], r["hostname"])]
    if not found:
        found = [r for r in rows if r["fingerprint"].startswith(wanted)]
    if len(found) == 1:
        return found[0]
    known = "; ".join(f"{r['hostname']} ({r['fingerprint']})" for r in rows)
    if found:
        raise UnknownSystem(f"'{wanted}' names several systems, give a fingerprint: {known}")
    raise UnknownSystem(f"no system '{wanted}' in the results: known systems {known}")


def _case(
    key: str,
    by_system: dict[str, dict[str, Any]],
    baseline: str,
    labels: dict[str, str],
    group_by: Sequence[str],
    n_resamples: int,
) -> dict[str, Any]:
    fields = case_fields(next(iter(by_system.values()))["case"])
    base = by_system.get(baseline)
    per_system = {
        fp: _versus(by_system.get(fp), base, n_resamples)
        if fp != baseline
        else _entry(base) | {"absent_reason": "baseline"}
        for fp in labels
    }
    group = {field: fields[field] for field in group_by}
    return dict(case=fields, key=key, label=label_of(fields), group=group, per_system=per_system)


def _entry(result: dict[str, Any] | None) -> dict[str, Any]:
    ok = result is not None and result["status"] == "ok"
    metrics = result["metrics"] if ok else {}
    return {
        "status": result["status"] if result else "not run",
        "result_id": result["id"] if result else None,
        "samples_per_s": metrics.get("samples_per_s_median"),
        "steps": len(metrics.get("step_s") or []),
    } | dict.fromkeys(("ratio", "difference", "ci95", "decision", "absent_reason"))


def _versus(
    result: dict[str, Any] | None, base: dict[str, Any] | None, n_resamples: int
) -> dict[str, Any]:
    entry = _entry(result)
    if entry["status"] != "ok":
        return entry | {"absent_reason": f"{entry['status']} on this system"}
    base_status = base["status"] if base else "not run"
    if base_status != "ok" or not base["metrics"].get("samples_per_s_median"):
        return entry | {"absent_reason": f"{base_status} on the baseline"}
    ratio = entry["samples_per_s"] / base["metrics"]["samples_per_s_median"]
    found = significance(
        base["metrics"].get("step_s") or [],
        result["metrics"].get("step_s") or [],
        _global_batch(base),
        _global_batch(result),
        n_resamples,
    )
    return entry | {
        "ratio": ratio,
        "difference": ratio - 1,
        "ci95": list(found.ci95) if found.ci95 else None,
        "decision": found.decision,
        "absent_reason": found.absent_reason,
    }


def _global_batch(result: dict[str, Any]) -> float:
    """Samples per step as recorded; else as the case defines it (``Case.global_batch``);
    else as the recorded throughput implies (a stored case this version cannot read)."""
    metrics = result["metrics"]
    if metrics.get("global_batch"):
        return metrics["global_batch"]
    known = {k: v for k, v in result["case"].items() if k in Case.model_fields}
    try:
        return Case(**known).global_batch
    except ValueError:  # pydantic's ValidationError
        return metrics["samples_per_s_median"] * float(np.median(metrics["step_s"]))


def _groups(
    cases: list[dict[str, Any]], others: list[str], group_by: Sequence[str]
) -> list[dict[str, Any]]:
    """Geometric mean of the ratios per group and system, then over all cases."""
    members: dict[tuple, list[dict[str, Any]]] = {}
    for case in cases:
        members.setdefault(tuple(case["group"].values()), []).append(case)
    # Group values in order, None last, never comparing a number with a string.
    order = sorted(members, key=lambda vs: [(v is None, type(v).__name__, v) for v in vs])
    groups = [(dict(zip(group_by, k, strict=True)), members[k]) for k in order] if group_by else []
    rows = []
    for group, in_group in [*groups, (None, cases)]:
        per_system = {}
        for fingerprint in others:
            found = [c["per_system"][fingerprint]["ratio"] for c in in_group]
            ratios = [r for r in found if r is not None]
            per_system[fingerprint] = {"geomean_ratio": geomean(ratios), "cases": len(ratios)}
        label = "all cases" if group is None else ", ".join(f"{k}={v}" for k, v in group.items())
        rows.append({"group": group, "label": label, "per_system": per_system})
    return rows
