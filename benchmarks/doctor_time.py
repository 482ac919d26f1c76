"""How long `trainperf doctor` takes, and the verdict every sweep stores, against the
issue's bounds (the whole doctor < 10 s on a 2-core machine; a sweep's verdict a fraction
of a second), beside `python -c pass` measured in the same run:

    python benchmarks/doctor_time.py [--repeat 3]

Per item the median wall and CPU seconds of ``--repeat`` tries, interleaved: the doctor in a
child process (wait4's CPU time covers the all_reduce ranks it starts and waits for), and
in this process (torch already imported, as in a sweep) the host checks, the GPU checks
and ``doctor.sweep_verdict``. Prints PASS/FAIL per bound; exits 1 when one is missed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import torch  # noqa: F401 - imported first, as a sweep has it before the verdict

from trainperf.doctor import sweep_verdict
from trainperf.doctor.gpu import gpu_checks
from trainperf.doctor.host import host_checks

# item -> bound in seconds (None: a reference, no bound)
BOUNDS = {
    "python -c pass": None,
    "trainperf doctor": 10.0,
    "host checks": 0.5,
    "gpu checks": 0.5,
    "sweep verdict": 1.0,
}


def in_child(args: list[str]) -> tuple[float, float]:
    started = time.perf_counter()
    child = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(args)} failed")
    return time.perf_counter() - started, usage.ru_utime + usage.ru_stime


def in_process(call) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


ITEMS = {
    "python -c pass": lambda: in_child([sys.executable, "-c", "pass"]),
    "trainperf doctor": lambda: in_child([sys.executable, "-m", "trainperf", "doctor", "--json"]),
    "host checks": lambda: in_process(host_checks),
    "gpu checks": lambda: in_process(gpu_checks),
    "sweep verdict": lambda: in_process(sweep_verdict),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in ITEMS}
    for _ in range(args.repeat):  # interleaved: each round measures every item once
        for name, measure in ITEMS.items():
            times[name].append(measure())
    missed = 0
    print(f"{'item':<18} {'wall s':>8} {'CPU s':>8}  bound")
    for name, tries in times.items():
        wall = statistics.median(t[0] for t in tries)
        cpu = statistics.median(t[1] for t in tries)
        bound = BOUNDS[name]
        verdict = "" if bound is None else f"< {bound:g} s {'PASS' if wall < bound else 'FAIL'}"
        missed += bound is not None and wall >= bound
        print(f"{name:<18} {wall:>8.2f} {cpu:>8.2f}  {verdict}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
