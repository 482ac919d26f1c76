"""The host checks of ``trainperf doctor``, each read from a fake /sys and /proc in tmp_path:
its ok branch, its warning branch where it has one, and its absent branch."""

import json
import os
from pathlib import Path

import pytest

from trainperf.doctor import host, host_limits, host_software
from trainperf.doctor.checks import ABSENT, OK, STATUSES, WARN, Check
from trainperf.doctor.host import host_checks

GIB = 2**30
HZ = os.sysconf("SC_CLK_TCK")


def tree(root: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (path under root -> text) and return root."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def stat(pid, name, state, ppid, *, flags=0, cpu_s=0.0, start_s=0.0):
    """A /proc/<pid>/stat line (proc(5)): utime is field 14, starttime field 22."""
    fields = [state, ppid, 0, 0, 0, 0, flags, 0, 0, 0, 0, int(cpu_s * HZ), 0, 0, 0, 20, 0, 1]
    return f"{pid} ({name}) {' '.join(map(str, fields))} 0 {int(start_s * HZ)} 0 0\n"


CPU = "sys/devices/system/cpu"


def test_governor(tmp_path):
    performance = tree(
        tmp_path / "a", {f"{CPU}/cpu{i}/cpufreq/scaling_governor": "performance" for i in range(4)}
    )
    check = host.governor_check(performance)
    assert (check.status, check.value, check.condition) == (OK, "performance", True)
    mixed = tree(
        tmp_path / "b",
        {
            f"{CPU}/cpu0/cpufreq/scaling_governor": "performance",
            f"{CPU}/cpu1/cpufreq/scaling_governor": "powersave",
        },
    )
    check = host.governor_check(mixed)
    assert (check.status, check.value) == (WARN, "performance, powersave")
    assert "cpupower frequency-set -g performance" in check.fix
    assert "powersave on 1 CPUs" in check.seen
    check = host.governor_check(tmp_path / "none")
    assert (
        check.status == ABSENT and "no cpufreq" in check.seen and "scaling_governor" in check.seen
    )


def test_turbo_is_a_condition_either_way(tmp_path):
    off = host.turbo_check(tree(tmp_path / "a", {f"{CPU}/intel_pstate/no_turbo": "1"}))
    on = host.turbo_check(tree(tmp_path / "b", {f"{CPU}/cpufreq/boost": "1"}))
    boost_off = host.turbo_check(tree(tmp_path / "c", {f"{CPU}/cpufreq/boost": "0"}))
    assert [(c.status, c.value) for c in (off, on, boost_off)] == [
        (OK, "off"),
        (OK, "on"),
        (OK, "off"),
    ]
    assert all(c.condition for c in (off, on))
    missing = host.turbo_check(tmp_path / "none")
    assert missing.status == ABSENT and "no_turbo" in missing.seen and missing.condition


def test_smt_and_isolated_cpus(tmp_path):
    root = tree(
        tmp_path, {f"{CPU}/smt/active": "1", f"{CPU}/smt/control": "on", f"{CPU}/isolated": "2-3"}
    )
    smt = host.smt_check(root)
    assert (smt.status, smt.value, smt.condition) == (OK, "on", True)
    isolated = host.isolated_check(root, {0, 1, 2, 3})
    assert (isolated.status, isolated.value) == (OK, "2-3") and "may use 2" in isolated.seen
    none = host.isolated_check(tree(tmp_path / "b", {f"{CPU}/isolated": ""}), {0})
    assert (none.status, none.value) == (OK, "")
    assert host.smt_check(tmp_path / "none").status == ABSENT
    assert host.isolated_check(tmp_path / "none", None).status == ABSENT


def test_load(tmp_path):
    quiet = tree(
        tmp_path / "a", {"proc/loadavg": "0.90 0.50 0.30 1/200 99", f"{CPU}/online": "0-3"}
    )
    busy = tree(tmp_path / "b", {"proc/loadavg": "9.00 8.00 7.00 9/200 99", f"{CPU}/online": "0-3"})
    assert host.load_check(quiet).status == OK
    check = host.load_check(busy)
    assert (check.status, check.value) == (WARN, 9.0) and "on 4 CPUs" in check.seen and check.fix
    assert not check.condition
    assert host.load_check(tmp_path / "none").status == ABSENT


def test_busy_processes_excludes_this_process_its_parents_and_kernel_threads(tmp_path):
    me, parent = os.getpid(), os.getppid()
    files = {
        "proc/uptime": "1000.00 3000.00",
        f"proc/{me}/stat": stat(me, "pytest", "R", parent, cpu_s=99, start_s=900),
        f"proc/{parent}/stat": stat(parent, "bash", "R", 1, cpu_s=900, start_s=0),
        "proc/2/stat": stat(2, "kthreadd", "S", 0, flags=0x00200040),
        "proc/30/stat": stat(30, "ksoftirqd/0", "R", 2, flags=0x04208040, cpu_s=900),
        "proc/40/stat": stat(40, "sshd", "R", 1, cpu_s=5, start_s=10),  # running, rarely busy
        "proc/50/stat": stat(50, "idle job", "S", 1, cpu_s=900, start_s=0),  # busy, asleep now
    }
    quiet = tree(tmp_path / "a", files)
    check = host.busy_check(quiet)
    assert (check.status, check.value) == (OK, []), check.seen
    spinning = tree(
        tmp_path / "b",
        files | {"proc/77/stat": stat(77, "my (job)", "R", 1, cpu_s=90, start_s=900)},
    )
    check = host.busy_check(spinning)
    assert check.status == WARN
    assert check.value == [{"pid": 77, "name": "my (job)", "cpu_share": 0.9}]
    assert "my (job) (77, 90% CPU)" in check.seen and check.fix.startswith("kill 77")
    assert host.busy_check(tmp_path / "none").status == ABSENT


NODES = {
    "sys/devices/system/node/node0/cpulist": "0-3",
    "sys/devices/system/node/node1/cpulist": "4-7",
}


def _status(cpus: str, mems: str) -> dict[str, str]:
    return {"Cpus_allowed_list": cpus, "Mems_allowed_list": mems}


def test_numa_binding(tmp_path):
    root = tree(tmp_path, NODES)
    spread = host.numa_checks(root, _status("0-7", "0-1"), set(range(8)))
    assert [(c.name, c.status, c.value) for c in spread] == [
        ("host.numa_cpus", WARN, [0, 1]),
        ("host.numa_memory", WARN, [0, 1]),
    ]
    assert all("numactl --cpunodebind=0 --membind=0" in c.fix and c.condition for c in spread)
    bound = host.numa_checks(root, _status("4-7", "1"), {4, 5, 6, 7})
    assert [(c.status, c.value) for c in bound] == [(OK, [1]), (OK, [1])]
    one_node = tree(tmp_path / "one", {"sys/devices/system/node/node0/cpulist": "0-7"})
    assert {c.status for c in host.numa_checks(one_node, _status("0-7", "0"), set(range(8)))} == {
        OK
    }
    unknown = host.numa_checks(root, {}, None)
    assert [c.status for c in unknown] == [ABSENT, ABSENT]
    no_numa = host.numa_checks(tmp_path / "none", {}, None)
    assert all(c.status == ABSENT and "without NUMA" in c.seen for c in no_numa)


def test_proc_status_and_allowed_cpus(tmp_path):
    root = tree(
        tmp_path,
        {"proc/self/status": "Name:\tpython\nCpus_allowed_list:\t0-2,5\nMems_allowed_list:\t0\n"},
    )
    status = host.proc_status(root)
    assert host.allowed_cpus(root, status) == {0, 1, 2, 5}
    assert host.allowed_cpus(tmp_path / "none", {}) is None


THP = "sys/kernel/mm/transparent_hugepage"


def test_transparent_huge_pages(tmp_path):
    madvise = tree(
        tmp_path / "a",
        {
            f"{THP}/enabled": "always [madvise] never",
            f"{THP}/defrag": "always defer defer+madvise [madvise] never",
        },
    )
    check = host_limits.thp_check(madvise)
    assert (check.status, check.value, check.condition) == (
        OK,
        {"enabled": "madvise", "defrag": "madvise"},
        True,
    )
    stalls = tree(
        tmp_path / "b",
        {f"{THP}/enabled": "[always] madvise never", f"{THP}/defrag": "[always] defer never"},
    )
    check = host_limits.thp_check(stalls)
    assert check.status == WARN and check.fix == f"echo madvise | sudo tee /{THP}/defrag"
    assert host_limits.thp_check(tmp_path / "none").status == ABSENT


def _meminfo(total_kb=8 * 2**20, swap_total_kb=0, swap_free_kb=0):
    text = (
        f"MemTotal:       {total_kb} kB\nMemFree: 1000 kB\nSwapTotal: {swap_total_kb} kB\n"
        f"SwapFree: {swap_free_kb} kB\nHugePages_Total: 0\n"
    )
    return {"proc/meminfo": text}


def test_swap(tmp_path):
    assert host_limits.meminfo(tree(tmp_path / "m", _meminfo()))["MemTotal"] == 8 * GIB
    assert host_limits.meminfo(tmp_path / "m")["HugePages_Total"] == 0
    none = host_limits.swap_check(tree(tmp_path / "a", _meminfo()))
    unused = host_limits.swap_check(
        tree(tmp_path / "b", _meminfo(swap_total_kb=2**20, swap_free_kb=2**20))
    )
    used = host_limits.swap_check(
        tree(tmp_path / "c", _meminfo(swap_total_kb=2**20, swap_free_kb=2**19))
    )
    assert [(c.status, c.value) for c in (none, unused, used)] == [(OK, 0), (OK, 0), (WARN, 2**29)]
    assert "512 MiB of 1,024 MiB" in used.seen and "swapoff" in used.fix
    assert host_limits.swap_check(tmp_path / "none").status == ABSENT


def test_disk_room_for_the_store(tmp_path, monkeypatch):
    db = tmp_path / "not-yet" / "lab.db"  # a folder to be created: its parent's disk counts
    check = host_limits.disk_check(db)
    assert check.status == OK and str(db) in check.seen and not check.condition
    monkeypatch.chdir(tmp_path)
    default = host_limits.disk_check(None)
    assert str(tmp_path / "trainperf.db") in default.seen
    monkeypatch.setattr(host_limits, "MIN_FREE_BYTES", 2**62)
    check = host_limits.disk_check(db)
    assert check.status == WARN and "df -h" in check.fix

    def unreadable(path):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(host_limits.shutil, "disk_usage", unreadable)
    check = host_limits.disk_check(db)
    assert check.status == ABSENT and "Permission denied" in check.seen


def test_disk_counts_twice_the_database(tmp_path, monkeypatch):
    db = tmp_path / "big.db"
    db.write_bytes(b"x" * 1000)
    monkeypatch.setattr(host_limits, "MIN_FREE_BYTES", 0)
    monkeypatch.setattr(
        host_limits.shutil, "disk_usage", lambda path: type("Usage", (), {"free": 1999})()
    )
    assert host_limits.disk_check(db).status == WARN
    monkeypatch.setattr(
        host_limits.shutil, "disk_usage", lambda path: type("Usage", (), {"free": 2000})()
    )
    assert host_limits.disk_check(db).status == OK


V2 = {"sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory pids"}


def test_cgroup_v2_cpu_quota(tmp_path):
    limited = tree(
        tmp_path / "a",
        V2
        | {
            "proc/self/cgroup": "0::/job/step\n",
            "sys/fs/cgroup/job/cpu.max": "150000 100000",
            "sys/fs/cgroup/job/step/cpu.max": "max 100000",
            "sys/fs/cgroup/job/step/cpuset.cpus.effective": "0-3",
        },
    )
    check = host_limits.cgroup_cpu_check(limited, {0, 1, 2, 3})
    assert (check.status, check.value, check.condition) == (
        WARN,
        {"quota_cpus": 1.5, "cpuset": "0-3"},
        True,
    )
    assert "OMP_NUM_THREADS=1" in check.fix and "quota 1.5 CPUs" in check.seen
    check = host_limits.cgroup_cpu_check(limited, {0})
    assert check.status == OK
    free = tree(
        tmp_path / "b", V2 | {"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/cpu.max": "max 100000"}
    )
    check = host_limits.cgroup_cpu_check(free, {0, 1})
    assert (check.status, check.value["quota_cpus"]) == (OK, "max")
    assert host_limits.cgroup_cpu_check(tmp_path / "none", {0}).status == ABSENT


def test_cgroup_v1_cpu_quota_inside_a_container(tmp_path):
    # the container sees the host's path in /proc/self/cgroup but its own cgroup mounted
    # at the controller's root
    v1 = {
        "proc/self/cgroup": "5:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n",
        "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "200000",
        "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000",
    }
    root = tree(tmp_path, v1)
    assert host_limits.cgroup_cpu_check(root, set(range(8))).status == WARN
    assert host_limits.cgroup_cpu_check(root, {0, 1}).status == OK
    unlimited = tree(tmp_path / "b", v1 | {"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "-1"})
    assert host_limits.cgroup_cpu_check(unlimited, set(range(8))).value["quota_cpus"] == "max"


def test_cgroup_memory_limit(tmp_path):
    v2 = V2 | _meminfo(total_kb=8 * 2**20) | {"proc/self/cgroup": "0::/job\n"}
    small = tree(tmp_path / "a", v2 | {"sys/fs/cgroup/job/memory.max": str(2 * GIB)})
    check = host_limits.cgroup_memory_check(small)
    assert (check.status, check.value, check.condition) == (WARN, 2 * GIB, True)
    assert "2.0 GiB" in check.seen and "8.0 GiB" in check.seen and "--memory 8g" in check.fix
    unlimited = tree(tmp_path / "b", v2 | {"sys/fs/cgroup/job/memory.max": "max"})
    assert (
        host_limits.cgroup_memory_check(unlimited).status,
        host_limits.cgroup_memory_check(unlimited).value,
    ) == (OK, "max")
    v1 = _meminfo() | {
        "proc/self/cgroup": "4:memory:/user\n",
        "sys/fs/cgroup/memory/user/memory.limit_in_bytes": "9223372036854771712",
    }
    check = host_limits.cgroup_memory_check(tree(tmp_path / "c", v1))
    assert (check.status, check.value) == (OK, "max")
    assert host_limits.cgroup_memory_check(tmp_path / "none").status == ABSENT


def test_versions_are_conditions_and_absent_with_a_reason(monkeypatch):
    checks = {c.name: c for c in host_software.version_checks()}
    assert set(checks) == {
        f"host.{k}" for k in ("os", "python", "torch", "cuda", "cudnn", "nccl", "jax")
    }
    assert all(c.condition for c in checks.values())
    assert checks["host.torch"].status == OK and checks["host.torch"].value
    fake = {
        "python": "3.11.7",
        "torch": "2.13.0",
        "cuda_absent_reason": "this torch build has no CUDA",
    }
    monkeypatch.setattr(host_software, "software_versions", lambda: dict(fake))
    checks = {c.name: c for c in host_software.version_checks()}
    assert (checks["host.cuda"].status, checks["host.cuda"].seen) == (
        ABSENT,
        "this torch build has no CUDA",
    )
    assert checks["host.jax"].status == ABSENT
    monkeypatch.setattr(
        host_software, "software_versions", lambda: fake | {"jax": "0.4.30", "jaxlib": "0.4.31"}
    )
    jax = {c.name: c for c in host_software.version_checks()}["host.jax"]
    assert (jax.status, jax.value) == (OK, "0.4.30, jaxlib 0.4.31")


def test_environment(monkeypatch):
    environ = {
        "HOME": "/root",
        "NCCL_IB_DISABLE": "1",
        "TORCH_CUDNN_V8_API_LRU_CACHE_LIMIT": "1",
        "OMP_NUM_THREADS": "4",
    }
    check = host_software.env_check(environ)
    assert check.status == OK and check.condition
    assert check.value == {
        "NCCL_IB_DISABLE": "1",
        "OMP_NUM_THREADS": "4",
        "TORCH_CUDNN_V8_API_LRU_CACHE_LIMIT": "1",
    }
    check = host_software.env_check(environ | {"CUDA_LAUNCH_BLOCKING": "1"})
    assert check.status == WARN and check.fix == "unset CUDA_LAUNCH_BLOCKING"
    assert host_software.env_check({"CUDA_LAUNCH_BLOCKING": "0"}).status == OK
    assert host_software.env_check({}).seen == "none of them set"


def test_thread_counts_against_the_cpus():
    two = {0, 1}
    assert host_software.threads_check({}, two).status == OK
    assert host_software.threads_check({"OMP_NUM_THREADS": "2"}, two).status == OK
    assert host_software.threads_check({"OMP_NUM_THREADS": "2,1"}, two).status == OK
    check = host_software.threads_check({"OMP_NUM_THREADS": "8", "MKL_NUM_THREADS": "1"}, two)
    assert check.status == WARN and check.fix == "export OMP_NUM_THREADS=2;"
    assert check.value == {"cpus": 2, "OMP_NUM_THREADS": "8", "MKL_NUM_THREADS": "1"}
    assert host_software.threads_check({"MKL_NUM_THREADS": "many"}, two).status == WARN
    assert host_software.threads_check({"OMP_NUM_THREADS": "8"}, None).status == OK


@pytest.mark.parametrize("count", ["²", "٣", "2²"])
def test_a_thread_count_not_in_digits_0_9_is_warned_not_a_traceback(count):
    # str.isdigit takes '²' and int('²') raises: `OMP_NUM_THREADS=² trainperf doctor` ended
    # in a ValueError; '٣' is 3 to int() but not to libgomp
    check = host_software.threads_check({"OMP_NUM_THREADS": count}, {0, 1})
    assert check.status == WARN and check.fix == "export OMP_NUM_THREADS=2;"


def test_a_cgroup_limit_not_in_digits_0_9_is_no_limit(tmp_path, monkeypatch):
    (tmp_path / "memory.max").write_text("²\n")
    monkeypatch.setattr(host_limits, "_cgroup_dirs", lambda root, controller: [tmp_path])
    assert host_limits.memory_limit(tmp_path) == (None, tmp_path / "memory.max")


def _valid(checks: list[Check]) -> None:
    names = [c.name for c in checks]
    assert len(names) == len(set(names)), names
    for check in checks:
        assert check.name.startswith("host.") and check.status in STATUSES
        assert check.seen and check.why
        assert check.status != ABSENT or check.value is None, check
        json.dumps(check.document(), allow_nan=False)


def test_host_checks_on_a_fake_machine(tmp_path):
    root = tree(
        tmp_path / "root",
        {
            f"{CPU}/cpu0/cpufreq/scaling_governor": "powersave",
            f"{CPU}/online": "0-7",
            "proc/loadavg": "0.10 0.10 0.10 1/100 9",
            "proc/uptime": "100.0 100.0",
            "proc/self/status": "Cpus_allowed_list:\t0-7\nMems_allowed_list:\t0-1\n",
            f"{THP}/enabled": "always [madvise] never",
            **NODES,
            **_meminfo(swap_total_kb=100, swap_free_kb=100),
        },
    )
    checks = host_checks(root=root, environ={"OMP_NUM_THREADS": "16"}, db=tmp_path / "x.db")
    _valid(checks)
    statuses = {c.name: c.status for c in checks}
    assert statuses["host.governor"] == WARN and statuses["host.threads"] == WARN
    assert statuses["host.numa_cpus"] == WARN and statuses["host.swap"] == OK
    assert statuses["host.cgroup_cpu"] == ABSENT and statuses["host.turbo"] == ABSENT
    empty = host_checks(root=tmp_path / "empty", environ={}, db=tmp_path / "x.db")
    _valid(empty)
    assert [c.name for c in empty] == [c.name for c in checks]
    from_files = {
        "governor",
        "turbo",
        "smt",
        "isolated_cpus",
        "load",
        "busy_processes",
        "numa_cpus",
        "numa_memory",
        "thp",
        "swap",
        "cgroup_cpu",
        "cgroup_memory",
    }
    assert {c.name for c in empty if c.status == ABSENT} >= {f"host.{n}" for n in from_files}


def test_host_checks_on_this_machine_are_valid():
    checks = host_checks()  # its time: benchmarks/doctor_time.py
    _valid(checks)
    assert len(checks) >= 20


@pytest.mark.parametrize(
    "text, cpus", [("0-3,8,10-11", {0, 1, 2, 3, 8, 10, 11}), ("", set()), ("5", {5})]
)
def test_parse_cpulist(text, cpus):
    from trainperf.system.files import parse_cpulist

    assert parse_cpulist(text) == cpus
