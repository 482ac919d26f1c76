"""A results database with two systems, for the report, compare and export tests.

System A ("vm") holds real measurements of the 2-core CPU development machine
(``tests/data/cpu_measurements.json``: cases over batch sizes, each in 3 runs, 2-process
DDP cases, a GEMM sweep, gloo collectives, a memory copy, a layer profile). System B
("big-cpu<b>") is *made up* from them for the tests only: the same cases with every run's
step times divided by a known factor (``SPEEDUP``), DDP on 2 and 4 processes, energy
readings, and failed cases (oom, timeout, crashed). A model named
``<script>alert(1)</script>`` checks HTML escaping. System B's numbers are not measurements
of anything; they exist to exercise every figure and table. Its results are computed from
its runs by trainperf itself (``case_result.combine``), as a sweep would.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

from trainperf.case.result import RESULT_SCHEMA, combine
from trainperf.measure.runs import parse_runs
from trainperf.store.database import Store

SEED = Path(__file__).parent / "data" / "cpu_measurements.json"
PROFILES_BY_DEVICES = Path(__file__).parent / "data" / "profiles_by_devices.json"
RESULT_PARTS = ("status", "device", "metrics", "error")
SPEEDUP = 4.0  # system B's step times are system A's divided by this
HOSTILE_MODEL = "<script>alert(1)</script>"


def seed() -> dict[str, Any]:
    return json.loads(SEED.read_text())


def _system_b(system_a: dict[str, Any]) -> dict[str, Any]:
    record = copy.deepcopy(system_a)
    record["hostname"] = "big-cpu<b>"
    record["fingerprint"] = "fixture0000b"
    return record


def worker_ok_run(case: Any, samples_per_s: float, steps: int = 5) -> dict[str, Any]:
    """The ok run document a fake ``run_in_child`` returns in the sweep tests (one shape,
    so that every fake worker writes what a real one would): ``steps`` equal step times."""
    step_s = [case.batch_size / samples_per_s] * steps
    metrics = {
        "samples_per_s_median": samples_per_s,
        "step_s": step_s,
        "global_batch": case.batch_size,
        "measure_elapsed_s": sum(step_s),
        "steps_warmup": 1,
        "cv": 0.0,
    }
    run = {"status": "ok", "case": case.model_dump(), "device": {"type": "cpu"}}
    return run | {"metrics": metrics, "error": None, "result_schema": 1}


def hand_result(
    case: dict[str, Any], metrics: dict[str, Any], status: str, message: str, host: str
) -> dict[str, Any]:
    """A result as the figure tests write it by hand, without runs: ``metrics`` when
    ``status`` is ok, else an error of type ``status`` saying ``message``; from ``host``."""
    return {
        "status": status,
        "result_schema": RESULT_SCHEMA,
        "case": case,
        "metrics": metrics if status == "ok" else {},
        "error": None if status == "ok" else {"type": status, "message": message},
        "system": {"fingerprint": "fp-" + host, "hostname": host},
        "runs": [],
    }


def numbered(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``results`` with the ids a store gives them, from 1."""
    return [r | {"id": i} for i, r in enumerate(results, start=1)]


def stored_and_rendered(db: Path, results: list[dict[str, Any]], section: str) -> tuple[Any, str]:
    """Store ``results`` (all of system gpu-a, as ``hand_result`` makes them) in a new sweep
    of ``db`` and render the report: its summary and the HTML of ``section``. The figure
    tests' check of their report section."""
    from trainperf.report.html import render  # matplotlib: not for every test (conftest)

    with Store(db) as store:
        sweep = store.start_sweep({"fingerprint": "fp-gpu-a", "hostname": "gpu-a"})
        for r in results:
            store.add_result(sweep, "fp-gpu-a", r)
    page, summary = render(db, generated_at="now")
    return summary, page.split(f'<section id="{section}">')[1].split("</section>")[0]


def recombined(result: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """``result`` computed again from (changed) ``runs``, as a sweep computes it."""
    policy = parse_runs(result["case"].get("runs", 1))
    stop = result["metrics"].get("runs_stop_reason", "fixed_runs")
    return (
        combine(result["case"], runs, stop, policy)
        | {k: result[k] for k in ("suite", "suite_version", "case_key") if k in result}
        | {"runs": runs}
    )


def _scaled_run(run: dict[str, Any], factor: float) -> dict[str, Any]:
    """The run as if every step were ``factor`` times faster."""
    r = copy.deepcopy(run)
    m = r["metrics"]
    for key in ("step_s", "warmup_step_s", "compute_step_s"):
        if key in m and m[key]:
            m[key] = [t / factor for t in m[key]]
    for key in ("step_s_median", "step_s_mean", "compute_step_s_median", "comm_exposed_s"):
        if m.get(key) is not None:
            m[key] /= factor
    if "measure_elapsed_s" in m:
        m["measure_elapsed_s"] /= factor
    if "rank_step_s" in m:
        m["rank_step_s"] = [[t / factor for t in times] for times in m["rank_step_s"]]
    for key in ("samples_per_s_median", "samples_per_s_mean", "tokens_per_s_median"):
        if m.get(key) is not None:
            m[key] *= factor
    return r


def _scaled(result: dict[str, Any], factor: float) -> dict[str, Any]:
    return recombined(result, [_scaled_run(run, factor) for run in result["runs"]])


def _with_energy(result: dict[str, Any], power_w: float) -> dict[str, Any]:
    """Every run drew ``power_w`` give or take 2% (a made-up meter)."""
    runs = copy.deepcopy(result["runs"])
    for number, run in enumerate(runs):
        m = run["metrics"]
        power = power_w * (1 + 0.02 * (number - 1))
        m["energy_j_total"] = power * m["measure_elapsed_s"]
        m["average_power_w"] = power
        m["energy_per_sample_j"] = power / m["samples_per_s_median"]
        m["samples_per_s_per_w"] = m["samples_per_s_median"] / power
        m["energy_complete"] = True
        m["energy_sources"] = ["nvml:gpu0"]
        m["energy_absent"] = []
        m["energy_absent_reason"] = None
    return recombined(result, runs)


def _failed(template: dict[str, Any], status: str, message: str, **case: Any) -> dict[str, Any]:
    r = {k: copy.deepcopy(v) for k, v in template.items() if k != "runs"}
    r["case"].update(case)
    r["status"] = status
    r["result_schema"] = RESULT_SCHEMA
    r["metrics"] = {}
    r["error"] = {"type": status, "message": message}
    return r


def _ddp(template: dict[str, Any], devices: int, factor: float) -> dict[str, Any]:
    """A weak-scaling result on ``devices`` devices, ``factor`` x the one-device throughput."""
    runs = []
    for run in template["runs"]:
        r = _scaled_run(run, factor / devices)  # each step takes longer, the batch is larger
        r["case"]["devices"] = devices
        r["case"]["parallel"] = "ddp"
        m = r["metrics"]
        for key in ("samples_per_s_median", "samples_per_s_mean"):
            m[key] *= devices
        m["global_batch"] = template["case"]["batch_size"] * devices
        m["device_batch"] = template["case"]["batch_size"]
        m["comm_exposed_share"] = 0.05 * (devices - 1)
        m["rank_spread"] = 0.01
        runs.append(r)
    result = copy.deepcopy(template)
    result["case"]["devices"] = devices
    result["case"]["parallel"] = "ddp"
    return recombined(result, runs)


def _train_config() -> Any:
    """The training configuration of every made-up time-to-accuracy run."""
    from trainperf.case.training import TrainConfig

    return TrainConfig(
        model="cifarnet",
        data="cifar10:/data/cifar",
        target_metric="top1",
        target_value=0.8,
        max_epochs=3,
        batch_size=128,
    )


def _training_runs(store: Store, system_a: dict[str, Any], system_b: dict[str, Any]) -> None:
    """One made-up time-to-accuracy run per system: the same curve, B four times faster."""
    from trainperf.convergence import records

    config = _train_config().to_dict()  # every field, as `trainperf train` stores it
    curve = [(1, 0.55), (2, 0.71), (3, 0.83)]
    for system, epoch_s in ((system_a, 8.0), (system_b, 2.0)):
        evaluations = [
            {"epoch": e, "samples_seen": 50000 * e, "time_s": epoch_s * e, "top1": top1}
            for e, top1 in curve
        ]
        run = records.start_run(store, system, config)
        store.update_train_run(
            run, evaluations, status="ok", reached=True, time_to_target_s=epoch_s * 3
        )


def _studies(store: Store, system_a: dict[str, Any], system_b: dict[str, Any], data: dict) -> None:
    """What the studies' figures need beyond the rest (made up, like system B): a bf16 twin
    of B's cifarnet b32 case 1.8 times as fast, B's layer profile (A's 4 times faster), and
    two more seeds of each system's training run. Profiles over device counts: system A's
    are real (``tests/data/profiles_by_devices.json``: cifarnet in one process and on 2 gloo
    ranks of this VM); system B's are the real H200 profiles of that file, the one-rank DDP
    profile standing for 2 devices (made up: one GPU was lent, not two)."""
    from trainperf.convergence import records

    results_b = [r for r in store.results() if r["system"]["fingerprint"] == "fixture0000b"]
    cifar32_b = next(
        r
        for r in results_b
        if r["status"] == "ok"
        and r["case"]["model"] == "cifarnet"
        and r["case"]["devices"] == 1
        and r["case"]["batch_size"] == 32
    )
    bf16 = _with_energy(_scaled(cifar32_b, 1.8), 320.0)  # energy read afresh, consistent
    bf16["case"]["precision"] = "bf16"
    sweep = store.start_sweep(system_b, label="fixture studies")
    store.add_result(sweep, system_b["fingerprint"], bf16)
    profile = next(run for run in data["micro"] if run["kind"] == "profile")
    store.add_micro(system_b, dict(profile["params"]), _scaled_micro(profile, SPEEDUP))
    by_devices = json.loads(PROFILES_BY_DEVICES.read_text())
    for run in by_devices["cpu"]:
        store.add_micro(system_a, run["params"], {k: run[k] for k in RESULT_PARTS})
    for devices, run in zip((1, 2), by_devices["h200"], strict=True):
        params = copy.deepcopy(run["params"])
        params["case"]["devices"] = devices
        store.add_micro(system_b, params, {k: run[k] for k in RESULT_PARTS})
    config = _train_config()
    for system, epoch_s in ((system_a, 8.0), (system_b, 2.0)):
        for seed in (1, 2):
            seconds = epoch_s * (1 + 0.05 * seed)
            evaluations = [
                {"epoch": e, "samples_seen": 50000 * e, "time_s": seconds * e, "top1": top1}
                for e, top1 in [(1, 0.56), (2, 0.72), (3, 0.82)]
            ]
            run = records.start_run(store, system, dataclasses.replace(config, seed=seed).to_dict())
            store.update_train_run(
                run, evaluations, status="ok", reached=True, time_to_target_s=seconds * 3
            )


def build(path: Path, hostile_model: bool = True, studies: bool = False) -> dict[str, Any]:
    """Write the two-system database at ``path``; return what the tests need to know.
    ``hostile_model``: with the result of the model named ``HOSTILE_MODEL``, which only a
    store filled by hand (or by a trainperf before format 4's import checks) can hold.
    ``studies``: with what the studies' figures need besides (``_studies``)."""
    data = seed()
    system_a = data["system"]
    system_b = _system_b(system_a)
    results_a = [r for r in data["results"] if r["status"] == "ok"]
    one_device = [r for r in results_a if r["case"].get("devices", 1) == 1]
    cifar32 = next(
        r for r in one_device if r["case"]["model"] == "cifarnet" and r["case"]["batch_size"] == 32
    )

    results_b = [
        _with_energy(_scaled(r, SPEEDUP), 300.0 + 10 * i) for i, r in enumerate(one_device)
    ]
    cifar32_b = next(
        r for r in results_b if r["case"]["model"] == "cifarnet" and r["case"]["batch_size"] == 32
    )
    results_b += [_with_energy(_ddp(cifar32_b, n, 0.9 * n), 300.0 * n) for n in (2, 4)]
    results_b += [
        _failed(
            cifar32_b,
            "oom",
            "DefaultCPUAllocator: not enough memory: you tried to allocate 2147483648 bytes",
            batch_size=4096,
        ),
        _failed(
            cifar32_b, "timeout", "killed after 600 s; rank 1 stuck at nets.py:18", batch_size=2048
        ),
        _failed(cifar32_b, "crashed", "rank 1 killed by signal SIGABRT", devices=8),
    ]
    if hostile_model:
        hostile = copy.deepcopy(cifar32)
        hostile["case"]["model"] = HOSTILE_MODEL
        results_a.append(hostile)
    results_a.append(_failed(cifar32, "error", "<img src=x onerror=alert(2)> raised", batch_size=3))

    with Store(path) as store:
        for system, results in ((system_a, results_a), (system_b, results_b)):
            sweep_id = store.start_sweep(system, label="fixture")
            for r in results:
                store.add_result(
                    sweep_id,
                    system["fingerprint"],
                    r,
                    suite=(r.get("suite"), r.get("suite_version")) if r.get("suite") else None,
                    case_key=r.get("case_key"),
                )
        for run in data["micro"]:
            params = dict(run["params"])
            result = {k: run[k] for k in ("status", "device", "metrics", "error")}
            store.add_micro(system_a, params, result)
            if run["kind"] in ("gemm", "collective"):
                faster = copy.deepcopy(result)
                for row in faster["metrics"].get("rows", []):
                    for key in list(row):
                        if key.startswith(("tflops", "algbw", "busbw")) and row[key]:
                            row[key] *= SPEEDUP * 10
                store.add_micro(system_b, params, faster)
        _training_runs(store, system_a, system_b)
        if studies:
            _studies(store, system_a, system_b, data)
    return {
        "systems": {"a": system_a["fingerprint"], "b": system_b["fingerprint"]},
        "hostnames": {"a": system_a["hostname"], "b": system_b["hostname"]},
        "speedup": SPEEDUP,
    }


def _scaled_micro(run: dict[str, Any], factor: float) -> dict[str, Any]:
    """A micro-benchmark run as if the machine were ``factor`` times faster."""
    result = {k: copy.deepcopy(run[k]) for k in ("status", "device", "metrics", "error")}
    m = result["metrics"]
    for row in m.get("rows", []):
        for key in list(row):
            if key.startswith(("tflops", "algbw", "busbw")) and row[key]:
                row[key] *= factor
    for key in ("fwd_ms", "bwd_ms", "optimizer_ms", "unattributed_ms", "step_ms_uninstrumented"):
        if m.get(key):
            m[key] /= factor
    for layer in m.get("layers", []):
        layer["fwd_ms"] /= factor
        layer["bwd_ms"] /= factor
    return result


def build_fleet(path: Path, systems: int = 30) -> dict[str, Any]:
    """A store of ``systems`` systems (a lab's fleet, made up from system A's measurements):
    system i is ``0.5 + 2 i / systems`` times as fast as A in every result, micro-benchmark
    and profile, with energy readings; the first and the last have an ``oom`` case; the
    last one's hostname holds markup. Returns the hostnames by speed, fastest first."""
    data = seed()
    ok = [r for r in data["results"] if r["status"] == "ok"]
    hostnames = []
    with Store(path) as store:
        for i in range(systems):
            factor = 0.5 + 2 * i / systems
            record = copy.deepcopy(data["system"])
            record["fingerprint"] = f"fleet{i:07d}"
            record["hostname"] = f"node{i:02d}" + ("<b>" if i == systems - 1 else "")
            hostnames.append(record["hostname"])
            sweep = store.start_sweep(record, label="fleet")
            results = [_with_energy(_scaled(r, factor), 200.0 + i) for r in ok]
            if i in (0, systems - 1):
                results.append(_failed(results[-1], "oom", "out of memory", batch_size=4096))
            for r in results:
                store.add_result(sweep, record["fingerprint"], r)
            for run in data["micro"]:
                store.add_micro(record, dict(run["params"]), _scaled_micro(run, factor))
    return {"hostnames": hostnames[::-1]}
