import pytest
import torch

from trainperf import models
from trainperf.benchmark import derive_metrics
from trainperf.case import make_case
from trainperf.measure.loop import StepRecord
from trainperf.train import build_training_step, set_fp32_math


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


def test_mfu_from_the_peak_table():
    spec = models.get("resnet50")
    case = make_case(model="resnet50", batch_size=100, precision="bf16", device="cuda")
    record = StepRecord(
        warmup_s=[1.0],
        step_s=[0.1] * 20,
        warmup_reason="stable",
        stop_reason="ci_target",
        measure_elapsed_s=2.0,
    )
    m = derive_metrics(spec, case, 224, record, 0.01, "NVIDIA H200")
    assert m["samples_per_s_median"] == pytest.approx(1000)
    assert m["achieved_tflops"] == pytest.approx(m["train_flops_per_sample"] * 1000 / 1e12)
    assert m["mfu"] == pytest.approx(m["train_flops_per_sample"] * 1000 / 989e12)
    assert "H200" in m["mfu_peak_source"]
    assert not m["unstable"] and m["stop_reason"] == "ci_target"
    assert "tokens_per_s_median" not in m


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
