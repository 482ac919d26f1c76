"""One framework's CUDA libraries per process: a JAX case's worker starts JAX before
anything imports torch (whose import loads torch's cuBLAS, cuDNN and NCCL) and never
initialises torch's CUDA; a PyTorch case's worker never imports jax. Checked in real
worker processes started as the runner starts them, watched from inside."""

import json
import subprocess
import sys

import pytest

from trainperf.case.spec import make_case
from trainperf.launch.runner import ChildJob, child_environment, worker_command

# Runs trainperf.launch.worker, noting at torch's first import whether JAX's backends had started
# (jax._src.xla_bridge.backends_are_initialized, what jax.distributed checks), and at exit
# whether torch's CUDA was initialised and whether jax was imported.
WATCHER = """
import atexit, importlib.abc, json, runpy, sys

seen = {}

class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and "jax_started_before_torch" not in seen:
            bridge = sys.modules.get("jax._src.xla_bridge")
            seen["jax_started_before_torch"] = bool(bridge and bridge.backends_are_initialized())
        return None

sys.meta_path.insert(0, Watch())
watch_path = sys.argv.pop()

@atexit.register
def report():
    torch = sys.modules.get("torch")
    seen["torch_cuda_initialized"] = bool(torch and torch.cuda.is_initialized())
    seen["jax_imported"] = "jax" in sys.modules
    with open(watch_path, "w") as f:
        json.dump(seen, f)

runpy.run_module("trainperf.launch.worker", run_name="__main__", alter_sys=True)
"""

TINY = {"model": "cifarnet", "batch_size": 2, "image_size": 16, "steps": "fixed:1:2"}


def watched_worker(case, tmp_path):
    """Run ``case`` in a worker as the runner would; return its result and what was seen."""
    (tmp_path / "case.json").write_text(case.model_dump_json())
    command = worker_command(tmp_path / "case.json", tmp_path / "result.json")
    watch = tmp_path / "watch.json"
    script = tmp_path / "watcher.py"
    script.write_text(WATCHER)
    done = subprocess.run(
        [sys.executable, str(script), *command[3:], str(watch)],
        env=child_environment(ChildJob.of_case(case)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads((tmp_path / "result.json").read_text()), json.loads(watch.read_text())


@pytest.mark.parametrize("framework", ["jax", "pytorch"])
def test_each_worker_loads_one_frameworks_cuda_libraries(framework, tmp_path):
    result, seen = watched_worker(make_case(**TINY, framework=framework), tmp_path)
    assert result["status"] == "ok", result.get("error")
    assert seen["torch_cuda_initialized"] is False
    if framework == "jax":
        assert seen["jax_started_before_torch"] is True
        assert result["device"]["xla_preallocate"] is False  # the worker's on-demand memory
    else:
        assert seen["jax_imported"] is False
