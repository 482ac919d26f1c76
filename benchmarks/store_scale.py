"""A lab's store: N results from S systems, and how long every reading verb takes on it.

Grows a store from a real export (default: the measurements of the 2-core development VM,
``tests/data/cpu_measurements.json``, stored and exported by trainperf itself): each system
is a copy of the export's systems under a new fingerprint and hostname, each result and
its runs a copy with new uids, its throughput scaled by a factor per system (so systems
differ), until N results. The copies go in through ``trainperf import``'s own path
(``exchange.import_document``), one transaction per system.

Then runs every reading verb on it in a child process and prints, per verb, the wall
seconds and the peak resident memory of that process (``os.wait4``'s ``ru_maxrss``):

    python benchmarks/store_scale.py [--results 10000] [--systems 100] [--db lab.db]
    python benchmarks/store_scale.py --grow-only --db lab.db      # make the store only

The figures for 10,000 results from 100 systems go in the README ("A lab's store").
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "tests" / "data" / "cpu_measurements.json"
TRAINPERF = [sys.executable, "-m", "trainperf"]

# verb -> its arguments after the verb; "{db}" and "{out}" are filled in
VERBS = {
    "results": "results --db {db}",
    "results --json": "results --db {db} --json",
    "results --json --per-step": "results --db {db} --json --per-step",
    "results --json (filtered)": "results --db {db} --json -s node007.lab --sort -created_at"
    " --limit 20",
    "results --csv": "results --db {db} --csv",
    "compare": "compare --db {db}",
    "compare --json": "compare --db {db} --json",
    "scaling --json": "scaling --db {db} --json",
    "pareto --json": "pareto --db {db} --json",
    "export": "export {out}/lab.json --db {db}",
    "import (into a full store)": "import {out}/lab.json --db {db}",
    "report": "report --db {db} --out {out}/report",
}


def seed_export(folder: Path) -> dict[str, Any]:
    """An export of the seed measurements, stored and exported by trainperf."""
    from trainperf.case.result import combine
    from trainperf.measure.runs import parse_runs
    from trainperf.store import exchange
    from trainperf.store.database import Store

    seed = json.loads(SEED.read_text())
    with Store(folder / "seed.db") as store:
        sweep = store.start_sweep(seed["system"], label="seed")
        for result in seed["results"]:
            runs = result["runs"]
            policy = parse_runs(result["case"].get("runs", len(runs)))
            stop = result["metrics"].get("runs_stop_reason", "fixed_runs")
            combined = combine(result["case"], runs, stop, policy) | {"runs": runs}
            store.add_result(sweep, seed["system"]["fingerprint"], combined)
        for run in seed["micro"]:
            body = {k: run[k] for k in ("status", "device", "metrics", "error")}
            store.add_micro(seed["system"], run["params"], body)
        return exchange.export_document(store)


def system_copy(source: dict[str, Any], index: int, per_system: int) -> dict[str, Any]:
    """The source's rows as those of system ``index``: new ids, throughputs scaled."""
    document = copy.deepcopy(source)
    (record,) = document["systems"]
    old = record["fingerprint"]
    new = f"lab{index:013x}"
    record |= {"fingerprint": new, "hostname": f"node{index:03d}.lab"}
    factor = 0.5 + (index % 17) / 8  # 0.5x to 2.5x: systems that differ
    sweep_ids = {s["sweep_id"]: uuid.uuid4().hex[:12] for s in document["sweeps"]}
    for sweep in document["sweeps"]:
        sweep |= {"sweep_id": sweep_ids[sweep["sweep_id"]], "system": new}
    results, runs = [], []
    while len(results) < per_system:
        for result in source["results"]:
            if len(results) == per_system:
                break
            uid = uuid.uuid4().hex
            results.append(_scaled(result, factor) | {"uid": uid, "system": new})
            results[-1]["sweep_id"] = sweep_ids[result["sweep_id"]]
            for run in source["runs"]:
                if run["result_uid"] == result["uid"]:
                    copied = _scaled(run, factor) | {"uid": uuid.uuid4().hex, "system": new}
                    copied |= {"result_uid": uid, "sweep_id": sweep_ids[run["sweep_id"]]}
                    runs.append(copied)
    document |= {"results": results, "runs": runs}
    for table in ("micro", "max_batch", "train_runs"):
        document[table] = [r | {"uid": uuid.uuid4().hex, "system": new} for r in document[table]]
    assert all(r["system"] == new for r in document["results"]), old
    return document


def _scaled(row: dict[str, Any], factor: float) -> dict[str, Any]:
    row = copy.deepcopy(row)
    metrics = row.get("metrics") or {}
    for key in ("samples_per_s_median", "samples_per_s_mean"):
        if isinstance(metrics.get(key), float):
            metrics[key] *= factor
    if isinstance(metrics.get("run_samples_per_s"), list):
        metrics["run_samples_per_s"] = [v * factor for v in metrics["run_samples_per_s"]]
    if isinstance(metrics.get("samples_per_s_ci95"), list):
        metrics["samples_per_s_ci95"] = [v * factor for v in metrics["samples_per_s_ci95"]]
    return row


def grow(db: Path, results: int, systems: int) -> None:
    """Write a store of ``results`` results over ``systems`` systems at ``db``."""
    from trainperf.store import exchange
    from trainperf.store.database import Store

    with tempfile.TemporaryDirectory() as tmp:
        source = seed_export(Path(tmp))
    base, extra = divmod(results, systems)
    with Store(db) as store:
        for index in range(systems):
            per_system = base + (1 if index < extra else 0)
            exchange.import_document(store, system_copy(source, index, per_system))


def timed(args: list[str], limit_s: float) -> tuple[float, float, float, int]:
    """(seconds, CPU seconds, peak MB, exit code) of ``trainperf ARGS`` in a child process,
    killed after ``limit_s`` (exit code -9). The CPU seconds (user + system) are what to
    compare on a machine that others share: the wall seconds grow with their load."""
    started = time.perf_counter()
    child = subprocess.Popen(
        TRAINPERF + args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT
    )
    killer = threading.Timer(limit_s, child.kill)
    killer.start()
    try:
        _, status, usage = os.wait4(child.pid, 0)
    finally:
        killer.cancel()
    seconds = time.perf_counter() - started
    cpu = usage.ru_utime + usage.ru_stime
    return seconds, cpu, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=int, default=10_000)
    parser.add_argument("--systems", type=int, default=100)
    parser.add_argument("--db", type=Path, help="where the store goes (default: a temp dir)")
    parser.add_argument("--grow-only", action="store_true", help="make the store, time nothing")
    parser.add_argument("--limit", type=float, default=300.0, help="seconds per verb at most")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="trainperf-scale-"))
    db = args.db or folder / "lab.db"
    try:
        if db.exists():
            print(f"{db} exists: using it as it is", file=sys.stderr)
        else:
            started = time.perf_counter()
            grow(db, args.results, args.systems)
            took = time.perf_counter() - started
            print(f"grew {db}: {args.results} results, {args.systems} systems in {took:.1f} s")
        if args.grow_only:
            return 0
        print(f"{'verb':<28} {'seconds':>8} {'CPU s':>8} {'peak MB':>8}  exit")
        for name, template in VERBS.items():
            command = template.format(db=db, out=folder).split()
            seconds, cpu, peak, code = timed(command, args.limit)
            print(f"{name:<28} {seconds:>8.1f} {cpu:>8.1f} {peak:>8.0f}  {code}", flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
