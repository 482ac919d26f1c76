"""Fit the performance model's free parameters to what this machine measured, and check it.

From a results database (``trainperf.store.database``):

(a) compute: the newest ok single-device result of the model (preferring the batch size and
    model size asked for) gives the measured throughput X (samples/s at that batch; the
    mean over its independent runs, its 95% interval over them travelling with the
    source), which the model uses as t_compute = B / X: the way for a CPU with no catalog
    entry; and, for a named catalog device, the achieved fraction f of peak that makes the
    roofline of ``trainperf.predict.compute.compute_rate`` take exactly B / X (solved by
    ``scipy.optimize.brentq``), which carries over to another device's peak;
(b) stragglers: the step times of that result's runs, each divided by its run's mean (the
    noise within a process, not between processes), are the distribution the N ranks draw
    from (``trainperf.predict.terms.StepNoise``);
(c) link: every ok ``trainperf micro collective`` all_reduce row (size n bytes, time t on p
    ranks) of the same system gives the bus-bandwidth curve busbw(n) the model times
    all-reduces with (``terms.BusBandwidthCurve``), and fits
        t = 2(p−1)·α + 2(p−1)/p · n · (1/β)
    by least squares (``numpy.linalg.lstsq``) in the two unknowns α and 1/β, reported
    beside it. Each row is divided by its own t, so the fit minimises relative errors:
    small messages (latency) and large ones (bandwidth) weigh alike. A negative α or 1/β is
    refused with the reason: such measurements do not follow the α–β model. The link is an
    intra-node one when every run was on one node, an inter-node one otherwise;
(d) overhead: every stored ok result of the model on N ≥ 2 devices gives
        o(N) = measured median step − the model's step without overhead
    (compute from (a), stragglers from (b), communication on the link of (c)), and
    ``terms.fit_overhead`` fits o(N) = a + b·log2 N to them;
(e) check: every stored ok result of the model on that system (one or several devices) is
    predicted again with the calibrated parameters; the error is (predicted − measured) /
    measured. Results on N ≥ 2 devices were used by (d), so their check is in sample.
(f) batch curve: the newest single-device result at each batch size (same precision, size
    and device as (a)) gives t(B) = a + b·B, the step time against the batch, b fitted to
    them all and the line through (a)'s result (``terms.fit_batch_curve``): with two or
    more batch sizes stored (``trainperf run -b 8,16,32``), a prediction on this machine
    takes each device's step from the curve at the batch that device gets, not B / X at
    the one batch measured.
(g) contention: the newest ``micro collective --under-load`` run of the system gives the
    slowdowns of compute beside an all-reduce, of the all-reduce beside compute, and of a
    rank's compute beside the other ranks' (``terms.Contention``), which a prediction on
    this machine prices the overlap and the ranks sharing a host with
    (``trainperf.predict.contention_fit``).

Whatever cannot be measured stays with the catalog (``Calibration.absent`` says why).
"""

from __future__ import annotations

import sqlite3
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import brentq

from trainperf.case.modes import device_count
from trainperf.models.spec import ModelSpec
from trainperf.predict.compute import compute_rate
from trainperf.predict.contention_fit import measured_contention
from trainperf.predict.inputs import Measured, Placement, PredictError, Workload
from trainperf.predict.model import predict
from trainperf.predict.terms import (
    NO_NOISE,
    BatchCurve,
    BusBandwidthCurve,
    Contention,
    Overhead,
    StepNoise,
    fit_batch_curve,
    fit_overhead,
)
from trainperf.store.access import StoreError
from trainperf.store.database import Store
from trainperf.store.query import ResultFilter


class CalibrationError(ValueError):
    """A database or measurements that cannot calibrate; one line for the user."""


@dataclass(frozen=True)
class MeasuredDevice:
    """This machine's device as its stored results describe it: no peak and no default
    efficiency (those are a catalog device's)."""

    id: str
    name: str
    kind: str
    memory_bytes: float | None
    capability: tuple[int, int] | None = None  # a GPU's, as its results recorded it

    def peak_flops(self, precision: str) -> float | None:
        return None

    def efficiency(self, precision: str) -> float | None:
        return None


@dataclass(frozen=True)
class MeasuredLink:
    """A link with α and β fitted to this machine's all-reduce timings."""

    id: str
    scope: str
    bytes_per_s: float
    latency_s: float
    curve: BusBandwidthCurve | None = None


@dataclass
class Calibration:
    model: str
    precision: str | None = None
    system: str | None = None
    achieved_fraction: float | None = None
    single_device_throughput: float | None = None
    throughput_batch: int | None = None
    batch_curve: BatchCurve | None = None
    contention: Contention | None = None
    memory_bytes_per_s: float | None = None  # STREAM add, every rank at once (bucket copies)
    alpha_s: float | None = None
    beta_bytes_per_s: float | None = None
    link_scope: str | None = None
    busbw_curve: BusBandwidthCurve | None = None
    noise: StepNoise | None = None
    overhead: Overhead | None = None
    measured_device: MeasuredDevice | None = None
    fit_rows: list[dict[str, Any]] = field(default_factory=list)
    sources: dict[str, Any] = field(default_factory=dict)
    absent: dict[str, str] = field(default_factory=dict)

    def compute_inputs(self, same_device: bool = True) -> dict[str, Any]:
        """The compute arguments of ``Measured`` this calibration gives, {} when none, in
        order: the achieved fraction, which carries over to another device's peak; else,
        only where the prediction is for this machine (``same_device``), the step time
        against the batch, else the single-device throughput. A fraction solved from a
        throughput, and the throughput, hold at that throughput's batch."""
        at_batch = {"throughput_batch": self.throughput_batch}
        if self.achieved_fraction is not None:
            return {"achieved_fraction": self.achieved_fraction, **at_batch}
        if not same_device:
            return {}
        if self.batch_curve is not None:
            return {"batch_curve": self.batch_curve}
        if self.single_device_throughput is not None:
            return {"single_device_throughput": self.single_device_throughput, **at_batch}
        return {}

    def link(self, scope: str) -> MeasuredLink | None:
        """The fitted link if it was measured as ``scope`` ("intra" when every run was on
        one node, "inter" otherwise), else None: one scope does not stand for the other."""
        if self.alpha_s is None or self.beta_bytes_per_s is None or scope != self.link_scope:
            return None
        return MeasuredLink(
            "measured", scope, self.beta_bytes_per_s, self.alpha_s, self.busbw_curve
        )

    def as_dict(self) -> dict[str, Any]:
        document = asdict(self)
        if self.noise is not None:  # thousands of step times: their summary only
            document["noise"] = {
                "steps": len(self.noise.samples),
                "cv": self.noise.sigma(1.0),
                "source": self.noise.source,
            }
        return document


def fit_alpha_beta(rows: list[tuple[int, float, float]]) -> tuple[float, float, float]:
    """(α s, β bytes/s, rms relative residual) from (ranks p, bytes n, seconds t) rows."""
    usable = [(p, n, t) for p, n, t in rows if p >= 2 and t > 0]
    if len({(p, n) for p, n, _ in usable}) < 2:
        raise CalibrationError("fewer than 2 distinct all_reduce sizes on 2 or more ranks")
    p, n, t = (np.array(column, dtype=float) for column in zip(*usable, strict=True))
    a = np.column_stack([2 * (p - 1), 2 * (p - 1) / p * n]) / t[:, None]
    (alpha, inverse_beta), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    if inverse_beta <= 0:
        raise CalibrationError(
            "the all_reduce times do not grow with the message size (fitted 1/β ≤ 0): "
            "no bandwidth can be fitted"
        )
    if alpha < 0:
        raise CalibrationError(
            f"the fitted latency α is negative ({alpha * 1e6:.3g} µs): the small messages "
            "do not follow the α–β model; measure smaller sizes or more iterations"
        )
    residual = a @ np.array([alpha, inverse_beta]) - 1
    return float(alpha), float(1 / inverse_beta), float(np.sqrt(np.mean(residual**2)))


def _size(spec: ModelSpec, result: dict[str, Any]) -> int | None:
    """The image size or sequence length of ``result``, a result of the model ``spec``."""
    return result["metrics"].get(spec.size_name) or result["case"].get(spec.size_name)


def _matches(result: dict[str, Any], device_type: str | None, precision: str | None) -> bool:
    case = result["case"]
    return (
        result["status"] == "ok"
        and (device_type is None or case.get("device") == device_type)
        and (precision is None or case.get("precision") == precision)
    )


def calibrate(
    db_path: str | Path,
    spec: ModelSpec,
    device: Any | None = None,
    *,
    precision: str | None = None,
    device_type: str | None = None,
    batch_size: int | None = None,
    size: int | None = None,
    system: str | None = None,
) -> Calibration:
    """Calibrate from the stored results of the model ``spec`` (see the module docstring).

    ``device`` is the catalog device this machine is (for the achieved fraction);
    ``device_type`` ("cpu", "cuda") and ``precision`` filter the stored results; ``system``
    (a fingerprint) defaults to the system of the newest matching single-device result.
    """
    path, model = Path(db_path), spec.name
    if not path.exists() and not path.is_symlink():  # a FIFO, device or dangling link: below
        raise CalibrationError(f"no results database at {path}")
    try:  # read in place: calibrating never writes to (or migrates) the database
        with Store.read_only(path) as store:
            chosen = store.select(ResultFilter(model=(model,)), runs=True, steps=True)
            results = [r for r in chosen if _matches(r, device_type, precision)]
            runs = store.micro("collective")
    except (StoreError, sqlite3.DatabaseError) as exc:
        raise CalibrationError(f"cannot read {path} as a results database: {exc}") from None
    singles = [r for r in results if device_count(r["case"]) == 1]
    if system is None:
        newest = (singles or results)[-1:] or [None]
        system = newest[0]["system"]["fingerprint"] if newest[0] else None
    results = [r for r in results if r["system"]["fingerprint"] == system]
    singles = [r for r in singles if r["system"]["fingerprint"] == system]
    cal = Calibration(model=model, precision=precision, system=system)
    if singles:
        _compute(cal, spec, singles, device, batch_size, size)
    else:
        cal.absent["compute"] = f"no ok single-device result of {model} in {path}"
        cal.absent["noise"] = "no single-device result to take step times from"
    here = _runs_here(runs, system, device_type)
    _link(cal, here)
    _contention(cal, [r for r in here if r["metrics"].get("under_load")], spec, batch_size, size)
    _overhead(cal, spec, [r for r in results if device_count(r["case"]) > 1], device)
    _check(cal, spec, results, device)
    return cal


def _compute(
    cal: Calibration,
    spec: ModelSpec,
    singles: list[dict[str, Any]],
    device: Any | None,
    batch_size: int | None,
    size: int | None,
) -> None:
    chosen = max(
        singles,
        key=lambda r: (r["case"]["batch_size"] == batch_size, _size(spec, r) == size, r["id"]),
    )
    case, metrics = chosen["case"], chosen["metrics"]
    cal.precision = case["precision"]
    cal.single_device_throughput = metrics["samples_per_s_median"]
    cal.throughput_batch = case["batch_size"]
    cal.sources["compute"] = {
        "result_id": chosen["id"],
        "created_at": chosen["created_at"],
        "batch_size": case["batch_size"],
        "size": _size(spec, chosen),
        "samples_per_s": metrics["samples_per_s_median"],
        "samples_per_s_ci95": metrics.get("samples_per_s_ci95"),
        "runs": metrics.get("runs", 1),
        "achieved_tflops": metrics.get("achieved_tflops"),
    }
    info = chosen.get("device") or {}
    memory = info.get("memory_bytes") or chosen["system"].get("memory_bytes")
    kind = "gpu" if case.get("device") == "cuda" else "cpu"
    capability = tuple(info["capability"]) if info.get("capability") else None
    cal.measured_device = MeasuredDevice(
        f"measured ({info.get('name', kind)})", info.get("name", kind), kind, memory, capability
    )
    _batch_curve(cal, spec, singles, chosen)
    cal.noise = _step_noise(chosen)
    if cal.noise is None:
        cal.absent["noise"] = f"result {chosen['id']} has fewer than 2 step times"
    if device is None:
        cal.absent["achieved_fraction"] = "no catalog device named for this machine"
    elif not device.peak_flops(cal.precision):
        cal.absent["achieved_fraction"] = f"{device.id} has no {cal.precision} peak"
    else:
        _solve_fraction(cal, spec, device, case["batch_size"], _size(spec, chosen))


def _batch_curve(
    cal: Calibration, spec: ModelSpec, singles: list[dict[str, Any]], chosen: dict[str, Any]
) -> None:
    """(f) The step time against the batch, fitted to the newest result at each batch size
    of the chosen result's precision, size and device (``terms.fit_batch_curve``)."""
    like = (chosen["case"]["precision"], _size(spec, chosen), chosen["case"].get("device"))
    newest: dict[int, dict[str, Any]] = {}
    for result in singles:  # oldest first: the newest of each batch stays
        case = result["case"]
        if (case["precision"], _size(spec, result), case.get("device")) == like:
            newest[case["batch_size"]] = result
    points = [(b, r["metrics"]["samples_per_s_median"]) for b, r in sorted(newest.items())]
    try:
        cal.batch_curve = fit_batch_curve(
            points,
            f"measured on {len(points)} batch sizes",
            through=(chosen["case"]["batch_size"], chosen["metrics"]["samples_per_s_median"]),
        )
    except ValueError as exc:
        cal.absent["batch_curve"] = str(exc)
        return
    cal.sources["batch_curve"] = [
        {"result_id": newest[b]["id"], "batch_size": b, "samples_per_s": x} for b, x in points
    ]


def _step_noise(result: dict[str, Any]) -> StepNoise | None:
    """Each run's step times over its own mean, pooled (module docstring, (b))."""
    relative = []
    for run in result.get("runs", []):
        steps = [float(t) for t in run["metrics"].get("step_s", [])]
        if len(steps) >= 2:
            mean = float(np.mean(steps))
            relative += [t / mean for t in steps]
    if len(relative) < 2:
        return None
    runs = len(result.get("runs", []))
    return StepNoise(
        samples=tuple(relative),
        source=f"{len(relative)} measured steps of result {result['id']} ({runs} runs)",
    )


def _solve_fraction(
    cal: Calibration, spec: ModelSpec, device: Any, batch: int, size: int | None
) -> None:
    """The f at which the roofline's step equals the measured one (module docstring, (a))."""
    measured = batch / cal.single_device_throughput

    def excess(fraction: float) -> float:
        rate = compute_rate(spec, device, cal.precision, Measured(achieved_fraction=fraction), size)
        return rate.seconds(batch) - measured

    if excess(1.0) > 0:
        cal.absent["achieved_fraction"] = (
            f"the roofline of {device.id} at full peak is slower than the measured step: "
            "its memory-bound ops alone take longer"
        )
        return
    cal.achieved_fraction = float(brentq(excess, 1e-6, 1.0, xtol=1e-12))


def _runs_here(
    runs: list[dict[str, Any]], system: str | None, device_type: str | None
) -> list[dict[str, Any]]:
    """The ok ``micro collective`` runs of ``system`` (on ``device_type`` when given)."""
    return [
        run
        for run in runs
        if run["status"] == "ok"
        and run["system"] == system
        and (device_type is None or run["params"].get("device") == device_type)
    ]


def _link(cal: Calibration, runs: list[dict[str, Any]]) -> None:
    """(c) the link, from the all_reduce rows of ``runs`` (this system's)."""
    rows, used, local, busbw = [], [], [], []
    for run in runs:
        info = run.get("device") or {}
        ranks = run["metrics"].get("world_size") or info.get("world_size")
        usable = [
            r
            for r in run["metrics"].get("rows", [])
            if r.get("op") == "all_reduce" and not r.get("wrong") and r.get("time_us")
        ]
        found = [(int(ranks), float(r["size_bytes"]), float(r["time_us"]) * 1e-6) for r in usable]
        if ranks and found:
            rows += found
            busbw += [
                (int(ranks), float(r["size_bytes"]), float(r["busbw_gbps"]) * 1e9) for r in usable
            ]
            used.append(run["id"])
            local.append(info.get("local_world_size", ranks) == ranks)
    if not rows:
        cal.absent["link"] = "no ok `trainperf micro collective` all_reduce rows on this system"
        return
    try:
        alpha, beta, residual = fit_alpha_beta(rows)
    except CalibrationError as exc:
        cal.absent["link"] = str(exc)
        return
    cal.alpha_s, cal.beta_bytes_per_s = alpha, beta
    cal.link_scope = "intra" if all(local) else "inter"
    cal.busbw_curve = BusBandwidthCurve.from_rows(busbw, f"micro collective {used}")
    cal.sources["link"] = {
        "micro_ids": used,
        "rows": len(rows),
        "ranks": sorted({p for p, _, _ in rows}),
        "rms_relative_residual": residual,
    }


def _contention(
    cal: Calibration,
    loaded: list[dict[str, Any]],
    spec: ModelSpec,
    batch_size: int | None,
    size: int | None,
) -> None:
    """(g) contention, from the newest usable under-load run of ``loaded``
    (``contention_fit.measured_contention``), or absent with the reason."""
    batch = cal.throughput_batch or batch_size or 1
    measured = measured_contention(loaded, spec, batch, size, cal.precision)
    if measured is None:
        cal.absent["contention"] = "no `trainperf micro collective --under-load` run here"
        return
    cal.contention = measured.contention
    cal.sources["contention"] = measured.source
    if measured.memory_bytes_per_s:
        cal.memory_bytes_per_s = measured.memory_bytes_per_s


def _compute_inputs(cal: Calibration, device: Any | None) -> tuple[dict[str, Any], Any] | None:
    """The compute arguments of ``predict`` and the device they go with (a fraction: the
    catalog's device, whose peak it is of; a curve or a throughput: this machine), or None."""
    inputs = cal.compute_inputs()
    if not inputs:
        return None
    return inputs, device if "achieved_fraction" in inputs else cal.measured_device


def _predicted(
    cal: Calibration,
    spec: ModelSpec,
    result: dict[str, Any],
    device: Any | None,
    overhead: Overhead,
) -> dict[str, Any]:
    """``result``'s case predicted with the calibration (raises PredictError); the caller
    has checked that ``_compute_inputs`` gives something."""
    compute, device = _compute_inputs(cal, device)
    case, nodes = result["case"], result["case"].get("nodes", 1)
    per_node = case.get("devices", 1)
    return predict(
        Workload(
            spec,
            case["batch_size"],
            case["precision"],
            case.get("scaling", "weak"),
            _size(spec, result),
        ),
        Placement(
            device,
            [device_count(case)],
            per_node,
            intra=cal.link("intra") if per_node > 1 else None,
            inter=cal.link("inter") if nodes > 1 else None,
        ),
        Measured(
            noise=cal.noise or NO_NOISE,
            overhead=overhead,
            contention=cal.contention,
            memory_bytes_per_s=cal.memory_bytes_per_s,
            **compute,
        ),
        bucket_mb=case.get("bucket_mb") or 25.0,
        grad_compression=case.get("grad_compression") or "none",
    )["rows"][0]


def _overhead(
    cal: Calibration, spec: ModelSpec, multi: list[dict[str, Any]], device: Any | None
) -> None:
    """(d): o(N) = measured median step − the model's step without overhead."""
    if _compute_inputs(cal, device) is None:
        cal.absent["overhead"] = "no compute calibration to subtract from the measured steps"
        return
    points, used = [], []
    for result in multi:
        if cal.precision is not None and result["case"].get("precision") != cal.precision:
            continue
        try:
            modelled = _predicted(cal, spec, result, device, Overhead())
        except PredictError:
            continue
        measured = result["metrics"].get("step_s_median")
        if measured:
            points.append((device_count(result["case"]), measured - modelled["step_s"]))
            used.append(result["id"])
    if not points:
        cal.absent["overhead"] = f"no ok result of {cal.model} on 2 or more devices"
        return
    cal.overhead = fit_overhead(points, f"fitted to results {used}")
    cal.sources["overhead"] = {
        "result_ids": used,
        "points": [{"devices": n, "overhead_s": o} for n, o in points],
    }


def _check(
    cal: Calibration, spec: ModelSpec, results: list[dict[str, Any]], device: Any | None
) -> None:
    """(e): predict every stored ok result again; the error of each."""
    if _compute_inputs(cal, device) is None:
        return
    for result in results:
        if cal.precision is not None and result["case"].get("precision") != cal.precision:
            continue
        case, measured = result["case"], result["metrics"]["samples_per_s_median"]
        count = device_count(case)
        row = {"result_id": result["id"], "devices": count, "batch_size": case["batch_size"]}
        row |= {"scaling": case.get("scaling", "weak"), "measured_samples_per_s": measured}
        row["measured_ci95"] = result["metrics"].get("samples_per_s_ci95")
        try:
            predicted = _predicted(cal, spec, result, device, cal.overhead or Overhead())
            predicted = predicted["samples_per_s"]
        except PredictError as exc:
            cal.fit_rows.append(row | {"predicted_samples_per_s": None, "reason": str(exc)})
            continue
        error = (predicted - measured) / measured * 100
        cal.fit_rows.append(row | {"predicted_samples_per_s": predicted, "error_pct": error})
