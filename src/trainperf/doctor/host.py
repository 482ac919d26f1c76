"""Host checks of ``trainperf doctor``: the CPU's frequency policy, what else runs, where this
process may run, memory, disk, container limits, software versions and environment.

Every file is read under ``root`` (``/`` on a machine, a temporary tree in the tests), and
nothing samples over time: the whole set takes a few milliseconds once torch is imported,
since it runs at the start of every sweep. The checks of memory, disk and containers are in
trainperf.doctor.host_limits, those of software and environment in
trainperf.doctor.host_software; docs/doctor.md lists every check with its source.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from trainperf.doctor.checks import OK, WARN, Check, absent
from trainperf.doctor.host_limits import (
    cgroup_cpu_check,
    cgroup_memory_check,
    disk_check,
    swap_check,
    thp_check,
)
from trainperf.doctor.host_software import env_check, threads_check, version_checks
from trainperf.system.files import parse_cpulist, read_file
from trainperf.system.inventory import numa_nodes

CPU = "sys/devices/system/cpu"
# /proc/<pid>/stat flags: a kernel thread (include/linux/sched.h)
_PF_KTHREAD = 0x00200000
# A process counts as busy when it is running now and has used at least half a CPU on
# average since it started: a compute job, not a daemon woken for a moment.
BUSY_CPU_SHARE = 0.5


def host_checks(
    *, root: Path = Path("/"), environ: Mapping[str, str] = os.environ, db: Path | None = None
) -> list[Check]:
    """The host checks, in the order the report prints them. ``db``: the store whose disk
    is checked for room (None: the default store, trainperf.db in the current directory)."""
    status = proc_status(root)
    allowed = allowed_cpus(root, status)
    return [
        governor_check(root),
        turbo_check(root),
        smt_check(root),
        isolated_check(root, allowed),
        load_check(root),
        busy_check(root),
        *numa_checks(root, status, allowed),
        thp_check(root),
        swap_check(root),
        disk_check(db),
        cgroup_cpu_check(root, allowed),
        cgroup_memory_check(root),
        *version_checks(),
        env_check(environ),
        threads_check(environ, allowed),
    ]


def proc_status(root: Path) -> dict[str, str]:
    """The fields of /proc/self/status ({} when it cannot be read)."""
    text = read_file(root / "proc/self/status") or ""
    fields = (line.partition(":") for line in text.splitlines())
    return {key: value.strip() for key, sep, value in fields if sep}


def allowed_cpus(root: Path, status: Mapping[str, str]) -> set[int] | None:
    """The CPUs this process may run on (its affinity, cpusets included), None if unknown."""
    if "Cpus_allowed_list" in status:
        return parse_cpulist(status["Cpus_allowed_list"])
    if root == Path("/") and hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return None


def _cpu_names(cpus: set[int]) -> str:
    """{0, 1, 2, 5} -> '0-2,5'."""
    runs: list[list[int]] = []
    for cpu in sorted(cpus):
        if runs and cpu == runs[-1][-1] + 1:
            runs[-1].append(cpu)
        else:
            runs.append([cpu])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


# --- frequency policy -------------------------------------------------------------------


def governor_check(root: Path) -> Check:
    """host.governor: every CPU's cpufreq governor; anything but ``performance`` warns."""
    why = (
        "a governor other than performance lowers the clock when the CPU looks idle (the"
        " host waiting on a GPU, a data loader between batches): step times move with it"
    )
    pattern = f"{root / CPU}/cpu*/cpufreq/scaling_governor"
    found = Counter(
        governor
        for path in (root / CPU).glob("cpu[0-9]*/cpufreq/scaling_governor")
        if (governor := read_file(path))
    )
    if not found:
        reason = f"no cpufreq in this machine or container ({pattern})"
        return absent("host.governor", reason, why, condition=True)
    value = ", ".join(sorted(found))
    seen = ", ".join(f"{name} on {count} CPUs" for name, count in sorted(found.items()))
    if set(found) == {"performance"}:
        return Check("host.governor", OK, seen, why, value=value, condition=True)
    fix = "sudo cpupower frequency-set -g performance"
    return Check("host.governor", WARN, seen, why, fix, value, condition=True)


def turbo_check(root: Path) -> Check:
    """host.turbo: turbo/boost on or off (intel_pstate/no_turbo, cpufreq/boost). Either
    state is ok: it is reported as a condition so that two systems differing in it are
    not compared as if only their hardware differed."""
    why = (
        "turbo raises the clock while power and temperature allow: faster, but a result"
        " then depends on cooling and on how many cores are busy; compare like with like"
    )
    no_turbo = root / CPU / "intel_pstate/no_turbo"
    boost = root / CPU / "cpufreq/boost"
    if (text := read_file(no_turbo)) in ("0", "1"):
        state, source = ("off" if text == "1" else "on"), no_turbo
    elif (text := read_file(boost)) in ("0", "1"):
        state, source = ("on" if text == "1" else "off"), boost
    else:
        reason = f"no turbo control in this machine or container (no {no_turbo} nor {boost})"
        return absent("host.turbo", reason, why, condition=True)
    return Check("host.turbo", OK, f"turbo {state} ({source})", why, value=state, condition=True)


def smt_check(root: Path) -> Check:
    """host.smt: simultaneous multithreading (hyper-threads) active or not; a condition."""
    why = (
        "with SMT two threads share a core's units: torch's CPU threads and the data"
        " loaders then run at a different speed than on as many real cores"
    )
    smt = root / CPU / "smt"
    active, control = read_file(smt / "active"), read_file(smt / "control")
    if active is None and control is None:
        return absent("host.smt", f"no SMT control in this kernel ({smt})", why, condition=True)
    value = control or ("on" if active == "1" else "off")
    seen = f"SMT control {control or 'unknown'}, active {active or 'unknown'}"
    return Check("host.smt", OK, seen, why, value=value, condition=True)


def isolated_check(root: Path, allowed: set[int] | None) -> Check:
    """host.isolated_cpus: CPUs the kernel keeps the scheduler off (isolcpus); a condition."""
    why = (
        "isolated CPUs run only what is pinned there: a benchmark pinned to them meets no"
        " other task (pyperf's advice), one outside them shares the rest"
    )
    path = root / CPU / "isolated"
    text = read_file(path)
    if text is None:
        return absent("host.isolated_cpus", f"no {path} (kernel too old?)", why, condition=True)
    isolated = parse_cpulist(text)
    if not isolated:
        return Check("host.isolated_cpus", OK, "no isolated CPU", why, value="", condition=True)
    inside = "" if allowed is None else f"; this process may use {len(allowed & isolated)}"
    seen = f"isolated CPUs {_cpu_names(isolated)}{inside}"
    return Check("host.isolated_cpus", OK, seen, why, value=_cpu_names(isolated), condition=True)


# --- what else runs ---------------------------------------------------------------------


def online_cpus(root: Path) -> int | None:
    text = read_file(root / CPU / "online")
    return len(parse_cpulist(text)) if text else os.cpu_count() if root == Path("/") else None


def load_check(root: Path) -> Check:
    """host.load: the 1-minute load average; warns above 1 (this process) plus a tenth of
    the CPUs (at least half a CPU): something else is computing."""
    why = (
        "other work on the machine takes CPU time, memory bandwidth and PCIe from the"
        " benchmark: its share moves the step times from one run to the next"
    )
    path = root / "proc/loadavg"
    fields = (read_file(path) or "").split()
    cpus = online_cpus(root)
    if len(fields) < 3 or not cpus:
        return absent("host.load", f"no load average ({path} or the CPU count unreadable)", why)
    load1, load5 = float(fields[0]), float(fields[1])
    limit = 1 + max(0.5, cpus / 10)
    seen = f"load average {load1:.2f} (1 min), {load5:.2f} (5 min) on {cpus} CPUs"
    if load1 <= limit:
        return Check("host.load", OK, seen, why, value=load1)
    fix = "top -o %CPU  # find what runs; wait for it to end, or stop it"
    return Check("host.load", WARN, f"{seen}: above {limit:g}", why, fix, load1)


def _stat(path: Path) -> tuple[str, str, int, int, int, int] | None:
    """(name, state, ppid, flags, CPU ticks, start ticks) of a /proc/<pid>/stat (proc(5)),
    None if the process is gone."""
    text = read_file(path)
    if not text or ")" not in text:
        return None
    head, _, tail = text.rpartition(")")
    rest = tail.split()
    try:
        ticks = int(rest[11]) + int(rest[12])  # utime + stime
        name = head.partition("(")[2]
        return name, rest[0], int(rest[1]), int(rest[6]), ticks, int(rest[19])
    except (IndexError, ValueError):
        return None


def _lineage(stats: Mapping[int, tuple], pid: int) -> set[int]:
    """``pid`` and its ancestors (the shell, a Slurm step, pytest...)."""
    lineage = set()
    while pid > 0 and pid not in lineage:
        lineage.add(pid)
        pid = stats[pid][2] if pid in stats else 0
    return lineage


def busy_check(root: Path) -> Check:
    """host.busy_processes: processes running now that have used at least half a CPU on
    average since they started (this process and its parents excluded), from
    /proc/<pid>/stat: no sampling, so it costs milliseconds."""
    why = (
        "a process computing beside the benchmark takes cores and memory bandwidth: the"
        " benchmark measures what is left of the machine, not the machine"
    )
    proc = root / "proc"
    uptime = (read_file(proc / "uptime") or "").split()
    if not uptime:
        return absent("host.busy_processes", f"no {proc / 'uptime'} (not Linux?)", why)
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    stats = {
        int(path.parent.name): found for path in proc.glob("[0-9]*/stat") if (found := _stat(path))
    }
    mine = _lineage(stats, os.getpid())
    busy = []
    for pid, (name, state, _, flags, ticks, start) in sorted(stats.items()):
        age_s = float(uptime[0]) - start / hz
        if state != "R" or pid in mine or flags & _PF_KTHREAD or age_s <= 0:
            continue
        share = ticks / hz / age_s
        if share >= BUSY_CPU_SHARE:
            busy.append({"pid": pid, "name": name, "cpu_share": round(share, 2)})
    if not busy:
        seen = f"no other process computing ({len(stats)} processes looked at)"
        return Check("host.busy_processes", OK, seen, why, value=[])
    named = ", ".join(f"{p['name']} ({p['pid']}, {p['cpu_share']:.0%} CPU)" for p in busy[:5])
    more = f" and {len(busy) - 5} more" if len(busy) > 5 else ""
    fix = f"kill {' '.join(str(p['pid']) for p in busy)}  # if they are yours to stop"
    return Check("host.busy_processes", WARN, f"running: {named}{more}", why, fix, busy)


# --- NUMA -------------------------------------------------------------------------------


def numa_checks(root: Path, status: Mapping[str, str], allowed: set[int] | None) -> list[Check]:
    """host.numa_cpus and host.numa_memory: on a machine of several NUMA nodes, a process
    that may run (or allocate) on more than one of them warns."""
    why_cpus = (
        "threads spread over NUMA nodes reach memory and the GPU's PCIe root through the"
        " socket interconnect: slower, and different from one run to the next"
    )
    why_memory = (
        "memory allocated on another node than the threads using it is read across the"
        " interconnect: host-to-device copies and CPU steps slow down"
    )
    nodes = numa_nodes(root)
    if not nodes:
        reason = f"no {root / 'sys/devices/system/node'} (a kernel without NUMA)"
        return [
            absent("host.numa_cpus", reason, why_cpus, condition=True),
            absent("host.numa_memory", reason, why_memory, condition=True),
        ]
    cpus_of = {n["node"]: parse_cpulist(n.get("cpus") or "") for n in nodes}
    cpu_nodes = None if allowed is None else sorted(n for n, c in cpus_of.items() if c & allowed)
    mems = status.get("Mems_allowed_list")
    mem_nodes = None if mems is None else sorted(parse_cpulist(mems) & set(cpus_of))
    fix = f"numactl --cpunodebind={nodes[0]['node']} --membind={nodes[0]['node']} trainperf ..."
    return [
        _numa_check("host.numa_cpus", "run on the CPUs of", cpu_nodes, len(nodes), why_cpus, fix),
        _numa_check(
            "host.numa_memory", "allocate memory on", mem_nodes, len(nodes), why_memory, fix
        ),
    ]


def _numa_check(
    name: str, verb: str, used: list[int] | None, count: int, why: str, fix: str
) -> Check:
    if used is None:
        return absent(name, "no Cpus_allowed_list/Mems_allowed_list in /proc/self/status", why)
    listed = ", ".join(str(node) for node in used) or "none"
    seen = f"may {verb} NUMA node{'s' if len(used) > 1 else ''} {listed} (of {count})"
    if count == 1 or len(used) <= 1:
        return Check(name, OK, seen, why, value=used, condition=True)
    fix += "  # the node of the GPU used: nvidia-smi topo -m"
    return Check(name, WARN, seen, why, fix, used, condition=True)
