"""The same cases on different systems, or in two files: throughput ratios with significance.

Two results are of the same case when their case fields are equal except those that do not
change the workload: ``seed``, ``timeout_s``, ``steps`` (the step policy), ``runs`` (the
run policy) and ``threads``. Fields missing from an older stored case take the ``Case``
default, and ``parallel: auto`` is resolved (ddp above one device), so equal workloads
written differently still meet. Per case and column (a system of one database, or one of
two files) the newest result counts, ok or not.

A result's throughput is the mean of its runs' estimates (trainperf.case.result). The
ratio of a column to the baseline is of those means; whether it differs from 1 is decided
from how the runs vary, never from the step times of one process: Fieller's 95% interval
of the ratio of two means from independent runs (trainperf.measure.hierarchy.ratio_interval),
"faster" / "slower" when it excludes 1, "no significant difference" otherwise. With fewer
than ``MIN_RUNS_FOR_DECISION`` (3) runs on a side there is no decision: "not enough runs".
The A/A benchmark (benchmarks/aa_test.py) checks that two measurements of the same cases
come out "no significant difference" about 95% of the time.

Averages are geometric means of the ratios over the cases of a group (ratios multiply: a
case twice as fast and one half as fast average to 1), counting only cases ok on both sides.

``compare`` lines up the systems of one database (and, ``across`` case fields, the values of
those fields on each: PyTorch against JAX on one machine); ``compare_sources`` two sources (exported
files or databases, ``trainperf compare A B``), A the baseline, whatever systems they hold:
the way to ask whether a change (a driver, a setting, a node) made training faster.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainperf.analysis.system_labels import system_labels
from trainperf.case.result import run_estimates
from trainperf.case.spec import Case, label_of, parallel_mode
from trainperf.measure.hierarchy import MIN_RUNS_FOR_DECISION, UNBOUNDED, ratio_interval

NOT_WORKLOAD = ("seed", "timeout_s", "steps", "runs", "threads")
CASE_DEFAULTS = {
    name: field.default for name, field in Case.model_fields.items() if not field.is_required()
}
GROUP_FIELDS = tuple(name for name in Case.model_fields if name not in NOT_WORKLOAD)
CHOSEN_GIVEN = "given with --baseline"
CHOSEN_MOST_OK = "the system with the most ok cases (ties: the oldest first result)"
CHOSEN_FIRST = "the first source given (A)"


class UnknownSystem(ValueError):
    """A --baseline naming no system (or a hostname of several); one line for the user."""


class UnknownField(ValueError):
    """A --group-by field that is not a workload field of a case; one line for the user."""


@dataclass(frozen=True)
class Significance:
    """The 95% interval of a throughput ratio and its decision, or why there is none."""

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


def significance(base_runs: Sequence[float], runs: Sequence[float]) -> Significance:
    """Faster, slower or no significant difference, from the run estimates of both sides."""
    for side, values in (("the baseline", base_runs), ("this side", runs)):
        if len(values) < MIN_RUNS_FOR_DECISION:
            reason = (
                f"not enough runs: {len(values)} on {side} (a decision needs "
                f"{MIN_RUNS_FOR_DECISION} on each side)"
            )
            return Significance(None, None, reason)
    found = ratio_interval(base_runs, runs)
    if not found.bounded:
        return Significance(None, found.decision(), UNBOUNDED)
    return Significance((found.low, found.high), found.decision())


def geomean(ratios: Sequence[float]) -> float | None:
    """The geometric mean, as ``scipy.stats.gmean`` computes it (exp of the mean of the
    logs), without importing scipy.stats: most of a second of every ``compare``."""
    if not ratios:
        return None
    with np.errstate(divide="ignore"):
        return float(np.exp(np.mean(np.log(np.asarray(ratios, dtype=float)))))


def compare(
    results: Iterable[dict[str, Any]],
    baseline: str | None = None,
    group_by: Sequence[str] = ("devices",),
    across: Sequence[str] = (),
) -> dict[str, Any]:
    """The comparison document (``trainperf compare --json``) of the systems of stored
    ``results``: one column per system, ``baseline`` a hostname or fingerprint (default:
    the system with the most ok cases).

    ``across``: case fields whose values become columns too (``framework``, ``compile``):
    one column per system and combination of their values, and a case is the workload
    without them, so PyTorch, PyTorch compiled and JAX on one machine stand side by side.
    ``baseline`` may then also be a column's label (``framework=jax``)."""
    _check_fields(group_by, "group by")
    _check_fields(across, "compare across")
    if overlap := set(group_by) & set(across):
        raise UnknownField(f"cannot group by and compare across {', '.join(sorted(overlap))}")
    newest: dict[str, dict[str, Any]] = {}  # case key -> column -> result
    hosts: dict[str, str] = {}
    columns: dict[str, tuple[str, dict[str, Any]]] = {}  # column -> (fingerprint, values)
    for result in results:  # oldest first: later ones replace earlier ones
        fingerprint = result["system"]["fingerprint"]
        hosts.setdefault(fingerprint, result["system"].get("hostname"))
        fields = case_fields(result["case"])
        values = {field: fields[field] for field in across}
        column = fingerprint + "".join(f"|{k}={v}" for k, v in values.items())
        columns.setdefault(column, (fingerprint, values))
        newest.setdefault(_workload_key(fields, across), {})[column] = result
    rows = _systems(hosts, newest, columns)
    chosen = _choose(rows, baseline)
    how = CHOSEN_GIVEN if baseline else CHOSEN_MOST_OK
    return _document(rows, chosen, how, newest, group_by, across)


def _workload_key(fields: dict[str, Any], across: Sequence[str]) -> str:
    """The case key of a workload with the ``across`` fields taken out. Across frameworks,
    PyTorch's ddp and JAX's mesh are the same data parallelism (a replica per device)."""
    kept = {k: v for k, v in fields.items() if k not in across}
    if "framework" in across and kept.get("parallel") == "mesh":
        kept["parallel"] = "ddp"
    return json.dumps(kept, sort_keys=True)


def compare_sources(
    sources: Sequence[tuple[str, Sequence[dict[str, Any]]]],
    group_by: Sequence[str] = ("devices",),
) -> dict[str, Any]:
    """The comparison document of two (or more) sources, each (name, its results): one
    column per source, the first the baseline, cases matched whatever system ran them."""
    _check_fields(group_by, "group by")
    newest: dict[str, dict[str, Any]] = {}  # case key -> source id -> result
    rows = []
    for index, (name, results) in enumerate(sources):
        column = "AB"[index] if len(sources) <= 2 else str(index + 1)
        for result in results:
            newest.setdefault(case_key(result["case"]), {})[column] = result
        statuses = [by[column]["status"] for by in newest.values() if column in by]
        hostnames = list(dict.fromkeys(str(r["system"].get("hostname")) for r in results))
        rows.append(
            dict(
                id=column,
                fingerprint=column,
                hostname=", ".join(hostnames),
                label=f"{column}: {name}",
                across={},
                source=name,
                ok_cases=statuses.count("ok"),
                cases=len(statuses),
            )
        )
    return _document(rows, rows[0], CHOSEN_FIRST, newest, group_by)


def _check_fields(fields: Sequence[str], verb: str) -> None:
    for field in fields:
        if field not in GROUP_FIELDS:
            allowed = ", ".join(GROUP_FIELDS)
            raise UnknownField(f"cannot {verb} '{field}': allowed {allowed}, or none")


def _document(
    rows: list[dict[str, Any]],
    chosen: dict[str, Any],
    how: str,
    newest: dict[str, dict[str, Any]],
    group_by: Sequence[str],
    across: Sequence[str] = (),
) -> dict[str, Any]:
    for row in rows:
        row["baseline"] = row is chosen
    columns = [row["id"] for row in rows]
    cases = [
        _case(key, by_column, chosen["id"], columns, group_by, across)
        for key, by_column in newest.items()
    ]
    cases.sort(key=lambda c: (c["case"]["model"], c["label"]))
    return {
        "baseline": chosen | {"chosen": how},
        "systems": rows,
        "group_by": list(group_by),
        "across": list(across),
        "cases": cases,
        "groups": _groups(cases, [r["id"] for r in rows if not r["baseline"]], group_by),
    }


def _systems(
    hosts: dict[str, str],
    newest: dict[str, dict[str, Any]],
    columns: dict[str, tuple[str, dict[str, Any]]],
) -> list[dict[str, Any]]:
    """The columns: the systems in order of first result, labelled by hostname (short id
    when shared: trainperf.analysis.system_labels); with ``across`` values, each system's
    combinations in sorted order, labelled by them too."""
    labels = system_labels(hosts)
    rows = []
    for fingerprint, hostname in hosts.items():
        system = labels[fingerprint]
        mine = [(c, values) for c, (f, values) in columns.items() if f == fingerprint]
        # Defaults first (PyTorch, not compiled: the usual baseline), then by value.
        mine.sort(
            key=lambda item: [
                (v != CASE_DEFAULTS.get(k), type(v).__name__, str(v)) for k, v in item[1].items()
            ]
        )
        for column, values in mine:
            statuses = [by[column]["status"] for by in newest.values() if column in by]
            across = ", ".join(f"{k}={v}" for k, v in values.items())
            label = across if across and len(hosts) == 1 else f"{system} {across}".rstrip()
            rows.append(
                dict(
                    id=column,
                    fingerprint=fingerprint,
                    hostname=hostname,
                    label=label,
                    across=values,
                    ok_cases=statuses.count("ok"),
                    cases=len(statuses),
                )
            )
    return rows


def _choose(rows: list[dict[str, Any]], wanted: str | None) -> dict[str, Any]:
    if wanted is None:  # rows are in order of first result: max keeps the first of a tie
        return max(rows, key=lambda row: row["ok_cases"])
    found = [r for r in rows if wanted in (r["fingerprint"], r["hostname"], r["label"])]
    if not found:
        found = [r for r in rows if r["fingerprint"].startswith(wanted)]
    if len(found) == 1:
        return found[0]
    known = "; ".join(f"{r['label']} ({r['fingerprint']})" for r in rows)
    if found:
        raise UnknownSystem(f"'{wanted}' names several systems, give a fingerprint: {known}")
    raise UnknownSystem(f"no system '{wanted}' in the results: known systems {known}")


def _case(
    key: str,
    by_column: dict[str, dict[str, Any]],
    baseline: str,
    columns: list[str],
    group_by: Sequence[str],
    across: Sequence[str] = (),
) -> dict[str, Any]:
    first = case_fields(next(iter(by_column.values()))["case"])
    fields = {k: v for k, v in first.items() if k not in across}
    base = by_column.get(baseline)
    per_system = {
        column: _versus(by_column.get(column), base)
        if column != baseline
        else _entry(base) | {"absent_reason": "baseline"}
        for column in columns
    }
    group = {field: fields[field] for field in group_by}
    return dict(case=fields, key=key, label=label_of(fields), group=group, per_system=per_system)


def _entry(result: dict[str, Any] | None) -> dict[str, Any]:
    ok = result is not None and result["status"] == "ok"
    metrics = result["metrics"] if ok else {}
    return {
        "status": result["status"] if result else "not run",
        "result_id": result.get("id") if result else None,
        "samples_per_s": metrics.get("samples_per_s_median"),
        "samples_per_s_ci95": metrics.get("samples_per_s_ci95"),
        "runs": len(run_estimates(result)) if ok else 0,
    } | dict.fromkeys(("ratio", "difference", "ci95", "decision", "absent_reason"))


def _versus(result: dict[str, Any] | None, base: dict[str, Any] | None) -> dict[str, Any]:
    entry = _entry(result)
    if entry["status"] != "ok":
        return entry | {"absent_reason": f"{entry['status']} on this side"}
    base_status = base["status"] if base else "not run"
    if base_status != "ok" or not base["metrics"].get("samples_per_s_median"):
        return entry | {"absent_reason": f"{base_status} on the baseline"}
    ratio = entry["samples_per_s"] / base["metrics"]["samples_per_s_median"]
    found = significance(run_estimates(base), run_estimates(result))
    return entry | {
        "ratio": ratio,
        "difference": ratio - 1,
        "ci95": list(found.ci95) if found.ci95 else None,
        "decision": found.decision,
        "absent_reason": found.absent_reason,
    }


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
