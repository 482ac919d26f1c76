"""Host checks of memory, disk and container limits (part of trainperf.doctor.host):
transparent huge pages, swap in use, room for the store, cgroup CPU and memory limits.

Files are read under ``root``. cgroup v2 (one hierarchy at /sys/fs/cgroup) and v1 (one
per controller, /sys/fs/cgroup/cpu,cpuacct/...) are both read; the limit that holds is the
smallest along the path from this process's cgroup up to the root of the hierarchy.
"""

from __future__ import annotations

import math
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

from trainperf.core.limits import ascii_digits
from trainperf.doctor.checks import OK, WARN, Check, absent
from trainperf.store.schema import DEFAULT_DB
from trainperf.system.files import read_file, read_int

GIB = 2**30
# Room the store's disk should have: a sweep stores its results and runs (kilobytes each),
# but SQLite's write-ahead log, a migration or VACUUM rewrite the database (up to twice
# its size), and profiler traces and recovery files land beside it.
MIN_FREE_BYTES = GIB
# cgroup v1 writes "no limit" as the largest page-aligned 64-bit value (9223372036854771712)
_V1_UNLIMITED = 2**62


def _bracketed(text: str | None) -> str | None:
    """'always [madvise] never' -> 'madvise' (the selected choice of a sysfs switch)."""
    found = re.search(r"\[([^\]]+)\]", text or "")
    return found.group(1) if found else None


def thp_check(root: Path) -> Check:
    """host.thp: transparent huge pages' ``enabled`` and ``defrag``; a condition. Warns when
    defrag is ``always``: an allocation then stalls for compaction (the kernel's
    admin-guide/mm/transhuge), a step time outlier at any time."""
    why = (
        "huge pages change the cost of the host's allocations and page faults (pinned"
        " buffers, data loaders); synchronous compaction stalls the allocating thread"
    )
    thp = root / "sys/kernel/mm/transparent_hugepage"
    enabled, defrag = (_bracketed(read_file(thp / f)) for f in ("enabled", "defrag"))
    if enabled is None:
        return absent(
            "host.thp", f"no transparent huge pages ({thp / 'enabled'})", why, condition=True
        )
    value = {"enabled": enabled, "defrag": defrag}
    seen = f"enabled {enabled}, defrag {defrag or 'unknown'}"
    if defrag != "always":
        return Check("host.thp", OK, seen, why, value=value, condition=True)
    fix = f"echo madvise | sudo tee {Path('/') / thp.relative_to(root) / 'defrag'}"
    return Check("host.thp", WARN, seen, why, fix, value, condition=True)


def meminfo(root: Path) -> dict[str, int]:
    """/proc/meminfo in bytes ({} when it cannot be read)."""
    fields = {}
    for line in (read_file(root / "proc/meminfo") or "").splitlines():
        found = re.match(r"(\w+):\s+(\d+)(?: kB)?", line)
        if found:
            fields[found.group(1)] = int(found.group(2)) * (1024 if "kB" in line else 1)
    return fields


def swap_check(root: Path) -> Check:
    """host.swap: swap in use (SwapTotal - SwapFree of /proc/meminfo) warns."""
    why = (
        "pages in swap are read back from disk when touched: a data loader or the"
        " optimizer's host state stalls for milliseconds, and the machine is short of memory"
    )
    memory = meminfo(root)
    if "SwapTotal" not in memory or "SwapFree" not in memory:
        return absent("host.swap", f"no SwapTotal/SwapFree in {root / 'proc/meminfo'}", why)
    total, used = memory["SwapTotal"], memory["SwapTotal"] - memory["SwapFree"]
    if not total:
        return Check("host.swap", OK, "no swap configured", why, value=0)
    seen = f"{used / 2**20:,.0f} MiB of {total / 2**20:,.0f} MiB swap in use"
    if not used:
        return Check("host.swap", OK, seen, why, value=0)
    fix = "sudo swapoff -a && sudo swapon -a  # brings pages back to RAM; needs free memory"
    return Check("host.swap", WARN, seen, why, fix, used)


def disk_check(db: Path | None) -> Check:
    """host.disk: free space where the store is (``db``, or trainperf.db in the current
    directory); warns below the larger of 1 GiB and twice the database's size."""
    why = (
        "a full disk stops the store: SQLite cannot grow its log, results wait and then go"
        " to a recovery file, and a migration or VACUUM needs room for a second copy"
    )
    path = Path(DEFAULT_DB if db is None else db).absolute()
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        free = shutil.disk_usage(folder).free
        size = sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.is_file())
    except OSError as error:
        return absent("host.disk", f"cannot read the free space of {folder}: {error}", why)
    need = max(MIN_FREE_BYTES, 2 * size)
    seen = f"{free / GIB:,.1f} GiB free for {path} (database {size / 2**20:,.1f} MiB)"
    if free >= need:
        return Check("host.disk", OK, seen, why, value=free)
    fix = f"df -h {folder}; trainperf --db OTHER_DISK/trainperf.db ...  # or free some space"
    return Check("host.disk", WARN, f"{seen}: below {need / GIB:,.1f} GiB", why, fix, free)


# --- cgroups ----------------------------------------------------------------------------


def _cgroup_dirs(root: Path, controller: str) -> Iterator[Path]:
    """The cgroup folders of this process for ``controller``, from its own up to the
    hierarchy's root: v2 when /sys/fs/cgroup is the unified hierarchy, else v1."""
    base = root / "sys/fs/cgroup"
    lines = [
        line.split(":", 2) for line in (read_file(root / "proc/self/cgroup") or "").splitlines()
    ]
    if (base / "cgroup.controllers").is_file():
        paths = [path for hid, _, path in lines if hid == "0"] or ["/"]
        mount = base
    else:
        paths = [path for _, names, path in lines if controller in names.split(",")]
        named = [base / names for _, names, _ in lines if controller in names.split(",")]
        mount = next((m for m in named if m.is_dir()), base / controller)
        paths = paths or ["/"]
    here = mount / paths[0].lstrip("/")
    # inside a container's cgroup namespace the path may name the host's hierarchy
    here = here if here.is_dir() else mount
    while True:
        yield here
        if here == mount:
            return
        here = here.parent


def cpu_quota(root: Path) -> tuple[float | None, Path] | None:
    """(the CPUs that the cgroup CPU quota allows, or None for no limit; the file read), or
    None when no CPU controller is visible."""
    limits, source = [], None
    for folder in _cgroup_dirs(root, "cpu"):
        v2 = read_file(folder / "cpu.max")
        quota, period = (v2.split() + ["100000"])[:2] if v2 else (None, None)
        if v2 is None:
            quota_us = read_int(folder / "cpu.cfs_quota_us")
            period_us = read_int(folder / "cpu.cfs_period_us")
            if quota_us is None or not period_us:
                continue
            quota, period = (str(quota_us) if quota_us > 0 else "max"), str(period_us)
            source = source or folder / "cpu.cfs_quota_us"
        else:
            source = source or folder / "cpu.max"
        if quota != "max":
            limits.append(int(quota) / int(period))
    return None if source is None else (min(limits, default=None), source)


def cgroup_cpu_check(root: Path, allowed: set[int] | None) -> Check:
    """host.cgroup_cpu: a CPU quota (v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us)
    below the CPUs this process sees warns; the quota is a condition."""
    why = (
        "torch and the data loaders start one thread per CPU they see; a quota of fewer"
        " CPUs throttles them all in turn, so steps stall at every quota period"
    )
    found = cpu_quota(root)
    cpus = len(allowed) if allowed else None
    if found is None:
        reason = f"no cgroup CPU controller visible ({root / 'sys/fs/cgroup'})"
        return absent("host.cgroup_cpu", reason, why, condition=True)
    quota, source = found
    cpuset = read_file(source.parent / "cpuset.cpus.effective")
    value = {"quota_cpus": quota if quota is not None else "max", "cpuset": cpuset}
    sees = f"; this process sees {cpus} CPUs" if cpus else ""
    limit = f"CPU quota {quota:g} CPUs" if quota is not None else "no CPU quota"
    seen = f"{limit} ({source}){sees}"
    if quota is None or cpus is None or quota >= cpus:
        return Check("host.cgroup_cpu", OK, seen, why, value=value, condition=True)
    threads = max(1, math.floor(quota))
    fix = f"export OMP_NUM_THREADS={threads}  # or raise the limit: docker run --cpus {cpus}"
    return Check("host.cgroup_cpu", WARN, seen, why, fix, value, condition=True)


def memory_limit(root: Path) -> tuple[int | None, Path] | None:
    """(the cgroup memory limit in bytes, None for none; the file read), or None when no
    memory controller is visible."""
    limits, source = [], None
    for folder in _cgroup_dirs(root, "memory"):
        for name in ("memory.max", "memory.limit_in_bytes"):
            text = read_file(folder / name)
            if text is not None:
                source = source or folder / name
                if ascii_digits(text) and int(text) < _V1_UNLIMITED:
                    limits.append(int(text))
                break
    return None if source is None else (min(limits, default=None), source)


def cgroup_memory_check(root: Path) -> Check:
    """host.cgroup_memory: a cgroup memory limit (v2 memory.max, v1 memory.limit_in_bytes)
    below the machine's memory warns; the limit is a condition."""
    why = (
        "a process over its cgroup's memory limit is killed (or reclaimed hard) before the"
        " machine's memory is used: data loaders and the largest batch differ from the host"
    )
    found = memory_limit(root)
    if found is None:
        reason = f"no cgroup memory controller visible ({root / 'sys/fs/cgroup'})"
        return absent("host.cgroup_memory", reason, why, condition=True)
    limit, source = found
    total = meminfo(root).get("MemTotal")
    machine = f"the machine has {total / GIB:,.1f} GiB" if total else "no MemTotal"
    limited = "no memory limit" if limit is None else f"memory limit {limit / GIB:,.1f} GiB"
    seen = f"{limited}, {machine} ({source})"
    if limit is None or total is None or limit >= total:
        return Check("host.cgroup_memory", OK, seen, why, value=limit or "max", condition=True)
    fix = f"docker run --memory {math.ceil(total / GIB)}g ...  # or the job's memory request"
    return Check("host.cgroup_memory", WARN, seen, why, fix, limit, condition=True)
