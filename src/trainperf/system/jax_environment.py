"""The environment a JAX case's worker starts with, and how the worker starts JAX (imports
neither jax nor torch at module level: the runner reads it, and the worker calls
``start_jax`` before anything imports torch).

JAX reads these variables when it starts, so they are set on the child process, never in a
process that has already imported jax:
- ``JAX_PLATFORMS``: the case's platform only (``cpu`` or ``cuda``), so a CPU case on a GPU
  machine runs on the CPU and a CUDA case fails at once where jaxlib has no CUDA backend;
- ``XLA_FLAGS`` += ``--xla_force_host_platform_device_count=N``: N CPU devices in one
  process, for a data-parallel CPU case (parallel mesh over N devices); each is a share of
  the same cores, so this tests the parallel path rather than adding compute;
- ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` (``ON_DEMAND``), every JAX worker: XLA's GPU
  client otherwise takes 75% of each GPU's memory when it starts ("GPU memory allocation"
  in JAX's documentation), so that NVML's memory readings, torch, or a probe of the batch
  that fits would find the device full. Allocation then grows on demand, still up to
  XLA_PYTHON_CLIENT_MEM_FRACTION of the GPU (75% unless set: the BFC allocator's limit,
  XLA's gpu_helpers.cc), which the result records as ``xla_mem_limit_bytes``. The
  ``platform`` allocator (exact allocations, freed at once) is not used: it is slow, as
  JAX's documentation says, and would put cudaMalloc and cudaFree into the measured steps.
  ``allocator_settings`` reads back what the process runs with, for the result.

One framework's CUDA libraries per process: torch and jax[cuda] each bring their own
cuBLAS, cuDNN and NCCL, and in one process a library needed by its soname (libcudnn.so.9)
is the copy already loaded under that soname: whichever framework loads first decides the
other's. JAX's CUDA plugin loads its libraries when its backend starts and then checks
their versions against those it was built with (jax_plugins/cuda). ``start_jax`` starts
that backend before anything in the worker imports torch (whose import loads torch's
copies), so JAX gets and checks its own; the JAX worker then never initialises torch's
CUDA (trainperf.jax.benchmark), and a PyTorch worker never imports jax.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainperf.case.spec import Case

CPU_DEVICES_FLAG = "--xla_force_host_platform_device_count"
# Allocate GPU memory on demand (module doc); also for `trainperf system`'s JAX child.
ON_DEMAND = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


def worker_environment(case: Case, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Variables to add to the worker's environment for ``case`` (none for PyTorch)."""
    if case.framework != "jax":
        return {}
    env = {"JAX_PLATFORMS": case.device}  # a case's device names are JAX's platforms
    env |= ON_DEMAND
    if case.device == "cpu" and case.devices > 1:
        flags = environ.get("XLA_FLAGS", "").split()
        kept = [flag for flag in flags if not flag.startswith(CPU_DEVICES_FLAG)]
        env["XLA_FLAGS"] = " ".join([*kept, f"{CPU_DEVICES_FLAG}={case.devices}"])
    return env


def start_jax() -> None:
    """Start JAX's backends for the platforms of ``JAX_PLATFORMS`` now, loading its CUDA
    libraries before torch can load its own (module doc). A backend that fails to start is
    left for the case to report (trainperf.jax.step.case_devices says what to install)."""
    import jax

    with contextlib.suppress(RuntimeError):
        jax.devices()


def allocator_settings(environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """``xla_preallocate`` and ``xla_allocator``: how XLA's GPU client allocates in a process
    with ``environ``, read as jaxlib reads them (xla_client.generate_pjrt_gpu_plugin_options:
    preallocation unless XLA_PYTHON_CLIENT_PREALLOCATE is false, False or 0)."""
    preallocate = environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "")
    return {
        "xla_preallocate": preallocate not in ("false", "False", "0"),
        "xla_allocator": environ.get("XLA_PYTHON_CLIENT_ALLOCATOR", "default").lower(),
    }
