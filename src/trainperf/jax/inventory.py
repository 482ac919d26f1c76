"""What JAX sees, printed as JSON by a child process: ``python -m trainperf.jax.inventory``.

`trainperf system` (trainperf.system.inventory.jax_devices) runs this module in a child process of
its own, with XLA's on-demand allocation (trainperf.system.jax_environment.ON_DEMAND): starting
JAX's backends in trainperf's process would load JAX's CUDA libraries beside torch's, and
take GPU memory. It prints ``{"devices": [...], "cuda": {...}}``:

- ``devices``: ``{id, platform, kind}`` of each device of JAX's default backend;
- ``cuda``: the CUDA stack of JAX's CUDA plugin, as its ``_versions`` module reports it
  (the module JAX itself checks its libraries with, jax_plugins/cuda: ``jax_cuda13_plugin``,
  ``jax_cuda12_plugin`` or a jaxlib built with CUDA): ``cuda`` the CUDA runtime loaded
  ("12.8", as torch.version.cuda writes it) and ``cuda_build`` the one JAX was built
  against; ``cudnn`` and ``cudnn_build`` as integers (90800 is 9.8.0, as
  torch.backends.cudnn.version() gives them); ``cublas`` and ``cublas_build`` likewise
  (120804 is 12.8.4) where the plugin reports them. JAX's NCCL is absent: the plugin does
  not report its version. Each absent value has ``<key>_absent_reason``; without the plugin
  the whole section is absent, with ``cuda_absent_reason``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

# Where JAX's CUDA plugin keeps its versions module, in the order JAX looks.
VERSION_MODULES = (
    "jax_cuda13_plugin._versions",
    "jax_cuda12_plugin._versions",
    "jaxlib.cuda._versions",
)
NO_NCCL = "JAX's CUDA plugin does not report the NCCL version it loads"


def versions_module() -> ModuleType | None:
    """JAX's CUDA plugin's versions module, or None where jaxlib has no CUDA plugin."""
    for name in VERSION_MODULES:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


def cuda_release(version: int) -> str:
    """12080 (cudaRuntimeGetVersion: 1000 x major + 10 x minor) -> '12.8'."""
    return f"{version // 1000}.{version % 1000 // 10}"


def cuda_versions(module: Any) -> dict[str, Any]:
    """The CUDA stack ``module`` (the plugin's versions module, or a fake) reports."""
    out: dict[str, Any] = {}

    def read(key: str, name: str, show: Callable[[int], Any] = int) -> None:
        call = getattr(module, name, None)
        if call is None:
            out[f"{key}_absent_reason"] = f"this JAX CUDA plugin has no {name}"
            return
        try:
            out[key] = show(call())
        except Exception as exc:  # the library is not there, or not loadable
            out[f"{key}_absent_reason"] = f"{name} failed: {exc}"

    read("cuda", "cuda_runtime_get_version", cuda_release)
    read("cuda_build", "cuda_runtime_build_version", cuda_release)
    read("cudnn", "cudnn_get_version")
    read("cudnn_build", "cudnn_build_version")
    read("cublas", "cublas_get_version")
    read("cublas_build", "cublas_build_version")
    out["nccl_absent_reason"] = NO_NCCL
    return out


def inventory() -> dict[str, Any]:
    """JAX's devices and CUDA stack (module doc); starts JAX's backends."""
    import jax

    devices = [{"id": d.id, "platform": d.platform, "kind": d.device_kind} for d in jax.devices()]
    found: dict[str, Any] = {"devices": devices}
    module = versions_module()
    if module is None:
        found["cuda_absent_reason"] = "this jaxlib has no CUDA plugin (pip install 'jax[cuda12]')"
    else:
        found["cuda"] = cuda_versions(module)
    return found


if __name__ == "__main__":
    from trainperf.core import strict_json

    print(strict_json.dumps(inventory()))
