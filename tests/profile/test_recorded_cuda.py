"""The CUDA side of `profile` on events a real GPU produced (tests/profile/recorded.py):
each kernel counted once, the device-side ranges of record_function left out, the host's
CUDA API and NCCL calls by call with their counts."""

import pytest
from recorded import recorded, recorded_events

from trainperf.profile.categories import CUDA_API_GROUPS, summarize
from trainperf.profile.overlap import communication_overlap, device_timeline

RECORDINGS = ("h200_resnet18_step", "h200_resnet18_ddp_nccl")
LAUNCHES = dict(CUDA_API_GROUPS)["kernel launch"]


def _raw(name):
    document = recorded(name)
    return document["events"], document["steps"]


@pytest.mark.parametrize("name", RECORDINGS)
def test_every_kernel_is_counted_once_and_no_annotation(name):
    raw, steps = _raw(name)
    kernels = [e for e in raw if e["device_type"] != 0 and not e["is_user_annotation"]]
    annotations = [e for e in raw if e["device_type"] != 0 and e["is_user_annotation"]]
    # The GPU row holds ranges too (ProfilerStep#N spans the whole profiled window).
    assert any(e["name"] == "ProfilerStep*" for e in annotations)
    events, steps = recorded_events(name)
    result = summarize(events, on_cuda=True, steps=steps, elapsed_s=0.1)
    kernel_ms = sum(e["end_us"] - e["start_us"] for e in kernels) / 1e3 / steps
    assert result["total_ms"] == pytest.approx(kernel_ms, rel=1e-6)
    assert sum(c["ms"] for c in result["categories"]) == pytest.approx(kernel_ms, rel=1e-6)
    names = {k["name"] for k in result["top_kernels"]} | {op["name"] for op in result["top_ops"]}
    assert not names & {e["name"] for e in annotations}
    shares = {c["category"]: c["share"] for c in result["categories"]}
    assert shares["convolution"] > 0.3 and shares["normalization"] > 0.3  # ResNet-18 in bf16
    assert shares["other"] < 0.01


@pytest.mark.parametrize("name", RECORDINGS)
def test_the_host_api_by_call_counts_what_the_host_called(name):
    raw, steps = _raw(name)
    events, _ = recorded_events(name)
    api = {g["group"]: g for g in summarize(events, True, steps, 0.1)["cuda_api"]}
    host = [e for e in raw if e["device_type"] == 0 and not e["is_async"]]
    launches = sum(e["name"] in LAUNCHES for e in host)
    assert api["kernel launch"]["calls"] == launches / steps > 100
    collective_calls = sum(e["name"].startswith("c10d::") for e in host)
    assert api["NCCL calls"]["calls"] == collective_calls / steps
    assert sum(g["share"] for g in api.values()) == pytest.approx(1.0)


def test_ddp_on_one_nccl_rank_calls_nccl_but_runs_no_nccl_kernel():
    """One rank: c10d's all_reduce, broadcast, all_gather and reduce_scatter reach NCCL
    (7 calls a step: 3 buckets, 2 buffer broadcasts, 1 + 1), which copies instead of
    running a kernel: no communication on the device's timeline."""
    events, steps = recorded_events("h200_resnet18_ddp_nccl")
    api = {g["group"]: g for g in summarize(events, True, steps, 0.1)["cuda_api"]}
    assert api["NCCL calls"]["calls"] == 7 and api["NCCL calls"]["ms"] > 0
    comm, compute = device_timeline(events)
    assert comm == [] and len(compute) > 500
    overlap = communication_overlap(events, True, steps, lambda name: False)
    assert overlap == {"comm_ms": 0.0, "comm_exposed_ms": 0.0}
