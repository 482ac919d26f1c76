"""Operator categories: the name table, the arithmetic on fake events, a real CPU profile."""

from types import SimpleNamespace

import pytest
import torch
from torch.autograd import DeviceType
from torch.autograd.profiler_util import Kernel

from trainperf import models
from trainperf.case.spec import make_case
from trainperf.profile import categories as cat
from trainperf.profile.categories import (
    CATEGORIES,
    aggregate,
    categorize,
    cuda_api_breakdown,
    device_entries,
    forward_op_of,
    profile_categories,
    summarize,
)
from trainperf.step.training_step import build_training_step

KNOWN = {
    "aten::convolution": "convolution",
    "aten::mkldnn_convolution": "convolution",
    "aten::cudnn_convolution": "convolution",
    "aten::convolution_backward": "convolution",
    "ConvolutionBackward0": "convolution",
    "autograd::engine::evaluate_function: ConvolutionBackward0": "convolution",
    "aten::addmm": "matrix multiply",
    "aten::mm": "matrix multiply",
    "aten::linear": "matrix multiply",
    "aten::baddbmm": "matrix multiply",
    "AddmmBackward0": "matrix multiply",
    "MmBackward0": "matrix multiply",
    "aten::native_batch_norm": "normalization",
    "aten::native_layer_norm_backward": "normalization",
    "NativeBatchNormBackward0": "normalization",
    "aten::max_pool2d_with_indices": "pooling",
    "aten::_adaptive_avg_pool2d_backward": "pooling",
    "MaxPool2DWithIndicesBackward0": "pooling",
    "aten::relu_": "element-wise and activation",
    "aten::threshold_backward": "element-wise and activation",
    "ReluBackward0": "element-wise and activation",
    "ThresholdBackward0": "element-wise and activation",
    "aten::add_": "element-wise and activation",
    "aten::_log_softmax": "element-wise and activation",
    "aten::nll_loss_forward": "element-wise and activation",
    "aten::_foreach_add_": "optimizer",
    "aten::_fused_adamw_": "optimizer",
    "Optimizer.step#SGD.step": "optimizer",
    "Optimizer.zero_grad#SGD.zero_grad": "optimizer",
    "aten::copy_": "memory copies",
    "aten::_to_copy": "memory copies",
    "aten::clone": "memory copies",
    "Memcpy HtoD (Pageable -> Device)": "memory copies",
    "aten::scaled_dot_product_attention": "attention",
    "aten::_scaled_dot_product_flash_attention": "attention",
    "ScaledDotProductEfficientAttentionBackward0": "attention",
    "nccl:all_reduce": "communication",
    "c10d::allreduce_": "communication",
    # The c10d range around every collective DDP issues: communication.
    "record_param_comms": "communication",
    "aten::empty": "other",
    "aten::view": "other",
    "aten::t": "other",
    "torch::autograd::AccumulateGrad": "other",
    # Lookalikes: a substring of another category, not that category.
    "aten::expand": "other",
    "aten::broadcast_tensors": "other",
    "aten::topk": "other",
    "aten::upsample_bilinear2d": "other",
}


@pytest.mark.parametrize(("name", "category"), KNOWN.items())
def test_categorize_known_names(name, category):
    assert categorize(name) == category


def test_categorize_is_case_insensitive_and_always_a_category():
    assert categorize("ATEN::CONVOLUTION") == "convolution"
    assert categorize("optimizer.STEP#Adam.step") == "optimizer"
    assert categorize("") == "other"
    assert all(category in CATEGORIES for category, _ in cat.CATEGORY_PATTERNS)


def test_forward_op_of_backward_nodes():
    assert forward_op_of("NativeBatchNormBackward0") == "aten::native_batch_norm"
    assert forward_op_of("MaxPool2DWithIndicesBackward0") == "aten::max_pool2d_with_indices"
    assert forward_op_of("autograd::engine::evaluate_function: MmBackward0") == "aten::mm"
    assert forward_op_of("aten::mm") is None
    assert forward_op_of("torch::autograd::AccumulateGrad") is None


EVENTS = [
    ("aten::mkldnn_convolution", 600.0, 6),
    ("aten::convolution_backward", 900.0, 6),
    ("aten::addmm", 300.0, 2),
    ("aten::relu_", 100.0, 4),
    ("aten::relu_", 50.0, 2),  # merged with the line above
    ("aten::empty", 50.0, 20),
]


def test_aggregate_per_step_and_shares():
    categories, top_ops = aggregate(EVENTS, steps=2)
    assert [entry["category"] for entry in categories] == list(CATEGORIES)
    by_name = {entry["category"]: entry for entry in categories}
    total_us = 2000.0
    assert by_name["convolution"]["ms"] == pytest.approx(1500.0 / 1e3 / 2)
    assert by_name["convolution"]["share"] == pytest.approx(1500.0 / total_us)
    assert by_name["matrix multiply"]["ms"] == pytest.approx(0.15)
    assert by_name["element-wise and activation"]["ms"] == pytest.approx(0.075)
    assert by_name["other"]["ms"] == pytest.approx(0.025)
    assert by_name["attention"] == {"category": "attention", "ms": 0.0, "share": 0.0}
    assert sum(entry["share"] for entry in categories) == pytest.approx(1.0)

    assert [op["name"] for op in top_ops] == [
        "aten::convolution_backward",
        "aten::mkldnn_convolution",
        "aten::addmm",
        "aten::relu_",
        "aten::empty",
    ]
    relu = top_ops[3]
    assert relu == {
        "name": "aten::relu_",
        "category": "element-wise and activation",
        "ms": pytest.approx(0.075),
        "calls": 3.0,
        "share": pytest.approx(150.0 / total_us),
    }


def test_aggregate_keeps_the_ten_largest_and_handles_nothing():
    events = [(f"aten::op{i}", float(i), 1) for i in range(1, 16)]
    _, top_ops = aggregate(events, steps=1)
    assert [op["name"] for op in top_ops] == [f"aten::op{i}" for i in range(15, 5, -1)]
    categories, top_ops = aggregate([], steps=1)
    assert top_ops == [] and all(entry["share"] == 0.0 for entry in categories)
    with pytest.raises(ValueError, match="steps"):
        aggregate(EVENTS, steps=0)


def test_cuda_api_breakdown():
    events = [
        ("cudaLaunchKernel", 400.0, 200),
        ("cuLaunchKernel", 100.0, 50),
        ("cudaDeviceSynchronize", 300.0, 2),
        ("cudaStreamSynchronize", 100.0, 2),
        ("cudaMalloc", 50.0, 4),
        ("cudaMemcpyAsync", 40.0, 4),
        ("cudaMemsetAsync", 10.0, 2),
        ("cudaFuncGetAttributes", 0.0, 2),  # other
        ("cudaGetDeviceProperties_v2", 0.0, 2),  # other
        ("aten::mm", 999.0, 4),  # not the CUDA API: left out
        ("custom_range", 999.0, 1),  # starts with "cu" but is not the API: left out
    ]
    groups = {g["group"]: g for g in cuda_api_breakdown(events, steps=2)}
    assert list(groups) == [
        "synchronize",
        "malloc/free",
        "kernel launch",
        "memcpy",
        "NCCL calls",
        "other",
    ]
    assert groups["NCCL calls"]["calls"] == 0.0
    assert groups["kernel launch"] == {
        "group": "kernel launch",
        "ms": pytest.approx(0.25),
        "share": pytest.approx(0.5),
        "calls": 125.0,
    }
    assert groups["synchronize"]["share"] == pytest.approx(0.4)
    assert groups["malloc/free"]["ms"] == pytest.approx(0.025)
    assert groups["memcpy"]["calls"] == 3.0
    assert groups["other"]["calls"] == 2.0 and groups["other"]["ms"] == 0.0
    assert sum(g["share"] for g in groups.values()) == pytest.approx(1.0)


def _host(name, self_cpu_us, self_device_us=0.0, kernels=(), start=0.0):
    return SimpleNamespace(
        key=name,
        device_type=DeviceType.CPU,
        is_async=False,
        thread=1,
        time_range=SimpleNamespace(start=start, end=start + self_cpu_us),
        self_cpu_time_total=self_cpu_us,
        self_device_time_total=self_device_us,
        kernels=[Kernel(k, 0, us) for k, us in kernels],
    )


def _kernel(name, us, start=0.0):
    return SimpleNamespace(
        key=name,
        device_type=DeviceType.CUDA,
        is_async=False,
        time_range=SimpleNamespace(start=start, end=start + us),
        self_cpu_time_total=0.0,
        self_device_time_total=us,
        kernels=[],
    )


# A fake CUDA profile (FunctionEvents as torch.profiler builds them): ops with the kernels
# they launched attached, the kernels again as device events, one kernel no op launched.
CUDA_EVENTS = [
    _host("aten::conv2d", 30.0),  # launched nothing itself: no device time
    _host("aten::cudnn_convolution", 20.0, 700.0, [("sm90_xmma_fprop_implicit_gemm", 700.0)]),
    _host("aten::mm", 10.0, 200.0, [("sm90_xmma_gemm_f32f32", 200.0)]),
    _host("cudaLaunchKernel", 15.0),
    _host("cudaLaunchKernel", 5.0),
    _host("cudaDeviceSynchronize", 40.0),
    _kernel("sm90_xmma_fprop_implicit_gemm", 700.0),
    _kernel("sm90_xmma_gemm_f32f32", 200.0),
    _kernel("triton_poi_fused_relu_0", 100.0),  # launched outside any op
]


def test_device_entries_count_each_kernel_once():
    entries, kernels = device_entries(CUDA_EVENTS)
    assert sorted(entries) == [
        ("aten::cudnn_convolution", 700.0, 1),
        ("aten::mm", 200.0, 1),
        ("triton_poi_fused_relu_0", 100.0, 1),
    ]
    assert sum(us for _, us, _ in entries) == sum(us for _, us, _ in kernels) == 1000.0


def test_summarize_a_cuda_profile():
    result = summarize(CUDA_EVENTS, on_cuda=True, steps=1, elapsed_s=0.002)
    assert result["source"] == "torch.profiler self device time"
    assert result["profiled_step_ms"] == pytest.approx(2.0)
    shares = {entry["category"]: entry["share"] for entry in result["categories"]}
    # Filed by op name: the cuDNN kernel named "gemm" is still a convolution.
    assert shares["convolution"] == pytest.approx(0.7)
    assert shares["matrix multiply"] == pytest.approx(0.2)
    assert shares["element-wise and activation"] == pytest.approx(0.1)
    assert result["total_ms"] == pytest.approx(1.0)
    assert [k["name"] for k in result["top_kernels"]][0] == "sm90_xmma_fprop_implicit_gemm"
    api = {g["group"]: g for g in result["cuda_api"]}
    assert api["kernel launch"]["ms"] == pytest.approx(0.02)
    assert api["kernel launch"]["calls"] == 2.0
    assert api["synchronize"]["share"] == pytest.approx(40 / 60)
    assert result["cuda_api_absent_reason"] is None


def test_profile_categories_on_cuda_with_a_fake_profiler(monkeypatch):
    seen = {"steps": 0, "syncs": 0, "order": []}

    class FakeProfile:
        def __init__(self, activities, record_shapes, schedule):
            seen["activities"], seen["schedule"] = activities, schedule
            seen["order"].append("profiler on")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def step(self):
            seen["order"].append("recording")

        def events(self):
            return CUDA_EVENTS

    def step():
        seen["steps"] += 1
        seen["order"].append("step")

    monkeypatch.setattr(torch.profiler, "profile", FakeProfile)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: seen.update(syncs=1))
    result = profile_categories(step, torch.device("cuda"), steps=2, warmup=3)
    assert seen["steps"] == 5 and seen["syncs"] == 1
    # CUPTI starts on the profiler's warm-up step, which is not recorded.
    assert seen["order"] == ["step"] * 2 + ["profiler on", "step", "recording", "step", "step"]
    action = torch.profiler.ProfilerAction
    assert [seen["schedule"](i) for i in range(2)] == [action.WARMUP, action.RECORD_AND_SAVE]
    assert torch.profiler.ProfilerActivity.CUDA in seen["activities"]
    assert result["source"] == "torch.profiler self device time"
    assert result["categories"][0]["ms"] == pytest.approx(0.35)  # 700 us over 2 steps


def test_profile_categories_rejects_bad_arguments():
    with pytest.raises(ValueError, match="allowed cpu, cuda"):
        profile_categories(lambda: None, torch.device("meta"))
    with pytest.raises(ValueError, match="steps"):
        profile_categories(lambda: None, torch.device("cpu"), steps=0)
    with pytest.raises(ValueError, match="warmup"):
        profile_categories(lambda: None, torch.device("cpu"), warmup=-1)


def test_profile_a_real_cifarnet_step_on_cpu():
    case = make_case(model="cifarnet", batch_size=4, image_size=16)
    training = build_training_step(models.get("cifarnet"), case, torch.device("cpu"))
    result = profile_categories(training.step, torch.device("cpu"), steps=2, warmup=1)

    assert result["source"] == "torch.profiler self CPU time"
    by_name = {entry["category"]: entry for entry in result["categories"]}
    assert list(by_name) == list(CATEGORIES)
    assert by_name["convolution"]["ms"] > 0
    assert by_name["matrix multiply"]["ms"] > 0
    assert by_name["pooling"]["ms"] > 0
    assert by_name["communication"]["ms"] == 0.0
    assert sum(entry["share"] for entry in result["categories"]) == pytest.approx(1.0)
    assert 0 < result["total_ms"] <= result["profiled_step_ms"]
    top = result["top_ops"]
    assert 0 < len(top) <= 10
    assert [op["ms"] for op in top] == sorted((op["ms"] for op in top), reverse=True)
    assert result["cuda_api"] is None and result["top_kernels"] is None
    assert result["cuda_api_absent_reason"] == "no CUDA device: the CUDA API is not used"
