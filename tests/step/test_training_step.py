import contextlib

import pytest
import torch

from trainperf import models
from trainperf.case.spec import make_case
from trainperf.measure.timed_steps import StepRecord
from trainperf.predict.catalog_file import load_catalog
from trainperf.step.benchmark import derive_metrics, run_case
from trainperf.step.training_step import (
    StepOptions,
    build_model,
    build_training_step,
    fp32_math_mode,
    make_step,
    set_fp32_math,
)


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("channels_last", [False, True])
def test_one_step_per_precision_trains(precision, channels_last):
    case = make_case(
        model="cifarnet",
        batch_size=4,
        image_size=16,
        precision=precision,
        channels_last=channels_last,
    )
    t = build_training_step(models.get("cifarnet"), case, torch.device("cpu"))
    before = [p.detach().clone() for p in t.model.parameters()]
    loss = t.step()
    assert torch.isfinite(loss)
    changed = [not torch.equal(a, b) for a, b in zip(before, t.model.parameters(), strict=True)]
    # fp16's scaler may skip the very first step if it sees an overflow; others must move
    assert all(changed) or precision == "fp16"
    if channels_last:
        assert t.inputs.is_contiguous(memory_format=torch.channels_last)


def test_language_model_uses_adamw():
    case = make_case(model="gpt2-small", batch_size=1, seq_len=4)
    t = build_training_step(models.get("gpt2-small"), case, torch.device("cpu"))
    assert isinstance(t.optimizer, torch.optim.AdamW)
    assert t.samples_per_step == 1 and t.size == 4


def test_fp32_math_switches_tf32_off_and_on():
    cuda = torch.device("cuda")  # only sets backend flags: no device needed
    matmul, conv = torch.backends.cuda.matmul, torch.backends.cudnn.conv
    saved = matmul.fp32_precision, conv.fp32_precision
    try:
        set_fp32_math(cuda, "fp32")
        assert (matmul.fp32_precision, conv.fp32_precision) == ("ieee", "ieee")
        set_fp32_math(cuda, "tf32")
        assert (matmul.fp32_precision, conv.fp32_precision) == ("tf32", "tf32")
    finally:
        matmul.fp32_precision, conv.fp32_precision = saved


@pytest.fixture
def tf32_by_default(monkeypatch):
    """torch as on a GPU machine that runs float32 in TF32 unless told otherwise: cuDNN's
    default, and cuBLAS's in NVIDIA's containers (flags restored afterwards)."""
    monkeypatch.delenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", raising=False)
    monkeypatch.delenv("NVIDIA_TF32_OVERRIDE", raising=False)
    backends = torch.backends
    levels = [backends, backends.cuda.matmul, backends.cudnn, backends.cudnn.conv]
    saved = [level.fp32_precision for level in levels]
    for level in levels:
        level.fp32_precision = "tf32"
    yield
    for level, value in zip(levels, saved, strict=True):
        level.fp32_precision = value


def test_an_fp32_case_never_runs_tf32_on_a_gpu_that_defaults_to_it(tf32_by_default):
    cuda = torch.device("cuda")  # only backend flags are set and read: no device needed
    assert fp32_math_mode(cuda) == {"fp32_matmul": "tf32", "fp32_conv": "tf32"}
    for precision in ("fp32", "bf16", "fp16"):  # what stays float32 in autocast too
        set_fp32_math(cuda, precision)
        assert fp32_math_mode(cuda) == {"fp32_matmul": "ieee", "fp32_conv": "ieee"}
    set_fp32_math(cuda, "tf32")
    assert fp32_math_mode(cuda) == {"fp32_matmul": "tf32", "fp32_conv": "tf32"}


def test_the_recorded_math_says_what_the_environment_forces(tf32_by_default, monkeypatch):
    cuda = torch.device("cuda")
    set_fp32_math(cuda, "fp32")
    monkeypatch.setenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "1")  # cuBLAS runs TF32 anyway
    assert fp32_math_mode(cuda) == {"fp32_matmul": "tf32", "fp32_conv": "ieee"}
    monkeypatch.delenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE")
    set_fp32_math(cuda, "tf32")
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")  # TF32 off in cuBLAS/cuDNN, not in Triton
    recorded = fp32_math_mode(cuda)
    assert recorded["fp32_matmul"] is None and recorded["fp32_conv"] is None
    assert "NVIDIA_TF32_OVERRIDE=0" in recorded["fp32_matmul_absent_reason"]


def test_a_pytorch_result_records_its_float32_math():
    """On the CPU, oneDNN's: IEEE unless it is told bfloat16."""
    case = make_case(model="cifarnet", batch_size=2, image_size=16, steps="fixed:1:2")
    device = run_case(case)["device"]
    assert (device["fp32_matmul"], device["fp32_conv"]) == ("ieee", "ieee")


def resnet50_metrics(batch_size, precision, step_s, device_name):
    """``derive_metrics`` of 20 steps of ``step_s`` of resnet50 at 224 on a CUDA device: the
    MFU tests differ only in these."""
    case = make_case(model="resnet50", batch_size=batch_size, precision=precision, device="cuda")
    record = StepRecord(
        warmup_s=[1.0],
        step_s=[step_s] * 20,
        warmup_reason="stable",
        stop_reason="ci_target",
        measure_elapsed_s=step_s * 20,
    )
    return derive_metrics(models.get("resnet50"), case, 224, record, 0.01, device_name)


def test_mfu_from_the_peak_table():
    m = resnet50_metrics(100, "bf16", 0.1, "NVIDIA H200")
    assert m["samples_per_s_median"] == pytest.approx(1000)
    assert m["achieved_tflops"] == pytest.approx(m["train_flops_per_sample"] * 1000 / 1e12)
    assert m["mfu"] == pytest.approx(m["train_flops_per_sample"] * 1000 / 989e12)
    assert "H200" in m["mfu_peak_source"]
    assert not m["unstable"] and m["stop_reason"] == "ci_target"
    assert "tokens_per_s_median" not in m


def test_mfu_divides_by_the_predictors_training_peak():
    """A GeForce RTX 2080 Ti in fp16: the catalog's FP32-accumulate peak (53.8 TFLOP/s),
    the one the predictor computes with, not the data sheet's FP16-accumulate 107."""
    rtx = load_catalog().device("rtx-2080-ti")
    m = resnet50_metrics(64, "fp16", 0.2, "NVIDIA GeForce RTX 2080 Ti")
    assert m["mfu"] == pytest.approx(m["achieved_tflops"] * 1e12 / rtx.peak_flops("fp16"))
    assert m["mfu"] == pytest.approx(m["achieved_tflops"] / 53.8)
    assert "rtx-2080-ti" in m["mfu_peak_source"]


@pytest.mark.slow
def test_compiled_step_runs():
    case = make_case(model="cifarnet", batch_size=4, image_size=16, compile=True)
    t = build_training_step(models.get("cifarnet"), case, torch.device("cpu"))
    assert torch.isfinite(t.step())


def test_data_parallel_scatters_one_batch_over_its_devices():
    # On a machine without CUDA, DataParallel runs its module as is: the batch layout and
    # the step are what is checked here; the GPUs themselves only on a GPU machine.
    case = make_case(model="cifarnet", batch_size=4, image_size=16, devices=2, parallel="dp")
    t = build_training_step(models.get("cifarnet"), case, torch.device("cpu"))
    assert isinstance(t.model, torch.nn.Module) and t.inputs.shape[0] == 8
    assert t.samples_per_step == 8 and t.compute_only is None
    assert torch.isfinite(t.step())


def test_gradient_accumulation_counts_every_micro_batch():
    case = make_case(model="cifarnet", batch_size=4, image_size=16, grad_accum=3)
    t = build_training_step(models.get("cifarnet"), case, torch.device("cpu"))
    assert t.samples_per_step == 12 and t.inputs.shape[0] == 4
    before = [p.detach().clone() for p in t.model.parameters()]
    assert torch.isfinite(t.step())
    assert any(not torch.equal(a, b) for a, b in zip(before, t.model.parameters(), strict=True))


class NoSyncCounter(torch.nn.Module):
    """A stand-in for DistributedDataParallel: counts the micro-batches run under no_sync."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.module, self.unsynced = model, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.module(x)

    @contextlib.contextmanager
    def no_sync(self):
        self.unsynced += 1
        yield


def test_build_model_gives_every_rank_the_same_weights_and_its_own_draws():
    spec = models.get("cifarnet")
    first = build_model(spec, torch.device("cpu"), "fp32", seed=3, rank=0)
    draw_rank0 = torch.rand(4)
    second = build_model(spec, torch.device("cpu"), "fp32", seed=3, rank=1)
    draw_rank1 = torch.rand(4)
    assert second.training
    for a, b in zip(first.parameters(), second.parameters(), strict=True):
        assert torch.equal(a, b)
    torch.manual_seed(3 + 1 + 1)  # the rank's own seed
    assert torch.equal(draw_rank1, torch.rand(4)) and not torch.equal(draw_rank0, draw_rank1)


@pytest.mark.parametrize(
    ("precision", "dtype", "scaled"),
    [
        ("fp32", None, False),
        ("tf32", None, False),
        ("bf16", torch.bfloat16, False),
        ("fp16", torch.float16, True),
    ],
)
def test_the_step_decides_autocast_and_loss_scaling_by_precision(precision, dtype, scaled):
    spec = models.get("cifarnet")
    model = build_model(spec, torch.device("cpu"), precision, seed=0)
    step = make_step(spec, model, torch.device("cpu"), StepOptions(precision))
    assert step.autocast_dtype == dtype and (step.scaler is not None) == scaled


@pytest.mark.parametrize(("sync", "unsynced"), [(True, 2), (False, 3)])
def test_accumulated_micro_batches_all_reduce_once_per_step(sync, unsynced):
    spec = models.get("cifarnet")
    model = build_model(spec, torch.device("cpu"), "fp32", seed=0)
    options = StepOptions(grad_accum=3, channels_last=True)
    step = make_step(spec, model, torch.device("cpu"), options, wrap=NoSyncCounter)
    batch = spec.task.example_batch(2, 16, torch.device("cpu"))
    fetched = []

    def next_batch():
        fetched.append(1)
        return step.layout(batch[0]), batch[1]

    assert torch.isfinite(step(next_batch, sync=sync))
    assert len(fetched) == 3 and step.wrapped.unsynced == unsynced
    assert next(step.model.parameters()).is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize(("sync", "unsynced"), [(True, 0), (False, 1)])
def test_one_micro_batch_without_sync_still_runs_under_no_sync(sync, unsynced):
    spec = models.get("cifarnet")
    model = build_model(spec, torch.device("cpu"), "fp32", seed=0)
    step = make_step(spec, model, torch.device("cpu"), StepOptions(), wrap=NoSyncCounter)
    batch = spec.task.example_batch(2, 16, torch.device("cpu"))
    assert torch.isfinite(step(lambda: batch, sync=sync))
    assert step.wrapped.unsynced == unsynced


def test_the_plain_step_trains_as_the_general_one():
    """The fast path of a plain fp32 step (nothing around the user's loop) moves the
    weights exactly as the general path, which handles accumulation and autocast."""
    spec = models.get("cifarnet")
    batch = spec.task.example_batch(2, 16, torch.device("cpu"))
    trained = []
    for plain in (True, False):
        model = build_model(spec, torch.device("cpu"), "fp32", seed=0)
        step = make_step(spec, model, torch.device("cpu"), StepOptions())
        assert step._plain
        step._plain = plain
        losses = [step(lambda: batch).item() for _ in range(2)]
        trained.append((losses, [p.detach().clone() for p in model.parameters()]))
    (plain_losses, plain_weights), (losses, weights) = trained
    assert plain_losses == losses
    assert all(torch.equal(a, b) for a, b in zip(plain_weights, weights, strict=True))
    fp16 = make_step(
        spec,
        build_model(spec, torch.device("cpu"), "fp16", 0),
        torch.device("cpu"),
        StepOptions("fp16"),
    )
    assert (
        not fp16._plain
        and not make_step(
            spec,
            build_model(spec, torch.device("cpu"), "fp32", 0),
            torch.device("cpu"),
            StepOptions(grad_accum=2),
        )._plain
    )


def test_step_options_of_a_case():
    case = make_case(model="cifarnet", batch_size=4, precision="bf16", compile=True, grad_accum=2)
    assert StepOptions.of(case) == StepOptions("bf16", False, True, 2)
    assert StepOptions.of(case, grad_accum=1).grad_accum == 1
