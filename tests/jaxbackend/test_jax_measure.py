"""JAX cases measured for real on the CPU: one device in this process, two devices through
the CLI's worker (XLA's forced host devices), compilation outside the measured window, the
step never waited for by itself, float32 math as the precision says."""

import json

import jax
import jax.numpy as jnp
import pytest

from trainperf import models
from trainperf.case.spec import make_case
from trainperf.jax.benchmark import run_jax_case
from trainperf.jax.step import DevicesMissing, build_jax_step, program_fp32_math
from trainperf.step.benchmark import run_case

FAST = {"model": "cifarnet", "batch_size": 8, "image_size": 32, "steps": "fixed:2:4"}


@pytest.fixture(scope="module")
def tf32_by_default():
    """JAX told to run float32 matmuls in TF32 unless a program says otherwise (as
    JAX_DEFAULT_MATMUL_PRECISION=tensorfloat32 does; XLA's own default on Ampere GPUs)."""
    saved = jax.config.jax_default_matmul_precision
    jax.config.update("jax_default_matmul_precision", "tensorfloat32")
    yield
    jax.config.update("jax_default_matmul_precision", saved)


@pytest.fixture(scope="module")
def measured(tf32_by_default):
    return run_jax_case(make_case(**FAST, framework="jax"))


def test_compilation_is_timed_apart_and_never_in_the_measured_window(measured):
    metrics = measured["metrics"]
    assert metrics["compile_s"] > 0
    assert metrics["compilations_before_measuring"] >= 1  # the listener hears compilations
    assert metrics["compilations_while_measuring"] == 0
    # The warm-up's first step is no compilation: it costs what a measured step costs.
    assert metrics["warmup_step_s"][0] < metrics["compile_s"]


def _shape(metrics: dict) -> set[str]:
    """The keys of a result's metrics, less the reasons of a figure both frameworks report:
    whether one is absent (a step-time interval reaching 0 s over a few spread steps) depends
    on the steps measured, not on the framework."""
    return {
        key
        for key in metrics
        if not (key.endswith("_absent_reason") and key.removesuffix("_absent_reason") in metrics)
    }


def test_a_jax_result_has_the_shape_of_a_pytorch_result(measured):
    pytorch = run_case(make_case(**FAST))
    missing = _shape(pytorch["metrics"]) - _shape(measured["metrics"])
    # PyTorch says how it counted the activations; JAX why it cannot (inside XLA's step).
    assert missing == {"mem_activations_source"}
    metrics = measured["metrics"]
    assert metrics["mem_activations_bytes"] is None and metrics["mem_activations_absent"]
    assert len(metrics["step_s"]) == 4 and metrics["samples_per_s_median"] > 0
    assert metrics["train_flops_per_sample"] == pytorch["metrics"]["train_flops_per_sample"]
    assert metrics["xla_flops_per_step"] > metrics["train_flops_per_sample"] * 8 * 0.5
    assert metrics["final_loss"] > 0
    device = measured["device"]
    assert device["framework"] == "jax" and device["jax"] and device["devices"] == 1


def test_an_fp32_case_never_runs_tf32_where_jax_defaults_to_it(measured):
    device = measured["device"]
    assert (device["fp32_matmul"], device["fp32_conv"]) == ("ieee", "ieee")
    # Run in this process, without the worker's environment: XLA's default is recorded.
    assert device["xla_preallocate"] is True and device["xla_allocator"] == "default"


def test_the_program_says_its_float32_math():
    def program(x, w, k):
        conv = jax.lax.conv_general_dilated(k, k, (1, 1), "SAME")
        return (x @ w).sum() + conv.sum()

    args = (jnp.ones((4, 4)), jnp.ones((4, 4)), jnp.ones((1, 1, 3, 3)))

    def lowered(precision):
        with jax.default_matmul_precision(precision):
            return jax.jit(program).lower(*args).as_text()

    assert program_fp32_math(lowered("float32")) == "ieee"
    assert program_fp32_math(lowered("tensorfloat32")) == "tf32"
    assert program_fp32_math(lowered("default")) is None  # left to XLA: TF32 on Ampere
    assert program_fp32_math(lowered("float32") + lowered("tensorfloat32")) is None


def test_the_step_returns_once_dispatched_and_waits_for_nothing(monkeypatch):
    """JAX runs the step asynchronously; waiting is the timer's (InFlightTimer), with later
    steps queued. The step itself never blocks on its result."""
    case = make_case(**FAST | {"batch_size": 2}, framework="jax")
    training = build_jax_step(models.get("cifarnet"), case)
    waits = []
    monkeypatch.setattr(jax, "block_until_ready", lambda x: waits.append(x) or x)
    losses = [training.step() for _ in range(3)]
    assert waits == []
    assert all(float(loss) > 0 for loss in losses)  # and each step trained


def test_bf16_and_gradient_accumulation_train():
    case = make_case(
        **FAST | {"steps": "fixed:1:2"}, framework="jax", precision="bf16", grad_accum=2
    )
    metrics = run_jax_case(case)["metrics"]
    assert metrics["global_batch"] == 16 and metrics["final_loss"] > 0


def test_two_devices_in_one_process_need_the_forced_host_devices():
    with pytest.raises(DevicesMissing, match="needs 2 cpu devices; JAX sees 1"):
        run_jax_case(make_case(**FAST, framework="jax", devices=2))


def test_the_cli_measures_a_jax_case_on_one_and_two_cpu_devices(tmp_path, run_cli):
    db = tmp_path / "r.db"
    code, out, err = run_cli(
        f"run -m resnet18 -b 4 --image-size 32 --framework jax --devices 1,2 "
        f"--steps fixed:1:3 --runs 1 --db {db} --json"
    )
    assert code == 0, err
    results = json.loads(out)["results"]
    assert [r["status"] for r in results] == ["ok", "ok"]
    by_devices = {r["metrics"]["device_count"]: r for r in results}
    two = by_devices[2]
    assert two["case"]["framework"] == "jax" and two["device"]["devices"] == 2
    assert two["metrics"]["global_batch"] == 8
    assert two["metrics"]["compilations_while_measuring"] == 0
    code, out, _ = run_cli(f"scaling --db {db} --json")
    rows = [r for r in json.loads(out)["rows"] if r["devices"] == 2]
    assert rows and rows[0]["speedup"] is not None  # against the 1-device JAX result
