"""The environment a JAX case's worker starts with (read by the runner; imports no jax).

JAX reads these when it starts, so they are set on the child process, never in a process
that has already imported jax:
- ``JAX_PLATFORMS``: the case's platform only (``cpu`` or ``cuda``), so a CPU case on a GPU
  machine runs on the CPU and a CUDA case fails at once where jaxlib has no CUDA backend;
- ``XLA_FLAGS`` += ``--xla_force_host_platform_device_count=N``: N CPU devices in one
  process, for a data-parallel CPU case (parallel mesh over N devices); each is a share of
  the same cores, so this tests the parallel path rather than adding compute.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from trainperf.case import Case

CPU_DEVICES_FLAG = "--xla_force_host_platform_device_count"


def worker_environment(case: Case, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Variables to add to the worker's environment for ``case`` (none for PyTorch)."""
    if case.framework != "jax":
        return {}
    env = {"JAX_PLATFORMS": case.device}  # a case's device names are JAX's platforms
    if case.device == "cpu" and case.devices > 1:
        flags = environ.get("XLA_FLAGS", "").split()
        kept = [flag for flag in flags if not flag.startswith(CPU_DEVICES_FLAG)]
        env["XLA_FLAGS"] = " ".join([*kept, f"{CPU_DEVICES_FLAG}={case.devices}"])
    return env
