"""Does `trainperf compare` keep its promise? An A/A test and an A/B test, end to end.

A/A: the same small CPU cases measured K times, each time by a separate `trainperf run`
into a database of its own (every case in its independent runs, as a user would run it),
then every pair of databases compared with `trainperf compare A B --json`. Nothing
changed between them, so every case decided "faster" or "slower" is a false positive;
the script prints their share over all pairs and cases (a 95% interval promises 5%; the
target on a noisy 2-core machine is at most 10%). Pairs share invocations, so they are
not independent: the share is an estimate, as in the issue that asked for it.

A/B: the same cases with `--set threads=1` against `--set threads=2`, one invocation each
(threads do not change the workload, so compare lines the cases up): a real difference,
which the comparison must find.

Exit code 1 when the A/A share is above the target or the A/B difference goes unseen.

    python benchmarks/aa_test.py [--invocations 6] [--runs 3] [--steps fixed:2:30] [--keep DIR]
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET = 0.10
NO_DIFFERENCE = "no significant difference"
# Small CPU cases of three kinds of step: short (CifarNet), medium and long (ResNets).
CASES = (
    "{model: cifarnet, batch_size: 64}",
    "{model: resnet18, batch_size: 16, image_size: 64}",
    "{model: resnet50, batch_size: 8, image_size: 64}",
)


def suite_file(directory: Path, runs: str, steps: str) -> Path:
    path = directory / "aa.yaml"
    lines = [
        "name: aa-test",
        f"defaults: {{device: cpu, runs: {json.dumps(runs)}, steps: {json.dumps(steps)}}}",
        "cases:",
        *(f"  - {case}" for case in CASES),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def trainperf(*args: str | Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "trainperf", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def measure(suite: Path, db: Path, *extra: str) -> float:
    """Run the suite into ``db``; return the seconds it took."""
    started = time.monotonic()
    done = trainperf("run", suite, "--db", db, *extra)
    if done.returncode != 0:
        sys.exit(f"trainperf run failed ({done.returncode}): {done.stderr[-2000:]}")
    return time.monotonic() - started


def decisions(a: Path, b: Path) -> list[dict]:
    """Per case of ``trainperf compare A B``: label, ratio, interval, decision."""
    done = trainperf("compare", a, b, "--json", "--group-by", "none")
    if done.returncode != 0:
        sys.exit(f"trainperf compare failed: {done.stderr}")
    rows = []
    for case in json.loads(done.stdout)["cases"]:
        entry = case["per_system"]["B"]
        rows.append({"case": case["label"], **{k: entry[k] for k in ("ratio", "ci95", "decision")}})
    return rows


def show(name: str, row: dict) -> None:
    low, high = row["ci95"] or (float("nan"), float("nan"))
    print(
        f"  {name:<8} {row['case']:<32} ratio {row['ratio']:.3f} "
        f"[{low:.3f}, {high:.3f}]  {row['decision']}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--invocations", type=int, default=6, help="A/A measurements (K)")
    parser.add_argument("--runs", default="3", help="runs per case (trainperf run --runs)")
    parser.add_argument("--steps", default="fixed:2:30", help="step budget of a case")
    parser.add_argument("--keep", type=Path, help="keep the databases in this directory")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="aa-test-") as tmp:
        directory = args.keep or Path(tmp)
        directory.mkdir(parents=True, exist_ok=True)
        suite = suite_file(directory, args.runs, args.steps)
        dbs, seconds = [], []
        for k in range(args.invocations):
            dbs.append(directory / f"aa{k}.db")
            seconds.append(measure(suite, dbs[-1]))
            print(f"A/A invocation {k + 1}/{args.invocations}: {seconds[-1]:.0f} s", flush=True)
        rows = []
        for a, b in itertools.combinations(dbs, 2):
            for row in decisions(a, b):
                rows.append(row)
                show(f"{a.stem}-{b.stem}", row)
        positives = sum(row["decision"] not in (NO_DIFFERENCE, None) for row in rows)
        undecided = sum(row["decision"] is None for row in rows)
        decided = len(rows) - undecided
        rate = positives / decided if decided else float("nan")
        print(
            f"A/A: {positives} of {decided} decisions significant: false-positive rate "
            f"{rate:.1%} (target <= {TARGET:.0%}; {undecided} without a decision; "
            f"{args.invocations} invocations, {len(rows) // max(len(CASES), 1)} pairs)"
        )

        one, two = directory / "threads1.db", directory / "threads2.db"
        measure(suite, one, "--set", "threads=1")
        measure(suite, two, "--set", "threads=2")
        found = decisions(one, two)
        for row in found:
            show("A/B", row)
        detected = sum(row["decision"] == "faster" for row in found)
        print(
            f"A/B (--threads 2 against --threads 1): {detected} of {len(found)} cases found faster"
        )
    ok = decided > 0 and rate <= TARGET and detected > len(found) / 2
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
