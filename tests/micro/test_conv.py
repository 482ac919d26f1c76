import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from trainperf.micro import conv
from trainperf.micro.conv import PASSES, ConvShape

CPU = torch.device("cpu")
TINY = ConvShape(W=6, H=5, C=2, N=2, K=3, S=3, R=3, pad_w=1, pad_h=1)
# Every field differs between the axes, and (W + 2 pad_w - S) is not a multiple of
# stride_w, so the input gradient needs output padding to get back to W.
ASYMMETRIC = ConvShape(W=9, H=7, C=3, N=2, K=4, S=2, R=3, pad_w=0, pad_h=1, stride_w=3, stride_h=2)


def test_deepbench_file_parses_to_94_shapes():
    shapes = conv.deepbench_shapes()
    assert len(shapes) == 94
    assert shapes[0] == ConvShape(
        W=700, H=161, C=1, N=4, K=32, S=20, R=5, pad_w=0, pad_h=0, stride_w=2, stride_h=2
    )
    assert shapes[0].label() == "W700 H161 C1 N4 K32 5x20 s2"
    assert all(s.out_h >= 1 and s.out_w >= 1 for s in shapes)


def test_output_size_and_flops_by_hand():
    plain = ConvShape(W=4, H=4, C=1, N=1, K=1, S=3, R=3)
    assert (plain.out_h, plain.out_w) == (2, 2)
    assert plain.flops == 2 * 1 * 1 * 1 * 3 * 3 * 2 * 2 == 72

    # out_h = (7 + 2 - 3) // 2 + 1 = 4; out_w = (9 + 0 - 2) // 3 + 1 = 3
    assert (ASYMMETRIC.out_h, ASYMMETRIC.out_w) == (4, 3)
    assert ASYMMETRIC.flops == 2 * 2 * 4 * 3 * 3 * 2 * 4 * 3 == 3456
    assert ASYMMETRIC.label() == "W9 H7 C3 N2 K4 3x2 s2x3 p1x0"


@pytest.mark.parametrize("shape", [TINY, ASYMMETRIC], ids=["tiny", "asymmetric"])
def test_flops_match_torch_flop_counter(shape):
    x = torch.randn(shape.N, shape.C, shape.H, shape.W)
    w = torch.randn(shape.K, shape.C, shape.R, shape.S)
    with FlopCounterMode(display=False) as counter:
        y = torch.nn.functional.conv2d(
            x, w, stride=(shape.stride_h, shape.stride_w), padding=(shape.pad_h, shape.pad_w)
        )
    assert y.shape == (shape.N, shape.K, shape.out_h, shape.out_w)
    assert counter.get_total_flops() == shape.flops


def test_pass_values_match_autograd():
    shape = ASYMMETRIC
    # The same seed gives the same x, w and dy as the ops draw (in that order).
    torch.manual_seed(0)
    ops = conv._pass_ops(shape, CPU, torch.float64)
    torch.manual_seed(0)
    x = torch.randn(shape.N, shape.C, shape.H, shape.W, dtype=torch.float64, requires_grad=True)
    w = torch.randn(shape.K, shape.C, shape.R, shape.S, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(shape.N, shape.K, shape.out_h, shape.out_w, dtype=torch.float64)
    y = torch.nn.functional.conv2d(x, w, stride=(2, 3), padding=(1, 0))
    y.backward(dy)
    torch.testing.assert_close(ops["fwd"](), y.detach())
    torch.testing.assert_close(ops["bwd_data"](), x.grad)
    torch.testing.assert_close(ops["bwd_filter"](), w.grad)


def test_resnet50_shapes():
    shapes = conv.model_shapes("resnet50", 2)
    assert len(shapes) == len(set(shapes))
    assert all(s.N == 2 for s in shapes)
    stem = ConvShape(
        W=224, H=224, C=3, N=2, K=64, S=7, R=7, pad_w=3, pad_h=3, stride_w=2, stride_h=2
    )
    assert shapes[0] == stem
    # The last stage works on 7x7 maps of 2048 channels (1x1 reductions to 512).
    assert ConvShape(W=7, H=7, C=2048, N=2, K=512, S=1, R=1) in shapes


def test_language_model_has_no_conv_shapes():
    assert conv.model_shapes("gpt2-small", 1) == []


def test_run_conv_times_and_rates_agree():
    row = conv.run_conv(TINY, CPU, "fp32", warmup=1, iters=3, flush=None)
    assert row["status"] == "ok"
    assert row["shape"] == TINY.label()
    assert row["flops"] == TINY.flops
    assert (row["N"], row["C"], row["H"], row["W"], row["K"], row["R"], row["S"]) == (
        2,
        2,
        5,
        6,
        3,
        3,
        3,
    )
    assert row["dtype"] == "fp32"
    for p in PASSES:
        for stat in ("mean", "median", "best"):
            time_us = row[f"{p}_time_us_{stat}"]
            assert time_us > 0
            expected = TINY.flops / (time_us * 1e-6) / 1e12
            assert math.isclose(row[f"{p}_tflops_{stat}"], expected, rel_tol=1e-9)
        assert row[f"{p}_time_us_best"] <= row[f"{p}_time_us_median"]


def test_run_gives_a_row_per_shape_with_a_flush():
    rows = conv.run([TINY, ASYMMETRIC], CPU, "fp32", warmup=0, iters=1, flush=True)
    assert [r["shape"] for r in rows] == [TINY.label(), ASYMMETRIC.label()]
    assert all(r["status"] == "ok" for r in rows)


def test_run_records_out_of_memory_and_raises_other_errors(monkeypatch):
    def exhausted(shape, *args):
        if shape is ASYMMETRIC:
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried 1 TB")
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")

    monkeypatch.setattr(conv, "run_conv", exhausted)
    rows = conv.run([TINY, ASYMMETRIC], CPU, "fp32", flush=False)
    assert [r["status"] for r in rows] == ["oom", "oom"]
    assert rows[0]["reason"].startswith("CUDA out of memory")
    assert "can't allocate memory" in rows[1]["reason"]
    assert "fwd_time_us_median" not in rows[0]
    assert rows[1]["flops"] == ASYMMETRIC.flops

    def broken(*args):
        raise RuntimeError("expected input to have 3 channels")

    monkeypatch.setattr(conv, "run_conv", broken)
    with pytest.raises(RuntimeError, match="channels"):
        conv.run([TINY], CPU, "fp32", flush=False)


def test_fp8_is_refused():
    with pytest.raises(ValueError, match="allowed fp32, tf32, fp16, bf16"):
        conv.run([TINY], CPU, "fp8", flush=False)


@pytest.mark.parametrize("enabled", [True, False])
def test_conv_sets_cudnn_autotuning_on_cuda_and_the_switch_turns_it_off(monkeypatch, enabled):
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", not enabled)
    assert conv.run([], torch.device("cuda"), "fp32", flush=False, cudnn_benchmark=enabled) == []
    assert torch.backends.cudnn.benchmark is enabled


def test_conv_on_the_cpu_leaves_cudnn_off(monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    conv.run([], torch.device("cpu"), "fp32", flush=False)
    assert torch.backends.cudnn.benchmark is False
