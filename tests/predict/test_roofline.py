"""The per-op roofline on hand-built nets whose FLOPs and bytes are counted by hand."""

import math

import pytest
import torch
from torch import nn

from trainperf import models
from trainperf.models.flops import count_flops
from trainperf.predict.roofline import (
    WINOGRAD_SPEEDUP,
    op_profile,
    profile_step,
    roofline_seconds_per_sample,
    tensor_bytes,
)

HUGE = 1e30  # a bandwidth (or peak) so large that its side of the roofline vanishes


def _sum_loss(outputs, targets):
    return outputs.sum()


def _weighted_sum_loss(outputs, targets):
    return (outputs * targets).sum()


def _relu_profile(n):
    """ReLU on (B, n), loss = sum. Bytes per step, fp32, by hand: relu reads and writes Bn
    (8Bn); sum reads Bn, writes 1 (4Bn + 4); the seed ones_like writes 1 (4);
    threshold_backward reads the broadcast scalar grad (4) and the output, writes Bn (8Bn + 4):
    20Bn + 12 in all, no FLOPs."""
    return profile_step(
        nn.ReLU,
        lambda b: (torch.randn(b, n, device="meta", requires_grad=True), None),
        _sum_loss,
    )


def _linear_profile(fan_in, fan_out):
    """y = x Wᵀ with x requiring grad: three matmuls of 2·B·in·out FLOPs each (forward, grad
    of x, grad of W), each moving W once (4·in·out bytes) and B·(in + out) elements."""
    return profile_step(
        lambda: nn.Linear(fan_in, fan_out, bias=False),
        lambda b: (
            torch.randn(b, fan_in, device="meta", requires_grad=True),
            torch.randn(b, fan_out, device="meta"),
        ),
        _weighted_sum_loss,
    )


def _conv_profile(build, dims=2):
    """A convolution of 4 input channels on a (B, 4, 8, ...) input with ``dims`` 8s."""
    return profile_step(
        build, lambda b: (torch.randn(b, 4, *(8,) * dims, device="meta"), None), _sum_loss
    )


def test_linear_matmuls_counted_by_hand():
    profile = _linear_profile(8, 16)
    forward, backward = sorted(
        (op for op in profile.ops if op.op == "aten.mm.default"), key=lambda op: op.backward
    )
    # One in the forward, two in the backward (grad of x, grad of W).
    assert (forward.backward, forward.count, backward.backward, backward.count) == (
        False,
        1,
        True,
        2,
    )
    for mm in (forward, backward):
        assert (mm.flops_fixed, mm.flops_per_sample) == (0, 2 * 8 * 16)
        assert (mm.bytes_fixed, mm.bytes_per_sample) == (4 * 8 * 16, 4 * (8 + 16))
    assert profile.flops_per_sample() == 3 * 2 * 8 * 16
    assert profile.element_bytes == 4


def test_forward_share_is_the_forward_ops_time_not_a_third():
    # A linear layer whose input needs a gradient: one matmul forward, two backward; with
    # the bandwidth unlimited the forward is a third of the time, as its FLOPs.
    matmuls = roofline_seconds_per_sample(_linear_profile(64, 64), 1e12, HUGE)
    assert matmuls.forward_share == pytest.approx(1 / 3, rel=1e-9)
    # The first layer of a network (its input needs no gradient): one matmul each way.
    first = profile_step(
        lambda: nn.Linear(64, 64, bias=False),
        lambda b: (torch.randn(b, 64, device="meta"), torch.randn(b, 64, device="meta")),
        _weighted_sum_loss,
    )
    assert roofline_seconds_per_sample(first, 1e12, HUGE).forward_share == pytest.approx(
        0.5, rel=1e-9
    )
    # Element-wise ops are priced by their bytes (``_relu_profile``): the forward (ReLU and
    # the sum loss) moves 12Bn + 4 bytes, the backward (the seed, threshold_backward reading
    # the broadcast gradient and the output) 8Bn + 8: 0.6 of the time, where FLOPs say a third.
    n, batch = 1000, 8
    relu = roofline_seconds_per_sample(_relu_profile(n), 1e12, 1e9, batch=batch)
    forward, whole = 12 * batch * n + 4, 20 * batch * n + 12
    assert relu.forward_share == pytest.approx(forward / whole, rel=1e-9)
    assert relu.forward_s == pytest.approx(forward / batch / 1e9, rel=1e-9)


def test_matmul_with_enormous_bandwidth_is_compute_bound():
    profile = _linear_profile(64, 64)
    flops = 3 * 2 * 64 * 64
    time = roofline_seconds_per_sample(profile, 1e12, HUGE)
    assert time.flops_per_sample == flops
    assert time.seconds_per_sample == pytest.approx(flops / 1e12, rel=1e-12)
    assert time.compute_bound_s == pytest.approx(time.seconds_per_sample, rel=1e-12)
    assert time.memory_bound_share < 1e-12
    half = roofline_seconds_per_sample(profile, 1e12, HUGE, compute_fraction=0.5)
    assert half.seconds_per_sample == pytest.approx(2 * flops / 1e12, rel=1e-12)


def test_elementwise_op_has_no_flops_and_costs_its_bytes():
    n, batch, bandwidth = 5, 8, 1e9
    profile = _relu_profile(n)
    (relu,) = [op for op in profile.ops if op.op == "aten.relu.default"]
    assert (relu.flops_per_sample, relu.bytes_fixed, relu.bytes_per_sample) == (0, 0, 8 * n)
    per_sample = 20 * n + 12 / batch
    time = roofline_seconds_per_sample(profile, 1e12, bandwidth, batch=batch)
    assert time.flops_per_sample == 0
    assert time.bytes_per_sample == pytest.approx(per_sample)
    assert time.seconds_per_sample == pytest.approx(per_sample / bandwidth)
    assert time.memory_bound_share == 1.0
    assert time.arithmetic_intensity == 0.0
    half = roofline_seconds_per_sample(profile, 1e12, bandwidth, batch=batch, activation_bytes=2)
    assert half.seconds_per_sample == pytest.approx(per_sample / 2 / bandwidth)
    slow = roofline_seconds_per_sample(profile, 1e12, bandwidth, batch=batch, memory_fraction=0.25)
    assert slow.seconds_per_sample == pytest.approx(4 * per_sample / bandwidth)


def test_weights_move_once_per_step_whatever_the_batch():
    profile = _linear_profile(32, 32)
    small, large = (
        roofline_seconds_per_sample(profile, math.inf, 1e9, batch=b).bytes_per_sample
        for b in (2, 64)
    )
    # Per step, whatever the batch: the three matmuls each move W (4·32·32 bytes); sum writes
    # the scalar loss, ones_like its seed, mul's backward reads the broadcast seed (4 each).
    fixed = 3 * 4 * 32 * 32 + 3 * 4
    assert small - large == pytest.approx(fixed * (1 / 2 - 1 / 64))


def test_infinite_peak_leaves_only_memory_time():
    profile = _conv_profile(lambda: nn.Conv2d(4, 4, 3, padding=1, bias=False))
    time = roofline_seconds_per_sample(profile, math.inf, 1e9)
    assert time.flops_per_sample > 0
    assert time.compute_bound_s == 0
    assert time.seconds_per_sample == pytest.approx(profile.bytes_per_sample() / 1e9)


def test_winograd_divides_only_eligible_convolution_flops():
    """conv1 3→4 3×3 stride 1 on 8×8: forward 2·4·64·3·9 = 13824 FLOPs per sample, and its
    weight gradient as many (the input needs no gradient); conv2 4→4 3×3 stride 2 (4×4 out):
    2·4·16·4·9 = 4608, three times; conv3 4→4 1×1: 2·4·16·4 = 512, three times."""

    def build():
        return nn.Sequential(
            nn.Conv2d(3, 4, 3, padding=1, bias=False),
            nn.Conv2d(4, 4, 3, stride=2, padding=1, bias=False),
            nn.Conv2d(4, 4, 1, bias=False),
        )

    profile = profile_step(
        build, lambda b: (torch.randn(b, 3, 8, 8, device="meta"), None), _sum_loss
    )
    eligible, other = 2 * 13824, 3 * 4608 + 3 * 512
    flags = {
        (op.op, op.flops_per_sample): op.winograd
        for op in profile.ops
        if op.op.startswith("aten.convolution")
    }
    assert flags == {
        ("aten.convolution.default", 13824): True,
        ("aten.convolution_backward.default", 13824): True,
        ("aten.convolution.default", 4608): False,
        ("aten.convolution_backward.default", 2 * 4608): False,
        ("aten.convolution.default", 512): False,
        ("aten.convolution_backward.default", 2 * 512): False,
    }
    direct = roofline_seconds_per_sample(profile, 1e9, HUGE)
    fast = roofline_seconds_per_sample(profile, 1e9, HUGE, winograd=True)
    assert direct.flops_per_sample == fast.flops_per_sample == eligible + other
    assert direct.winograd_share == pytest.approx(eligible / (eligible + other))
    assert direct.seconds_per_sample == pytest.approx((eligible + other) / 1e9, rel=1e-9)
    assert fast.seconds_per_sample == pytest.approx(
        (eligible / WINOGRAD_SPEEDUP + other) / 1e9, rel=1e-9
    )


@pytest.mark.parametrize(
    ("conv", "options", "eligible"),
    [
        (nn.Conv2d, {"kernel_size": 3, "padding": 1}, True),
        (nn.Conv2d, {"kernel_size": 3, "stride": 2, "padding": 1}, False),
        (nn.Conv2d, {"kernel_size": 1}, False),
        (nn.Conv2d, {"kernel_size": 5, "padding": 2}, False),
        (nn.Conv2d, {"kernel_size": 3, "padding": 2, "dilation": 2}, False),
        (nn.Conv2d, {"kernel_size": 3, "padding": 1, "groups": 2}, False),
        (nn.Conv1d, {"kernel_size": 3, "padding": 1}, False),
        (nn.Conv3d, {"kernel_size": 3, "padding": 1}, False),
    ],
)
def test_winograd_eligibility(conv, options, eligible):
    dims = {nn.Conv1d: 1, nn.Conv2d: 2, nn.Conv3d: 3}[conv]
    profile = _conv_profile(lambda: conv(4, 4, **options), dims)
    flags = {op.winograd for op in profile.ops if "convolution" in op.op}
    assert flags == {eligible}


def test_broadcast_dimensions_are_read_once():
    assert tensor_bytes(torch.empty(1, 4).expand(3, 4)) == 16
    assert tensor_bytes(torch.empty(6, 4)[:3]) == 48
    assert tensor_bytes(torch.empty(0, 4)) == 0


def test_zoo_profile_flops_equal_the_flop_counter():
    profile = op_profile(models.get("cifarnet"), 32)
    expected = count_flops(models.get("cifarnet"), 32).train_flops_per_sample
    assert profile.flops_per_sample() == expected
    assert op_profile(models.get("cifarnet"), 32) is profile  # counted once per model and size
    assert op_profile(models.get("cifarnet")).size == models.get("cifarnet").natural_size


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"peak_flops": 0}, "peak_flops must be > 0"),
        ({"peak_flops": math.nan}, "peak_flops must be > 0"),
        ({"memory_bytes_per_s": -1}, "memory_bytes_per_s must be > 0"),
        ({"compute_fraction": 0}, r"compute_fraction must be in \(0, 1\]"),
        ({"memory_fraction": 1.5}, r"memory_fraction must be in \(0, 1\]"),
        ({"activation_bytes": 0}, "activation_bytes must be > 0"),
        ({"batch": 0}, "batch must be an integer >= 1"),
    ],
)
def test_bad_arguments_are_refused(kwargs, message):
    args = {"peak_flops": 1e12, "memory_bytes_per_s": 1e9, **kwargs}
    with pytest.raises(ValueError, match=message):
        roofline_seconds_per_sample(_relu_profile(3), **args)


def test_op_classes():
    from trainperf.predict.roofline import op_class

    assert op_class("aten.mm.default") == op_class("aten.addmm.default") == "gemm"
    assert op_class("aten.bmm.default") == "gemm"
    assert op_class("aten._scaled_dot_product_flash_attention.default") == "attention"
    assert op_class("aten._scaled_dot_product_efficient_attention_backward.default") == (
        "attention"
    )
    assert op_class("aten.convolution_backward.default") == "conv"
    assert op_class("aten.native_layer_norm.default") == "other"


def test_class_fractions_price_each_kind_of_kernel_at_its_own_rate():
    """A linear layer's three matmuls at the GEMM rate; the whole-step fraction no longer
    applies to them. An unknown class or a fraction outside (0, 1] is refused."""
    profile = _linear_profile(64, 64)
    flops = 3 * 2 * 64 * 64
    time = roofline_seconds_per_sample(
        profile, 1e12, HUGE, compute_fraction=0.1, class_fractions={"gemm": 0.8}
    )
    assert time.seconds_per_sample == pytest.approx(flops / 0.8e12, rel=1e-12)
    with pytest.raises(ValueError, match="unknown op classes"):
        roofline_seconds_per_sample(profile, 1e12, HUGE, class_fractions={"gemms": 0.8})
    with pytest.raises(ValueError, match="class_fractions"):
        roofline_seconds_per_sample(profile, 1e12, HUGE, class_fractions={"gemm": 1.5})


def test_a_causal_fused_attention_kernel_does_half_the_flops():
    """The flash kernel with is_causal skips the blocks above the diagonal: half the FLOPs
    of FlopCounterMode's formula, forward and backward; without is_causal, all of them."""
    from trainperf.models.attention import AttentionPlan
    from trainperf.predict.memory import FusedAttention

    def attention(causal):
        class Net(nn.Module):
            def forward(self, x):
                q = x.view(x.shape[0], 2, 16, 8)
                return nn.functional.scaled_dot_product_attention(q, q, q, is_causal=causal)

        with FusedAttention(AttentionPlan("cuda", sixteen_bit=True, capability=(9, 0))):
            profile = profile_step(
                Net,
                lambda b: (torch.randn(b, 256, device="meta", requires_grad=True), None),
                _sum_loss,
            )
        return sum(o.count * o.flops(2) for o in profile.ops if "attention" in o.op)

    full, causal = attention(False), attention(True)
    assert full > 0 and causal == full // 2


def test_class_seconds_add_up_to_the_step():
    """Each op's time (the larger of its two sides) goes to its class; the classes sum to
    the step."""
    profile = op_profile(models.get("resnet18"), 64)
    time = roofline_seconds_per_sample(profile, 1e13, 1e12, batch=4)
    assert set(time.class_seconds) <= {"gemm", "attention", "conv", "other"}
    assert time.class_seconds["conv"] > 0 and time.class_seconds["other"] > 0
    assert sum(time.class_seconds.values()) == pytest.approx(time.seconds_per_sample)
