"""Communication and the part of it computation did not hide, from a profile's timeline."""

from types import SimpleNamespace

import pytest
from torch.autograd import DeviceType

from trainperf.profile.categories import categorize
from trainperf.profile.overlap import (
    communication_overlap,
    innermost_segments,
    length,
    uncovered,
    union,
)


def is_communication(name):
    return categorize(name) == "communication"


def host(name, start, end, thread=1, is_async=False):
    return SimpleNamespace(
        key=name,
        device_type=DeviceType.CPU,
        is_async=is_async,
        thread=thread,
        time_range=SimpleNamespace(start=start, end=end),
    )


def kernel(name, start, end, annotation=False):
    return SimpleNamespace(
        key=name,
        device_type=DeviceType.CUDA,
        is_async=False,
        is_user_annotation=annotation,
        time_range=SimpleNamespace(start=start, end=end),
    )


def test_interval_arithmetic():
    assert union([(3, 4), (0, 1), (0.5, 2), (5, 5)]) == [(0, 2), (3, 4)]
    assert length([(0, 2), (1, 3), (10, 11)]) == 4
    assert uncovered([(0, 10)], [(1, 2), (3, 4), (9, 12)]) == 7
    assert uncovered([(0, 1), (5, 6)], []) == 2
    assert uncovered([], [(0, 1)]) == 0


def test_innermost_op_owns_each_instant_of_a_thread():
    events = [
        host("autograd::engine::evaluate_function: AccumulateGrad", 0, 10),
        host("c10d::allreduce_", 2, 4),
        host("aten::add_", 5, 7),
        host("ProfilerStep#3", 0, 20),  # the profiler's step: no op
        host("aten::mm", 12, 15, thread=2),
    ]
    segments = sorted(innermost_segments(events))
    assert segments == [
        (0, 2, "autograd::engine::evaluate_function: AccumulateGrad"),
        (2, 4, "c10d::allreduce_"),
        (4, 5, "autograd::engine::evaluate_function: AccumulateGrad"),
        (5, 7, "aten::add_"),
        (7, 10, "autograd::engine::evaluate_function: AccumulateGrad"),
        (12, 15, "aten::mm"),
    ]


def test_gloo_beside_the_backward_is_hidden_and_after_it_exposed():
    """A bucket's all-reduce runs on gloo's thread while the backward goes on (hidden);
    the last one ends after the backward, while the main thread waits (exposed). A c10d
    call nested in autograd's op is communication, not hidden by its parent."""
    events = [
        host("autograd::engine::evaluate_function: ConvolutionBackward0", 0, 100),
        host("c10d::allreduce_", 40, 45),
        host("gloo:all_reduce", 45, 90, thread=7, is_async=True),
        host("gloo:all_reduce", 95, 160, thread=8, is_async=True),
        host("aten::copy_", 170, 175),  # after the wait: the gradients copied back
    ]
    result = communication_overlap(
        events, on_cuda=False, steps=1, is_communication=is_communication
    )
    # communication: 40-90 and 95-160 -> 115 us; exposed: 40-45 and 100-160 -> 65 us.
    assert result["comm_ms"] == pytest.approx(0.115)
    assert result["comm_exposed_ms"] == pytest.approx(0.065)


def test_on_a_gpu_nccl_kernels_against_the_other_kernels():
    events = [
        kernel("ProfilerStep*", 0, 1000, annotation=True),  # spans everything: no kernel
        kernel("nccl:all_reduce", 300, 700, annotation=True),
        kernel("sm90_xmma_dgrad_implicit_gemm", 0, 400),
        kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 350, 650),
        kernel("sm90_xmma_wgrad_implicit_gemm", 420, 500),
        kernel("vectorized_elementwise_kernel", 700, 800),
        host("cudaLaunchKernel", 10, 20),  # the host's side: not the device's timeline
    ]
    result = communication_overlap(events, on_cuda=True, steps=2, is_communication=is_communication)
    # NCCL 350-650 (300 us); compute covers 350-400 and 420-500: 170 us exposed; per step.
    assert result["comm_ms"] == pytest.approx(0.150)
    assert result["comm_exposed_ms"] == pytest.approx(0.085)


def test_a_profile_with_no_communication_has_none():
    events = [host("aten::mm", 0, 10), host("aten::add", 10, 12)]
    assert communication_overlap(events, False, 1, is_communication) == {
        "comm_ms": 0.0,
        "comm_exposed_ms": 0.0,
    }
    with pytest.raises(ValueError, match="steps"):
        communication_overlap(events, False, 0, is_communication)
