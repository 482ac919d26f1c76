"""The report's figures of profiles over device counts: host API time by call and the
communication share of the step, against devices."""

import pytest

from trainperf.report.figures_profile import (
    by_device_count,
    communication_figures,
    host_api_figures,
)

API = ("synchronize", "malloc/free", "kernel launch", "memcpy", "NCCL calls", "other")


def profile(devices, parallel="auto", system="sys-a", model="resnet18", comm=None, api=None):
    step = 100.0 + 10 * devices
    metrics = {"profiled_step_ms": step, "step_ms_uninstrumented": step}
    if comm is not None:
        metrics |= {"comm_ms": comm, "comm_exposed_ms": comm / 2}
    if devices > 1:
        metrics |= {"rank_spread": 0.05, "slowest_rank": 1, "comm_exposed_by_difference_ms": 7.0}
    if api is not None:
        metrics["cuda_api"] = [
            {"group": g, "ms": api * (i + 1), "calls": 10.0 * (i + 1), "share": 0.0}
            for i, g in enumerate(API)
        ]
    case = {"model": model, "batch_size": 32, "precision": "fp32", "device": "cuda"}
    case |= {"devices": devices, "nodes": 1, "parallel": parallel}
    return {
        "kind": "profile",
        "status": "ok",
        "system": system,
        "params": {"case": case},
        "metrics": metrics,
    }


def test_the_one_process_profile_starts_every_parallel_modes_series():
    runs = [
        profile(1, comm=0.0),
        profile(2, "ddp", comm=20.0),
        profile(4, "ddp", comm=40.0),
        profile(2, "fsdp", comm=30.0),
        profile(4, "ddp", system="sys-b", comm=9.0),  # one count only: no series
        {**profile(8, "ddp"), "status": "error"},
    ]
    series = by_device_count(runs)
    assert {system for system, _ in series} == {"sys-a"}
    counts = {label.rsplit(" ", 1)[1]: sorted(c) for (_, label), c in series.items()}
    assert counts == {"ddp": [1, 2, 4], "fsdp": [1, 2]}


def test_a_newer_profile_replaces_an_older_one():
    runs = [profile(1, comm=0.0), profile(2, "ddp", comm=20.0), profile(2, "ddp", comm=50.0)]
    (counts,) = by_device_count(runs).values()
    assert counts[2]["metrics"]["comm_ms"] == 50.0


def test_communication_share_against_devices():
    runs = [profile(1, comm=0.0), profile(2, "ddp", comm=24.0), profile(4, "ddp", comm=70.0)]
    runs.append({**profile(8, "ddp"), "metrics": {"profiled_step_ms": 1.0}})  # stored before
    (figure,) = communication_figures(runs, {"sys-a": "gpu-box"})
    assert figure.key == "comm-share-vs-devices-gpu-box"
    rows = figure.table["rows"]
    assert [row[1] for row in rows] == ["1", "2", "4"]  # the old profile is left out
    assert rows[1][4] == "20.0%" and rows[1][6] == "10.0%"  # 24 and 12 of 120 ms
    assert rows[0][7] == "-" and rows[2][7] == "7"
    assert "<svg" in figure.svg


def test_host_api_by_call_needs_cuda_profiles_at_two_counts():
    runs = [profile(1, api=0.1), profile(2, "ddp", api=0.2), profile(4, "ddp")]
    (figure,) = host_api_figures(runs, {})
    rows = figure.table["rows"]
    assert len(rows) == 2 * 6  # devices 1 and 2 (4 has no CUDA API), six groups each
    launch = [row for row in rows if row[1] == "kernel launch"]
    assert [row[2] for row in launch] == ["0.300", "0.600"]
    assert "<svg" in figure.svg
    assert host_api_figures([profile(1, api=0.1), profile(2, "ddp")], {}) == []


@pytest.mark.parametrize("status", ["error", "oom"])
def test_failed_profiles_draw_nothing(status):
    runs = [{**profile(n, "ddp" if n > 1 else "auto", comm=1.0), "status": status} for n in (1, 2)]
    assert communication_figures(runs, {}) == [] and host_api_figures(runs, {}) == []
