"""Host checks of software and environment (part of trainperf.doctor.host): the versions
that MLPerf's system description asks for (os, framework, other software stack), the
environment variables that change results, and thread counts against the CPUs at hand.

The versions are trainperf.system.inventory's (torch's own CUDA, cuDNN and NCCL; JAX's packages by
importlib.metadata: importing jax here would load its CUDA libraries beside torch's).
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from typing import Any

from trainperf.core.limits import ascii_digits
from trainperf.doctor.checks import OK, WARN, Check, absent
from trainperf.system.inventory import environment, software_versions

_VERSION_WHY = {
    "os": "the kernel and its drivers decide scheduling, memory and I/O paths",
    "python": "the interpreter runs the training loop: its overheads are in every step",
    "torch": "the framework's kernels, autograd and allocator change between releases",
    "cuda": "the CUDA runtime and its libraries (cuBLAS) pick the GPU kernels",
    "cudnn": "cuDNN's convolution and attention kernels differ between versions",
    "nccl": "NCCL's algorithms decide collective bandwidth in multi-GPU cases",
    "jax": "the JAX backend's results depend on jax, jaxlib and XLA's version",
}
# Debugging switches that slow training down when left set.
SLOW_SWITCHES = {
    "CUDA_LAUNCH_BLOCKING": "every kernel launch waits for the kernel to finish",
    "PYTORCH_NO_CUDA_MEMORY_CACHING": "every tensor is a cudaMalloc and cudaFree",
}
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def version_checks() -> list[Check]:
    """host.os, host.python, host.torch, host.cuda, host.cudnn, host.nccl, host.jax: each a
    condition; absent where this machine has none (the reason says why)."""
    software = software_versions()
    software["os"] = f"{platform.system()} {platform.release()}"
    if "jax" in software:  # jaxlib carries XLA: both belong to the version compared
        software["jax"] = f"{software['jax']}, jaxlib {software.get('jaxlib', 'absent')}"
    checks = []
    for key, why in _VERSION_WHY.items():
        name, value = f"host.{key}", software.get(key)
        if value is None:
            reason = software.get(f"{key}_absent_reason", "not reported")
            checks.append(absent(name, reason, why, condition=True))
        else:
            checks.append(Check(name, OK, f"{key} {value}", why, value=value, condition=True))
    return checks


def env_check(environ: Mapping[str, str]) -> Check:
    """host.env: the variables that change results that are set (a condition); warns when a
    debugging switch that slows training is on (CUDA_LAUNCH_BLOCKING=1...)."""
    why = (
        "thread counts, visible devices, NCCL's transport and the allocator's settings"
        " change step times: two systems compared must differ only in what is meant"
    )
    env = environment(environ)
    seen = ", ".join(f"{k}={v}" for k, v in env.items()) or "none of them set"
    slow = [k for k in SLOW_SWITCHES if env.get(k, "0") not in ("", "0")]
    if not slow:
        return Check("host.env", OK, seen, why, value=env, condition=True)
    said = "; ".join(f"{k}: {SLOW_SWITCHES[k]}" for k in slow)
    fix = f"unset {' '.join(slow)}"
    return Check("host.env", WARN, f"{seen} ({said})", why, fix, env, condition=True)


def _thread_count(text: str) -> int | None:
    """OMP_NUM_THREADS's first level ('8' or '8,2' for nested), None if not a count."""
    first = text.split(",")[0].strip()
    return int(first) if ascii_digits(first) and int(first) > 0 else None


def threads_check(environ: Mapping[str, str], allowed: set[int] | None) -> Check:
    """host.threads: OMP_NUM_THREADS or MKL_NUM_THREADS above the CPUs this process may
    use, or not a count, warns (unset is fine: torch sizes its pool itself)."""
    why = (
        "more compute threads than CPUs makes them wait for each other at every parallel"
        " region; torch's CPU kernels and the data loaders then slow down"
    )
    set_ = {k: environ[k] for k in _THREAD_VARIABLES if k in environ}
    cpus = len(allowed) if allowed else None
    on = f" on {cpus} CPUs this process may use" if cpus else ""
    if not set_:
        return Check("host.threads", OK, f"no thread count set{on}", why, value={})
    value: dict[str, Any] = {"cpus": cpus, **set_}
    seen = ", ".join(f"{k}={v}" for k, v in set_.items()) + on
    counts = {k: _thread_count(v) for k, v in set_.items()}
    bad = [k for k, n in counts.items() if n is None or (cpus is not None and n > cpus)]
    if not bad:
        return Check("host.threads", OK, seen, why, value=value)
    fix = " ".join(f"export {k}={cpus or 1};" for k in bad)
    return Check("host.threads", WARN, f"{seen}: too many or not a count", why, fix, value)
