"""Distributed pieces that need no process: launch lines, scaling arithmetic, rank metrics,
torchrun failure reports, the Slurm script."""

import statistics
import sys

import pytest

from trainperf.analysis.scaling import NO_BASELINE, scaling_rows, speedup_efficiency
from trainperf.case.spec import make_case
from trainperf.launch.runner import ChildJob, _torchrun_root_cause, _where_stuck, child_command
from trainperf.launch.slurm import SlurmError, sbatch_script
from trainperf.parallel import group, torchrun
from trainperf.step.rank_case import rank_metrics, slowest_per_step, synchronized_steps


def test_efficiency_arithmetic_on_known_inputs():
    speedup, efficiency = speedup_efficiency(960.0, 4, 250.0)
    assert speedup == pytest.approx(3.84)
    assert efficiency == pytest.approx(0.96)


def test_torchrun_lines():
    assert torchrun.torchrun_args(2, 1, None, "x")[:1] == ["--standalone"]
    multi = torchrun.torchrun_args(8, 4, None, "job1")
    assert multi[multi.index("--rdzv-endpoint") + 1] == "127.0.0.1:29400"  # loopback
    assert multi[multi.index("--nnodes") + 1] == "4"
    given = torchrun.torchrun_args(8, 4, "10.0.0.1:29500", "job1")
    assert "10.0.0.1:29500" in given and "job1" in given
    command = torchrun.torchrun_command(["c.json", "r.json"], 2)
    assert command[:3] == [sys.executable, "-m", "trainperf.parallel.torchrun"]
    assert command[-4:] == ["-m", "trainperf.launch.worker", "c.json", "r.json"]


def test_child_command_by_mode(tmp_path):
    single = child_command(
        ChildJob.of_case(make_case(model="cifarnet", batch_size=2)), tmp_path / "c", tmp_path / "r"
    )
    assert single[1:3] == ["-m", "trainperf.launch.worker"]
    ddp = make_case(model="cifarnet", batch_size=2, devices=2)
    ddp_command = child_command(ChildJob.of_case(ddp), tmp_path / "c", tmp_path / "r")
    assert "trainperf.parallel.torchrun" in ddp_command
    one_rank_ddp = make_case(model="cifarnet", batch_size=2, parallel="ddp")
    launch = ChildJob.of_case(one_rank_ddp)
    assert "--nproc-per-node" in child_command(launch, tmp_path / "c", tmp_path / "r")


def test_slowest_rank_sets_each_step_of_ranks_that_run_apart():
    assert slowest_per_step([[1.0, 2.0, 3.0], [1.5, 1.0, 3.5]]) == [1.5, 2.0, 3.5]


def test_a_synchronized_step_is_the_interval_between_the_ranks_shared_sync_points():
    """Two ranks meet every 1.0 s (the all-reduce); each times its steps from the end of its
    own optimizer, which jitters after the sync point. The job takes 1.0 s a step; the
    slowest rank's step i would say more every step."""
    syncs = [1.0 * i for i in range(1, 9)]
    after = [
        [0.10, 0.30, 0.10, 0.30, 0.20, 0.10, 0.30, 0.10],
        [0.30, 0.10, 0.20, 0.10, 0.30, 0.30, 0.10, 0.20],
    ]
    per_rank = [
        [(syncs[i] + d[i]) - (syncs[i - 1] + d[i - 1]) for i in range(1, len(syncs))] for d in after
    ]
    job = synchronized_steps(per_rank)
    assert statistics.median(job) == pytest.approx(1.0)
    # The job's time between its first and last sync point, up to the ends' shifts.
    assert abs(sum(job) - (syncs[-1] - syncs[0])) <= 0.2
    assert statistics.median(slowest_per_step(per_rank)) > 1.1  # the bias avoided
    # A straggler delays the shared sync point, so every rank's step holds it.
    late = [[1.0, 1.5, 1.0], [1.0, 1.5, 1.0]]
    assert synchronized_steps(late) == [1.0, 1.5, 1.0]


def rank_report(rank, step_s, compute_step_s, mem_peak_bytes, params_bytes, activations_bytes):
    """What one rank on host "a" reports after 5 equal steps (the ranks differ only in these)."""
    return {
        "rank": rank,
        "host": "a",
        "step_s": [step_s] * 5,
        "compute_step_s": [compute_step_s] * 5,
        "mem_peak_bytes": mem_peak_bytes,
        "memory": {"mem_params_bytes": params_bytes, "mem_activations_bytes": activations_bytes},
    }


def test_rank_metrics_from_every_rank():
    case = make_case(model="cifarnet", batch_size=10, devices=2)
    everyone = [rank_report(0, 0.1, 0.08, 10, 6, 3), rank_report(1, 0.125, 0.09, 12, 5, 4)]
    m = rank_metrics(everyone, case)
    assert m["world_size"] == 2 and m["slowest_rank"] == 1 and m["step_over_ranks"] == "mean"
    assert m["rank_spread"] == pytest.approx(0.25)
    assert [r["samples_per_s_median"] for r in m["ranks"]] == pytest.approx([100.0, 80.0])
    assert m["compute_step_s_median"] == pytest.approx(0.09)
    # The synchronized step is the ranks' mean (0.1125); the step without communication
    # waits for the slowest rank (0.09).
    assert m["comm_exposed_s"] == pytest.approx(0.0225)
    assert m["comm_exposed_share"] == pytest.approx(0.0225 / 0.1125)
    assert m["mem_peak_bytes"] == 12
    # The memory split is the rank with the largest state's, and each rank's is kept.
    assert m["mem_params_bytes"] == 6 and m["mem_activations_bytes"] == 3
    assert [r["mem_activations_bytes"] for r in m["ranks"]] == [3, 4]
    assert "comm_exposed_all_gather_s" not in m  # ddp has no all-gather to take away


def result(rid, devices, samples_per_s, scaling="weak", batch=32, host="h", status="ok"):
    case = make_case(model="resnet18", batch_size=batch, devices=devices, scaling=scaling)
    return {
        "id": rid,
        "status": status,
        "case": case.model_dump(),
        "metrics": {"samples_per_s_median": samples_per_s, "global_batch": case.global_batch},
        "system": {"fingerprint": host, "hostname": host},
    }


def test_scaling_rows_against_the_one_device_result():
    rows = scaling_rows(
        [
            result(1, 1, 250.0),
            result(2, 4, 900.0),
            result(3, 4, 960.0),  # newer: replaces id 2
            result(4, 2, 100.0, status="oom"),  # failed results are not scaling points
            result(5, 2, 400.0, scaling="strong"),
            result(6, 2, 300.0, batch=64),  # no 1-device result at batch 64
        ]
    )
    weak = [r for r in rows if r["scaling"] == "weak" and r["setting"].startswith("resnet18 b32")]
    assert [(r["devices"], r["samples_per_s"]) for r in weak] == [(1, 250.0), (4, 960.0)]
    assert weak[1]["speedup"] == pytest.approx(3.84) and weak[1]["efficiency"] == pytest.approx(
        0.96
    )
    assert weak[0]["efficiency"] == 1.0
    strong = [r for r in rows if r["scaling"] == "strong"]
    assert [(r["devices"], r["efficiency"]) for r in strong] == [(1, 1.0), (2, pytest.approx(0.8))]
    (orphan,) = [r for r in rows if r["setting"].startswith("resnet18 b64")]
    assert orphan["efficiency"] is None and orphan["absent_reason"] == NO_BASELINE


def test_scaling_keeps_systems_apart():
    rows = scaling_rows([result(1, 1, 250.0, host="a"), result(2, 2, 400.0, host="b")])
    assert [(r["hostname"], r["efficiency"]) for r in rows] == [("b", None)]


TORCHRUN_FAILURE = """
Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 15132)  (SIGTERM)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-21_04:57:50
  rank      : 1 (local_rank: 1)
  exitcode  : -6 (pid: 15133)  (SIGABRT)
"""


def test_torchrun_root_cause_names_the_first_failed_rank(tmp_path):
    stderr = tmp_path / "stderr.txt"
    stderr.write_text(TORCHRUN_FAILURE)
    assert _torchrun_root_cause(stderr) == (1, -6)
    stderr.write_text("Traceback: something else")
    assert _torchrun_root_cause(stderr) is None


def test_where_stuck_names_the_rank_outside_torch(tmp_path):
    (tmp_path / "result.json.stack.rank0").write_text(
        'Thread 0x1 (most recent call first):\n  File "/venv/torch/autograd/graph.py", line 829'
        " in _engine_run_backward\n"
    )
    (tmp_path / "result.json.stack.rank1").write_text(
        'Thread 0x2 (most recent call first):\n  File "/home/u/nets.py", line 18 in forward\n'
    )
    (tmp_path / "result.json.phase.rank2").write_text("building")
    where = _where_stuck(tmp_path / "result.json")
    assert "rank 1 stuck at /home/u/nets.py:18 in forward" in where
    assert "rank 0 waiting inside torch" in where
    assert "rank 2 in phase building" in where


def test_sbatch_script():
    sets = ("devices=8",)
    script = sbatch_script("short-test", nodes=4, gpus_per_node=8, partition="gpu", overrides=sets)
    assert script.startswith("#!/bin/bash\n")
    for line in ("#SBATCH --nodes=4", "#SBATCH --gpus-per-node=8", "#SBATCH --partition=gpu"):
        assert line in script
    assert "--set nodes=$SLURM_NNODES --set devices=8" in script
    assert '--rdzv-endpoint "$HEAD:$RDZV_PORT"' in script and "--fresh" in script
    assert "scontrol show hostnames" in script
    with pytest.raises(SlurmError, match="not a Slurm time"):
        sbatch_script("quick", nodes=2, time_limit="two hours")


class FakeDistributed:
    """The parts of torch.distributed and torch.cuda that RankGroup touches, recorded."""

    def __init__(self):
        self.calls = []

    def init_process_group(self, backend, timeout):
        self.calls.append(("init", backend, timeout.total_seconds()))

    def new_group(self, backend):
        self.calls.append(("new_group", backend))
        return "control-group"

    def set_device(self, index):
        self.calls.append(("set_device", index))


def test_gpu_job_uses_nccl_on_its_local_device_and_gloo_for_control(monkeypatch):
    import torch
    import torch.distributed

    fake = FakeDistributed()
    monkeypatch.setattr(torch.distributed, "init_process_group", fake.init_process_group)
    monkeypatch.setattr(torch.distributed, "new_group", fake.new_group)
    monkeypatch.setattr(torch.cuda, "set_device", fake.set_device)
    for name, value in {"RANK": 5, "WORLD_SIZE": 8, "LOCAL_RANK": 1, "LOCAL_WORLD_SIZE": 4}.items():
        monkeypatch.setenv(name, str(value))
    job = group.RankGroup("cuda", timeout_s=300)
    assert job.backend == "nccl" and job.device == torch.device("cuda", 1)
    assert fake.calls == [("set_device", 1), ("init", "nccl", 300.0), ("new_group", "gloo")]
    assert job.control == "control-group" and not job.is_leader
    assert job.ranks == group.Ranks(rank=5, world_size=8, local_rank=1, local_world_size=4)


def test_cpu_processes_share_the_cores():
    assert group.default_threads(1) >= 1
    assert group.default_threads(10_000) == 1


TORCHRUN_ENV = {
    "TORCHELASTIC_RUN_ID": "job",
    "RANK": "3",
    "WORLD_SIZE": "4",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
}


def test_one_torchrun_detection_and_rank(monkeypatch):
    for name in TORCHRUN_ENV:
        monkeypatch.delenv(name, raising=False)
    assert not torchrun.launched_by_torchrun() and torchrun.torchrun_rank() is None
    monkeypatch.setenv("RANK", "3")  # set by others too (a user's shell, slurm scripts)
    assert torchrun.torchrun_rank() is None
    for name, value in TORCHRUN_ENV.items():
        monkeypatch.setenv(name, value)
    assert torchrun.launched_by_torchrun() and torchrun.torchrun_rank() == 3
