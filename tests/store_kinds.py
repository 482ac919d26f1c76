"""Stores holding every kind of thing trainperf keeps, built by trainperf's own code.

A store is described by a recipe (plain data: what hypothesis generates, or ``FULL``,
which holds one of each kind) and built without starting a process: each run's document
comes from the functions a worker uses (``benchmark.derive_metrics``,
``rank_case.rank_metrics``, ``Outcome``), each result from ``case_result.combine`` or
``Outcome.failed_run`` as a sweep makes it, and everything is written through ``Store``.
So a number that trainperf would compute as NaN or infinity for some step times (an
interval of 1 to 3 steps, of 1 or 2 runs) reaches the store here as it would there.

The kinds (issue "Results that survive the trip", item 2): ok, short (1-3 steps, 1-2
runs), failed, oom, timeout, crashed, skipped and diverged results; ddp, dp and fsdp cases;
JAX cases; every micro-benchmark kind and profiles; largest-batch searches; training runs
with their curves.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import torch
from hypothesis import strategies as st

from trainperf import models
from trainperf.case.outcome import Outcome
from trainperf.case.result import combine
from trainperf.case.spec import make_case
from trainperf.case.training import TrainConfig
from trainperf.measure.divergence import Diverged
from trainperf.measure.runs import parse_runs
from trainperf.measure.timed_steps import StepRecord
from trainperf.models.flops import count_flops
from trainperf.step import benchmark
from trainperf.step.rank_case import rank_metrics, synchronized_steps
from trainperf.store.database import Store

SEED = Path(__file__).parent / "data" / "cpu_measurements.json"
FAILURES = ("oom", "timeout", "crashed", "error", "diverged")
MODES = ("none", "ddp", "dp", "fsdp", "jax")
H100 = "NVIDIA H100 80GB HBM3"

# The flop count of a model is the same for every run: counted once per test session
# (the counter traces the model; the stores here hold hundreds of runs).
_flops = functools.cache(count_flops)


def _cached_flops(spec: models.ModelSpec, size: int) -> Any:
    return _flops(spec, size)


benchmark.count_flops = _cached_flops  # the same numbers, counted once


def _case(mode: str, runs: int, steps: int, batch: int) -> Any:
    fields: dict[str, Any] = {"runs": runs, "steps": f"fixed:1:{steps * runs}"}
    if mode == "fsdp":
        return make_case(
            model="llama-tiny", batch_size=batch, seq_len=16, devices=2, parallel="fsdp", **fields
        )
    fields |= {"model": "cifarnet", "batch_size": batch, "image_size": 8}
    if mode == "ddp":
        return make_case(devices=2, parallel="ddp", **fields)
    if mode == "dp":
        return make_case(device="cuda", devices=2, parallel="dp", **fields)
    if mode == "jax":
        return make_case(framework="jax", **fields)
    return make_case(**fields)


def _device(mode: str) -> dict[str, Any]:
    if mode == "dp":
        return {"type": "cuda", "name": H100, "capability": [9, 0], "devices": 2}
    info = benchmark.device_info(torch.device("cpu"))
    return info | ({"framework": "jax"} if mode == "jax" else {})


def _run(case: Any, mode: str, steps: list[float], number: int) -> dict[str, Any]:
    """One ok run's document, as a worker of ``mode`` writes it."""
    one_run = case.model_copy(update={"steps": f"fixed:1:{len(steps)}"})
    spec = models.get(case.model)
    size = 16 if spec.is_language_model else 8
    record = StepRecord([steps[0] * 3], steps, "fixed", "fixed", sum(steps) * 1.01)
    info = _device(mode)
    if mode in ("ddp", "fsdp"):
        everyone = [
            {
                "rank": rank,
                "host": "node0",
                "step_s": [t * (1 + 0.05 * rank) for t in steps],
                "compute_step_s": [t * 0.8 for t in steps],
                "mem_peak_bytes": 1 << 20,
                "memory": {"mem_params_bytes": 4096 >> rank, "mem_grads_bytes": 4096},
            }
            | ({"gather_free_step_s": [t * 0.9 for t in steps]} if mode == "fsdp" else {})
            for rank in range(case.devices)
        ]
        record = StepRecord(
            record.warmup_s,
            synchronized_steps([r["step_s"] for r in everyone]),
            "fixed",
            "fixed",
            record.measure_elapsed_s,
        )
    metrics = benchmark.derive_metrics(
        spec, one_run, size, record, None, info["name"], case.replicas
    )
    if mode in ("ddp", "fsdp"):
        metrics |= rank_metrics(everyone, one_run) | {"world_size": case.devices}
    if mode == "jax":
        metrics |= {"compile_s": 1.5, "compilations_before_measuring": 1}
        metrics |= {"compilations_while_measuring": 0, "xla_flops_per_step": 1.0e9}
    metrics |= {"final_loss": 2.3, "mem_peak_bytes": 1 << 24, "wall_s": sum(steps) + 2.0}
    body = {"device": info, "metrics": metrics}
    return Outcome.ok(one_run.model_dump(), body).document() | {"run_number": number}


def _failure(case: Any, status: str, number: int) -> dict[str, Any]:
    fields = case.model_dump()
    if status == "oom":
        outcome = Outcome.from_exception(
            fields, MemoryError("DefaultCPUAllocator: not enough memory")
        )
    elif status == "error":
        outcome = Outcome.from_exception(fields, ValueError("a user's network raised"))
    elif status == "diverged":
        outcome = Outcome.from_exception(fields, Diverged("measured", 2, "nan", 1))
    elif status == "timeout":
        outcome = Outcome.timeout(fields, "killed after 20 s; rank 1 stuck", "stack...\n")
    else:
        outcome = Outcome.crashed(fields, "killed by signal SIGABRT", "\x1b[31mabort\x1b[0m\n")
    return outcome.document() | {"run_number": number}


def add_case(store: Store, sweep: str, system: str, entry: dict[str, Any]) -> None:
    """A measured case: its runs, each stored as it ends, then its result."""
    steps = entry["steps"]
    longest = max((len(s) for s in steps), default=1)
    case = _case(entry["mode"], max(len(steps), 1), longest, entry["batch"])
    runs = []
    for number, times in enumerate(steps, start=1):
        runs.append(_run(case, entry["mode"], times, number))
        runs[-1]["uid"] = store.add_run(sweep, system, runs[-1])
    if entry["failure"] is not None:
        failed = _failure(case, entry["failure"], len(runs) + 1)
        failed["uid"] = store.add_run(sweep, system, failed)
        result = Outcome.failed_run(case.model_dump(), runs, failed).document()
        result["runs"] = [*runs, failed]
    else:
        result = combine(case.model_dump(), runs, "fixed_runs", parse_runs(len(runs)))
        result["runs"] = runs
    store.add_result(sweep, system, result)


def add_unrun(store: Store, sweep: str, system: str, kind: str) -> None:
    """A case that never ran: skipped, or a largest-batch request whose search failed."""
    case = make_case(model="resnet18", batch_size=8, device="cuda", precision="bf16").model_dump()
    if kind == "skipped":
        result = Outcome.skipped(case, "device 'cuda' is not available on this machine")
    else:
        result = Outcome.unmeasured(
            case | {"batch_size": "max"}, "oom", "no batch fits", "OutOfMemory"
        )
    store.add_result(sweep, system, result.document())


def seed_micro() -> list[dict[str, Any]]:
    """The micro-benchmark runs and profile of the 2-core development VM (real readings)."""
    return json.loads(SEED.read_text())["micro"]


@functools.cache
def conv_run() -> tuple[dict[str, Any], dict[str, Any]]:
    """A real `micro conv` run (one small layer of cifarnet, on this CPU): params, result."""
    from trainperf.micro import conv

    params = {"kind": "conv", "device": "cpu", "dtype": "fp32", "cudnn_benchmark": True}
    params |= {"model": "cifarnet", "batch_size": 2, "limit": 1, "flush": False}
    params |= {"warmup": 1, "iters": 2}
    body = conv.run_document(params, Path("."))
    return params, {"status": "ok", "error": None} | body


def add_micro(store: Store, record: dict[str, Any], entry: dict[str, Any]) -> None:
    if entry["kind"] == "conv":
        params, result = conv_run()
        store.add_micro(record, params, copy.deepcopy(result))
        return
    if entry["kind"] == "p2p":  # what a machine without two GPUs stores
        metrics = {
            "status": "skipped",
            "reason": "p2p needs two or more CUDA GPUs; this machine has 0",
        }
        result = {"status": "skipped", "device": None, "metrics": metrics}
        result["error"] = {"type": "skipped", "message": metrics["reason"]}
        store.add_micro(record, {"kind": "p2p", "device": "cuda", "size_bytes": 1 << 28}, result)
        return
    run = copy.deepcopy(seed_micro()[entry["index"]])
    for row in run["metrics"].get("rows", []):  # the same kind of run, other readings
        for key, value in row.items():
            if isinstance(value, float) and key != "bytes":
                row[key] = value * entry["scale"]
    store.add_micro(
        record, run["params"], {k: run[k] for k in ("status", "device", "metrics", "error")}
    )


def add_max_batch(store: Store, system: str, entry: dict[str, Any]) -> None:
    template = make_case(model="cifarnet", batch_size=1, image_size=8)
    probes = [
        {"batch_size": 2**i, "fits": i < 3, "status": "ok" if i < 3 else "oom", "message": ""}
        for i in range(4)
    ]
    found = entry["batch"]
    note = "" if found else "not even batch 1 fits"
    store.add_max_batch(system, f"key-{entry['batch']}", template.model_dump(), found, probes, note)


def add_train_run(store: Store, record: dict[str, Any], entry: dict[str, Any]) -> None:
    config = TrainConfig(
        "cifarnet", "cifar10:/data/cifar", "top1", 0.8, len(entry["curve"]), 128, seed=entry["seed"]
    ).to_dict()
    run = store.add_train_run(record, config, "config-key")
    evaluations = [
        {
            "epoch": e,
            "samples_seen": 50000 * e,
            "time_s": entry["epoch_s"] * e,
            "top1": top1,
            "eval_loss": 2.0 - top1,
            "train_loss": 2.1 - top1,
            "lr": 0.1,
        }
        for e, top1 in enumerate(entry["curve"], start=1)
    ]
    reached = entry["status"] == "ok" and entry["curve"][-1] >= 0.8
    store.update_train_run(
        run,
        evaluations,
        status=entry["status"],
        reached=reached,
        time_to_target_s=entry["epoch_s"] * len(evaluations) if reached else None,
        metrics={"epochs_run": len(evaluations), "train_samples_per_s": 50000 / entry["epoch_s"]},
        error=None if entry["status"] == "ok" else {"type": entry["status"], "message": "stopped"},
    )


def system_record(index: int) -> dict[str, Any]:
    record = copy.deepcopy(json.loads(SEED.read_text())["system"])
    record["hostname"] = ["vm", "big-cpu<b>", "node-3 (rack 2)"][index % 3]
    record["fingerprint"] = f"kinds{index:011x}"
    return record


def doctor_verdict(index: int) -> dict[str, Any] | None:
    """A verdict with a check of every status and every kind of value (none for every
    third system: a sweep of a trainperf before the doctor)."""
    from trainperf.doctor import verdict_document
    from trainperf.doctor.checks import Check, absent

    if index % 3 == 2:
        return None
    why = "a governor that lowers the clock under light load slows short steps"
    checks = [
        Check(
            "host.governor",
            "warn",
            "powersave on 2 of 2 CPUs",
            why,
            fix="sudo cpupower frequency-set -g performance",
            value="powersave",
            condition=True,
        ),
        Check("host.swap", "ok", "0 B of swap in use", "swapping stalls steps", value=0),
        Check(
            "chain.step_timer",
            "fail" if index else "ok",
            "timer 50.1 ms, host 50.0 ms",
            "the step time is the measurement",
            value={"error_relative": 0.002, "samples": [0.05, 0.0501]},
        ),
        absent(
            "gpu.persistence",
            "no NVML: NVML Shared Library Not Found <b>",
            "a GPU that sleeps between runs re-initialises",
            condition=True,
        ),
    ]
    return verdict_document(checks, seconds=None if index else 1.25)


def build(path: Path, recipe: dict[str, Any]) -> Path:
    """Write the store ``recipe`` describes at ``path``."""
    with Store(path) as store:
        for index, part in enumerate(recipe["systems"]):
            record = system_record(index)
            sweep = store.start_sweep(
                record, label="kinds", order_seed=index, doctor=doctor_verdict(index)
            )
            for entry in part["cases"]:
                add_case(store, sweep, record["fingerprint"], entry)
            for kind in part["unrun"]:
                add_unrun(store, sweep, record["fingerprint"], kind)
            for entry in part["micro"]:
                add_micro(store, record, entry)
            for entry in part["max_batch"]:
                add_max_batch(store, record["fingerprint"], entry)
            for entry in part["train_runs"]:
                add_train_run(store, record, entry)
    return path


# --- recipes -----------------------------------------------------------------------------

step_times = st.floats(min_value=1e-6, max_value=100.0, allow_nan=False, allow_infinity=False)
case_entries = st.fixed_dictionaries(
    {
        "mode": st.sampled_from(MODES),
        "batch": st.sampled_from([1, 2, 4]),
        # 1 or 2 runs of 1 to 3 steps (the short runs that once gave infinite intervals),
        # or 3 runs of up to 6 steps
        "steps": st.one_of(
            st.lists(st.lists(step_times, min_size=1, max_size=3), min_size=1, max_size=2),
            st.lists(st.lists(step_times, min_size=1, max_size=6), min_size=3, max_size=3),
        ),
        "failure": st.one_of(st.none(), st.sampled_from(FAILURES)),
    }
)
micro_entries = st.one_of(
    st.fixed_dictionaries(
        {"kind": st.just("seed"), "index": st.integers(0, 3), "scale": st.floats(0.01, 100.0)}
    ),
    st.sampled_from([{"kind": "p2p"}, {"kind": "conv"}]),
)
train_entries = st.fixed_dictionaries(
    {
        "curve": st.lists(st.floats(0.0, 1.0), min_size=1, max_size=4),
        "epoch_s": st.floats(0.01, 1000.0),
        "status": st.sampled_from(["ok", "aborted", "diverged", "timeout"]),
        "seed": st.integers(0, 2**31),
    }
)
systems = st.fixed_dictionaries(
    {
        "cases": st.lists(case_entries, max_size=4),
        "unrun": st.lists(st.sampled_from(["skipped", "max"]), max_size=2),
        "micro": st.lists(micro_entries, max_size=2),
        "max_batch": st.lists(
            st.fixed_dictionaries({"batch": st.sampled_from([None, 4, 64])}), max_size=2
        ),
        "train_runs": st.lists(train_entries, max_size=2),
    }
)
recipes = st.fixed_dictionaries({"systems": st.lists(systems, min_size=1, max_size=2)})


def _full_cases() -> list[dict[str, Any]]:
    short = [[0.01], [0.02]]  # two runs of one step each
    full = [[0.01, 0.011, 0.0105], [0.0102, 0.0101, 0.0108], [0.0099, 0.0104, 0.0103]]
    cases = [{"mode": mode, "batch": 2, "steps": full, "failure": None} for mode in MODES]
    cases += [{"mode": "none", "batch": 2, "steps": short, "failure": None}]
    cases += [{"mode": "none", "batch": 1, "steps": [[0.01, 0.3]], "failure": None}]
    cases += [{"mode": "ddp", "batch": 4, "steps": short, "failure": None}]
    cases += [{"mode": "none", "batch": 4, "steps": short[:1], "failure": f} for f in FAILURES]
    cases += [{"mode": "ddp", "batch": 2, "steps": [], "failure": "diverged"}]
    return cases


# One of every kind, on two systems (the second one faster): what `make test` runs every
# verb with --json on.
FULL = {
    "systems": [
        {
            "cases": _full_cases(),
            "unrun": ["skipped", "max"],
            "micro": [{"kind": "seed", "index": i, "scale": 1.0} for i in range(4)]
            + [{"kind": "p2p"}, {"kind": "conv"}],
            "max_batch": [{"batch": 64}, {"batch": None}],
            "train_runs": [
                {"curve": [0.5, 0.7, 0.85], "epoch_s": 8.0, "status": "ok", "seed": 1},
                {"curve": [0.4, 0.1], "epoch_s": 8.0, "status": "diverged", "seed": 2},
            ],
        },
        {
            "cases": [
                {
                    "mode": "none",
                    "batch": 2,
                    "steps": [[t / 4 for t in run] for run in _full_cases()[0]["steps"]],
                    "failure": None,
                }
            ],
            "unrun": [],
            "micro": [{"kind": "seed", "index": 0, "scale": 4.0}],
            "max_batch": [],
            "train_runs": [{"curve": [0.5, 0.7, 0.85], "epoch_s": 2.0, "status": "ok", "seed": 1}],
        },
    ]
}
