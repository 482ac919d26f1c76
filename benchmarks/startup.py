"""How fast trainperf starts: the cheap verbs against their targets (issue 35, "Fast to start").

Runs each command N times (default 5) in a child process, interleaved round by round with
``python -c pass`` (the floor: an interpreter that starts and exits), and prints per command
the median wall and CPU seconds (user + system of the child, ``os.wait4``), the ratio of
each to ``python -c pass``'s, the target and whether the median met it. On a machine that
others share the wall seconds grow with their load; the CPU seconds do not, so both are
judged. The reading verbs read a small store: the measurements of the 2-core development VM
(``tests/data/cpu_measurements.json``) stored by trainperf (benchmarks/store_scale.py).
``models`` reads its cache (trainperf.analysis.zoo_cache), kept in a temporary
``TRAINPERF_CACHE`` filled by one run first, whose time is printed too:

    python benchmarks/startup.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from store_scale import seed_export

ROOT = Path(__file__).resolve().parents[1]
TRAINPERF = [sys.executable, "-m", "trainperf"]
FLOOR = "python -c pass"

# name -> (arguments after ``python -m trainperf``, target seconds, expected exit code)
COMMANDS = {
    "--help": ("--help", 0.5, 0),
    "models": ("models", 2.0, 0),
    "results": ("results --db {db}", 1.0, 0),
    "compare": ("compare --db {db}", 1.0, 0),
    "scaling": ("scaling --db {db}", 1.0, 0),
    "pareto": ("pareto --db {db}", 1.0, 0),
    "suites": ("suites", 1.0, 0),
    "system": ("system", 1.0, 0),
    "run nosuchsuite": ("run nosuchsuite --db {db}", 1.0, 2),
}


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, exit code) of ``argv`` in a child process."""
    started = time.perf_counter()
    child = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, env=env
    )
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    return wall, usage.ru_utime + usage.ru_stime, os.waitstatus_to_exitcode(status)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per command")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="trainperf-startup-"))
    env = os.environ | {"TRAINPERF_CACHE": str(folder / "cache")}
    try:
        seed_export(folder)
        db = folder / "seed.db"
        argvs = {FLOOR: [sys.executable, "-c", "pass"]}
        for name, (template, _, _) in COMMANDS.items():
            argvs[name] = TRAINPERF + template.format(db=db).split()
        wall, cpu, code = timed(argvs["models"], env)
        print(f"models, cold cache (counts the zoo): {wall:.1f} s wall, {cpu:.1f} s CPU")
        walls: dict[str, list[float]] = {name: [] for name in argvs}
        cpus: dict[str, list[float]] = {name: [] for name in argvs}
        codes: dict[str, set[int]] = {name: set() for name in argvs}
        for _ in range(args.repeat):  # interleaved: every command once per round
            for name, argv in argvs.items():
                wall, cpu, code = timed(argv, env)
                walls[name].append(wall)
                cpus[name].append(cpu)
                codes[name].add(code)
        floor_wall = statistics.median(walls[FLOOR])
        floor_cpu = max(statistics.median(cpus[FLOOR]), 1e-3)  # the clock ticks at 1 ms
        print(f"median of {args.repeat} runs each; x: ratio to {FLOOR!r}")
        print(
            f"{'command':<18} {'wall s':>7} {'x':>5} {'CPU s':>7} {'x':>5} {'target':>7}"
            f"  {'wall':<4} {'CPU':<4} exit"
        )
        failed = False
        for name in argvs:
            median_wall = statistics.median(walls[name])
            median_cpu = statistics.median(cpus[name])
            target, expected = (None, 0) if name == FLOOR else COMMANDS[name][1:]
            verdicts = ["", ""]
            if target is not None:
                verdicts = ["ok" if v < target else "FAIL" for v in (median_wall, median_cpu)]
                failed |= verdicts[1] == "FAIL" or codes[name] != {expected}
            print(
                f"{name:<18} {median_wall:>7.2f} {median_wall / floor_wall:>5.0f}"
                f" {median_cpu:>7.2f} {median_cpu / floor_cpu:>5.0f}"
                f" {'' if target is None else f'< {target:g}':>7}"
                f"  {verdicts[0]:<4} {verdicts[1]:<4} {','.join(map(str, sorted(codes[name])))}"
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
