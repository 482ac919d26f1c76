"""The parent side of isolation: crashes and hangs of a child become results."""

import json
import os
import socket
import subprocess
import tempfile

import psutil

from trainperf.case.spec import make_case
from trainperf.launch.runner import ChildJob, child_environment, run_in_child
from trainperf.launch.sweep import SweepEvents, run_cases
from trainperf.store.database import Store


def test_abort_is_recorded_as_crashed(tmp_path, user_nets):
    case = make_case(model="flakynets:aborts", batch_size=2, image_size=8, steps="fixed:0:1")
    result = run_in_child(case, tmp_path)
    assert result["status"] == "crashed"
    assert "SIGABRT" in result["error"]["message"]
    assert result["case"] == case.model_dump()


def test_hang_is_killed_with_its_group(tmp_path, user_nets):
    case = make_case(model="flakynets:hangs", batch_size=2, image_size=8, timeout_s=4.0)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    result = run_in_child(case, tmp_path)
    assert result["status"] == "timeout"
    assert "no result after 4 s" in result["error"]["message"]
    after = {p.pid for p in psutil.Process().children(recursive=True)}
    assert after <= before


def test_every_result_is_stored_as_it_arrives(tmp_path, user_nets):
    cases = [
        make_case(model="flakynets:aborts", batch_size=2, image_size=8, runs=1),
        make_case(model="cifarnet", batch_size=2, image_size=8, steps="fixed:0:2", runs=1),
    ]
    system = {"fingerprint": "f" * 16, "hostname": "h"}
    seen = []
    with Store(tmp_path / "r.db") as store:

        def on_result(index, result):
            # stored (and committed) before the next case starts
            seen.append((result["status"], [r["status"] for r in store.results()]))

        events = SweepEvents(on_result=on_result)
        results = run_cases(cases, store, system, events=events)
    assert [r["status"] for r in results] == ["crashed", "ok"]  # in the order given
    assert [len(stored) for _, stored in seen] == [1, 2]
    assert all(status == stored[-1] for status, stored in seen)
    assert json.dumps(results)  # result documents stay JSON-serializable


def test_a_hang_without_timeout_ends_at_the_policy_default(tmp_path, user_nets, monkeypatch):
    from trainperf.measure import policy

    # The default, shrunk: 4 s + 2 x (0 s budget + 0 s x steps) for fixed:0:1.
    monkeypatch.setattr(policy, "START_ALLOWANCE_S", 4.0)
    monkeypatch.setattr(policy, "SLOW_STEP_S", 0.0)
    case = make_case(model="flakynets:hangs", batch_size=2, image_size=8, steps="fixed:0:1")
    assert case.timeout_s is None and case.run_timeout_s == 4.0
    result = run_in_child(case, tmp_path)
    assert result["status"] == "timeout"
    assert result["error"]["message"].startswith("no result after 4 s")
    assert result["case"]["timeout_s"] is None  # the case is stored as given


def test_a_given_timeout_wins_over_the_default():
    case = make_case(model="cifarnet", batch_size=2, steps="fixed:10:100", timeout_s=7.5)
    assert case.run_timeout_s == 7.5
    assert make_case(model="cifarnet", batch_size=2, steps="fixed:10:100").run_timeout_s > 3600


def _owner_file(directory, pid, host=None):
    directory.mkdir()
    owner = {"pid": pid, "pid_started": psutil.Process(pid).create_time()}
    (directory / "owner.json").write_text(
        json.dumps(owner | {"host": host or socket.gethostname()})
    )


def test_a_sweep_removes_the_temp_dirs_of_killed_trainperfs_only(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.Popen(["sleep", "60"])
    _owner_file(tmp_path / "trainperf-killed", gone.pid)
    _owner_file(tmp_path / "trainperf-other-host", gone.pid, host="elsewhere.example")
    gone.kill()
    gone.wait()
    _owner_file(tmp_path / "trainperf-living", os.getpid())
    (tmp_path / "trainperf-no-owner").mkdir()  # made by another tool: never ours to judge
    with Store(tmp_path / "r.db") as store:
        assert run_cases([], store, {"fingerprint": "f" * 16, "hostname": "h"}) == []
    left = sorted(p.name for p in tmp_path.glob("trainperf-*"))
    assert left == ["trainperf-living", "trainperf-no-owner", "trainperf-other-host"]


def test_every_worker_lets_the_case_precision_decide_float32_math(monkeypatch):
    """NVIDIA's PyTorch containers set TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 (TF32 matmuls
    whatever torch's flags say); a worker never inherits it."""
    monkeypatch.setenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "1")
    pytorch = ChildJob.of_case(make_case(model="cifarnet", batch_size=2))
    jax = ChildJob.of_case(make_case(model="cifarnet", batch_size=2, framework="jax"))
    for job in (pytorch, jax, ChildJob()):
        assert child_environment(job)["TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"] == "0"
    # A JAX worker allocates GPU memory on demand; a PyTorch worker has no JAX variable.
    assert child_environment(jax)["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert "JAX_PLATFORMS" not in dict(pytorch.env)
