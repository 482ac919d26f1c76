"""Does `trainperf predict` foresee data-parallel scaling on this machine? Predicted against
measured efficiency and exposed-communication share of two zoo networks on 2 gloo ranks.

Everything goes through the command line into a fresh database (``--db`` on every command),
in an order that keeps the prediction honest: nothing measured on 2 ranks is stored when
the predictor reads the database (its calibration fits a per-step data-parallel overhead to
stored multi-rank results of the model, which would close the gap by construction).

1. ``trainperf micro collective --ops all_reduce --devices 2 --device cpu`` (gloo), 1 KiB to
   64 MiB: it spans DDP's 1 MiB first bucket and its 25 MiB buckets, so the calibration can
   fit the link (α and β, or a bus-bandwidth curve); then ``micro collective --under-load``
   on the same ranks, 1 to 64 MiB: how much the all-reduce and a GEMM (and STREAM add, a
   memory-bound kernel) slow each other on the shared cores, and how much each kernel slows
   beside the other rank's (the predictor's contention and neighbour terms);
2. per network, ``trainperf run`` of one process (``--threads 1``, ``--runs`` runs): the
   calibration's compute;
3. per network, ``trainperf predict --devices 1,2 --per-node 2 --calibrate DB --json``: no
   ``--device`` and no link flag, so compute is this machine's measured throughput and the
   intra-node link the fitted all-reduce;
4. per network, ``--rounds`` interleaved rounds, each one run of one process then one run of
   ``trainperf run --devices 2 --parallel ddp --threads 1`` (weak scaling, the same batch per
   process), and one more run of one process at the end: P D P D ... P. Round r's
   efficiency is tp(D_r) / (2 × mean(tp(P_r), tp(P_r+1))), each 2-rank run against the
   one-process runs on either side of it, so a machine that drifts (a shared VM's
   neighbours come and go over the minutes a network takes) moves both sides of the ratio
   alike; the measured efficiency is the mean over rounds with its Student t 95% interval
   (``trainperf.measure.hierarchy.mean_interval``: the rounds are the independent unit). A
   2-rank run's ``comm_exposed_share`` is (median step − median step with gradient
   synchronization off) / median step, the quantity predict calls ``comm_fraction``.

Threads: the machine this was written on has 2 cores, so every process runs 1 intra-op
thread, the single process as well as each of the 2 ranks (and micro collective's ranks,
which take 1 thread each by default): the 2-rank job then has twice the cores of the
1-process one, as 2 GPUs have twice the devices of one, and efficiency =
throughput(2 ranks) / (2 × throughput(1 process)) measures the cost of data parallelism,
not of thread scaling. Gloo's own threads and the memory bus are still shared: the
predictor prices that with the contention step 1 measured (compute and all-reduce slowing
each other), and the second table shows it as the compute time of a rank growing from 1 to
2 processes.

The networks, at the ratio that sets data-parallel scaling (trainperf.models.flops): training
FLOPs per sample / parameters, i.e. compute per sample over the all-reduce volume per step.
- comm-heavy: AlexNet at 64×64, batch 16: 0.578 GFLOP/sample over 61.1 M parameters =
  9.5 FLOPs/param; 233 MiB of fp32 gradients a step against a 0.31 s step on one core
  (AMD EPYC, 1 thread); gloo measured 0.7-1.2 GB/s bus bandwidth here at 4-64 MiB, so
  the all-reduce alone takes about 2/3 of the step;
- compute-heavy: ResNet-18 at 128×128, batch 8: 3.48 GFLOP/sample over 11.7 M parameters =
  298 FLOPs/param (31× AlexNet's); 44.6 MiB of gradients against a 0.48 s step, which
  the model expects to hide mostly behind the backward pass.
The script computes and prints the ratio again; ``--network`` measures others.

Prints per network the predicted and measured efficiency (with its 95% interval over the
rounds, and each round's), their difference in points (flagged above 10), the predicted and
measured exposed-communication share, the 2-rank step split into compute and exposed
communication (of which the predicted copies of the gradients into and out of DDP's buckets
are shown apart), and which terms of the prediction were measured and which came from the
catalog or defaults (the predict JSON's ``calibration.sources``,
``calibration.absent`` and ``assumptions``). A key missing from a JSON document is shown as
"-" and listed at the end. A report, not a gate: exit code 0 when every command ran and
every case is ok, 1 otherwise. About 27 minutes on 2 quiet cores with the defaults (gpt2-small
alone about 18); run it with nothing else on the machine: a test suite beside it slowed each
rank's compute by 25-45% in one run (docs/predict.md, "With the host model").

    python benchmarks/predict_vs_measured.py [--steps fixed:3:20] [--runs 2] [--rounds 3]
                                             [--db PATH]
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainperf import models
from trainperf.measure.hierarchy import mean_interval
from trainperf.measure.stats import MeanCI
from trainperf.models.flops import analyse

MISMATCH_POINTS = 10.0
# Predicted terms added to the synchronized step: stragglers and per-step DDP overhead.
LATE_TERMS = ("straggler_s", "overhead_s")
RANKS = 2
COLLECTIVE = ("--ops", "all_reduce", "--devices", str(RANKS), "--device", "cpu")
COLLECTIVE += ("--min-bytes", "1K", "--max-bytes", "64M", "--factor", "2", "--warmup", "3")
# The same ranks' all-reduce beside a GEMM on their cores (issue 33, item 1): how much
# each slows the other, which the predictor's host model prices the overlap with, each DDP
# bucket at its own size (so each size's value counts, not only their median: 5 repetitions,
# not the default 3, whose per-size values ranged 1.4-2.6x over 6 runs on the 2-vCPU VM).
UNDER_LOAD = ("--under-load", "--devices", str(RANKS), "--device", "cpu", "--repeats", "5")
UNDER_LOAD += ("--min-bytes", "1M", "--max-bytes", "64M", "--factor", "4", "--warmup", "2")
DDP = ("--devices", str(RANKS), "--parallel", "ddp")


@dataclass(frozen=True)
class Network:
    model: str
    batch_size: int
    size: int

    @classmethod
    def parse(cls, text: str) -> Network:
        try:
            model, batch, size = text.split(":")
            return cls(model, int(batch), int(size))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--network {text!r}: give MODEL:BATCH:SIZE, e.g. alexnet:16:64"
            ) from None

    @property
    def size_flag(self) -> str:
        """--image-size or --seq-len, as the model's size is named."""
        return "--" + models.get(self.model).size_name.replace("_", "-")

    def __str__(self) -> str:
        return f"{self.model} b{self.batch_size} @{self.size}"


DEFAULT_NETWORKS = (
    Network("alexnet", 16, 64),
    Network("resnet18", 8, 128),
    Network("gpt2-small", 4, 64),
)


class Reader:
    """Reads nested keys of the JSON documents; a missing one reads as None and is noted
    (a document that is None, from a failed command, reads as None: its failure is shown)."""

    def __init__(self) -> None:
        self.missing: set[str] = set()

    def get(self, doc: Any, path: str, where: str) -> Any:
        if doc is None:
            return None
        for key in path.split("."):
            if not isinstance(doc, dict) or key not in doc:
                self.missing.add(f"{where}: {path}")
                return None
            doc = doc[key]
        return doc


def trainperf(*args: str | Path) -> dict | None:
    """The JSON document of ``trainperf ARGS --json``; None (and a line why) if it failed."""
    command = [sys.executable, "-m", "trainperf", *map(str, args), "--json"]
    shown = shlex.join(["trainperf", *command[3:]])
    print(f"$ {shown}", flush=True)
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    print(f"  ({time.monotonic() - started:.0f} s)", flush=True)
    if done.returncode != 0:
        print(f"  FAILED (exit {done.returncode}): {done.stderr.strip()[-1500:]}")
        return None
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError as exc:
        print(f"  FAILED: stdout is not one JSON document ({exc})")
        return None


def run_case(
    net: Network, db: Path, args: argparse.Namespace, *extra: str, runs: int = 1
) -> dict | None:
    """The one result of ``trainperf run`` of ``net`` (``runs`` runs); None unless it is ok."""
    doc = trainperf(
        "run", "-m", net.model, "-b", net.batch_size, net.size_flag, net.size,
        "--device", "cpu", "--threads", "1", "--steps", args.steps, "--runs", runs,
        "--timeout", args.timeout, "--db", db, *extra,
    )  # fmt: skip
    results = (doc or {}).get("results") or []
    if len(results) != 1 or results[0].get("status") != "ok":
        status = [(r.get("status"), r.get("error")) for r in results]
        print(f"  {net}: no ok result ({status or 'no results'})")
        return None
    return results[0]


def predict(net: Network, db: Path) -> dict | None:
    return trainperf(
        "predict", "-m", net.model, "--devices", f"1,{RANKS}", "--per-node", RANKS,
        "-b", net.batch_size, net.size_flag, net.size, "--calibrate", db,
    )  # fmt: skip


def fmt(value: float | None, spec: str, scale: float = 1.0) -> str:
    return "-" if value is None else format(value * scale, spec)


def row_of(prediction: dict | None, devices: int, read: Reader) -> dict | None:
    rows = read.get(prediction, "rows", "predict") or []
    found = [r for r in rows if read.get(r, "devices", "predict.rows[]") == devices]
    if rows and not found:
        read.missing.add(f"predict: rows[devices={devices}]")
    return found[0] if found else None


def mean_and_interval(values: list[float]) -> tuple[float | None, MeanCI | None]:
    """The mean of ``values`` (None if there are none) and its t interval (None below 2)."""
    return (statistics.fmean(values) if values else None), mean_interval(values)


@dataclass
class Rounds:
    """One network's interleaved runs (module doc, 4): one-process runs P_0 ... P_R around
    2-rank runs D_0 ... D_R-1 (None for a run that failed)."""

    singles: list[dict | None] = field(default_factory=list)
    ddp: list[dict | None] = field(default_factory=list)

    def efficiencies(self, read: Reader) -> list[float]:
        """tp(D_r) / (RANKS × mean(tp(P_r), tp(P_r+1))) of each round whose three runs are ok."""
        out = []
        for r, two in enumerate(self.ddp):
            tp2 = read.get(two, "metrics.samples_per_s_median", "run ddp")
            around = [
                read.get(one, "metrics.samples_per_s_median", "run 1 process")
                for one in self.singles[r : r + 2]
            ]
            if tp2 is not None and len(around) == 2 and None not in around and all(around):
                out.append(tp2 / (RANKS * statistics.fmean(around)))
        return out

    def mean_of(self, runs: str, key: str, read: Reader) -> tuple[float | None, MeanCI | None]:
        """Mean over the ok runs of ``runs`` ("singles" or "ddp") of ``metrics.KEY``, and its
        95% interval over them (None below 2)."""
        where = "run 1 process" if runs == "singles" else "run ddp"
        values = [read.get(doc, f"metrics.{key}", where) for doc in getattr(self, runs)]
        return mean_and_interval([v for v in values if v is not None])


def measured_efficiency(rounds: Rounds, read: Reader) -> tuple[float | None, MeanCI | None]:
    """The mean of the rounds' efficiencies and its t interval over rounds (None below 2)."""
    return mean_and_interval(rounds.efficiencies(read))


def throughput(rounds: Rounds, runs: str, read: Reader) -> str:
    value, ci = rounds.mean_of(runs, "samples_per_s_median", read)
    interval = f" [{ci.low:.1f}, {ci.high:.1f}]" if ci else " (no interval)"
    return fmt(value, ".1f") + (interval if value is not None else "")


def compact(value: Any) -> str:
    """A source of the calibration in one line: its scalar fields, floats to 4 digits."""
    if not isinstance(value, dict):
        return str(value)
    parts = []
    for key, item in value.items():
        if isinstance(item, float):
            item = format(item, ".4g")
        elif isinstance(item, list) and all(isinstance(x, float) for x in item) and item:
            item = "[" + ", ".join(format(x, ".4g") for x in item) + "]"
        elif isinstance(item, (dict, list)) and len(json.dumps(item)) > 40:
            item = f"<{type(item).__name__} of {len(item)}>"
        parts.append(f"{key}={item}")
    return ", ".join(parts)


def show_terms(net: Network, prediction: dict | None, read: Reader) -> None:
    """Which terms of the prediction were measured here and which were assumed."""
    print(f"\n{net}: terms of the prediction")
    calibration = read.get(prediction, "calibration", "predict") or {}
    sources = read.get(calibration, "sources", "predict.calibration") or {}
    absent = read.get(calibration, "absent", "predict.calibration") or {}
    for key, source in sources.items():
        print(f"  measured  {key}: {compact(source)}")
    alpha, beta = calibration.get("alpha_s"), calibration.get("beta_bytes_per_s")
    if alpha is not None and beta is not None:
        print(f"  measured  link fit: α = {alpha * 1e6:.0f} µs, β = {beta / 1e9:.3f} GB/s")
    for key, value in calibration.items():  # fitted terms that name their source elsewhere
        if isinstance(value, dict) and "source" in value and key not in sources:
            print(f"  fitted    {key}: {compact(value)}")
    for key, reason in absent.items():
        print(f"  absent    {key}: {reason}")
    for line in read.get(prediction, "assumptions", "predict") or []:
        if not line.startswith("memory:"):  # memory is not what this script compares
            print(f"  assumed   {line}")


def pair(pred: dict | None, key: str, rounds: Rounds, measured_key: str, read: Reader) -> str:
    """Predicted / measured (mean over the 2-rank runs) of one term of the 2-rank step, in ms."""
    predicted = read.get(pred, key, "predict.rows[]")
    measured, _ = rounds.mean_of("ddp", measured_key, read)
    return f"{fmt(predicted, '.0f', 1e3)} / {fmt(measured, '.0f', 1e3)}"


def efficiency_line(
    net: Network, rounds: Rounds, pred: dict | None, read: Reader
) -> tuple[str, float | None]:
    """One line of the first table, and the difference predicted − measured in points."""
    predicted = read.get(pred, "efficiency", "predict.rows[]")
    efficiency, ci = measured_efficiency(rounds, read)
    span = f" [{ci.low:.2f}, {ci.high:.2f}]" if ci else ""
    diff = None
    if predicted is not None and efficiency is not None:
        diff = (predicted - efficiency) * 100
    comm = read.get(pred, "comm_fraction", "predict.rows[]")
    share, _ = rounds.mean_of("ddp", "comm_exposed_share", read)
    ratio = analyse(models.get(net.model), net.size).flops_per_param
    line = (
        f"{str(net):<22} {ratio:>11.1f} {fmt(predicted, '.3f'):>8} "
        f"{fmt(efficiency, '.3f') + span:>22} {fmt(diff, '+.1f'):>8} "
        f"{fmt(comm, '.1%'):>9} {fmt(share, '.1%'):>9}"
    )
    return line, diff


def step_line(
    net: Network, calibration: dict | None, rounds: Rounds, pred: dict | None, read: Reader
) -> str:
    """One line of the second table: throughputs, and the 2-rank step term by term."""
    late = [read.get(pred, k, "predict.rows[]") for k in LATE_TERMS]
    read_by_predict = read.get(calibration, "metrics.samples_per_s_median", "run calibration")
    return (
        f"{str(net):<22} {fmt(read_by_predict, '.1f'):>7} "
        f"{throughput(rounds, 'singles', read):>20} {throughput(rounds, 'ddp', read):>20} "
        f"{pair(pred, 'compute_s', rounds, 'compute_step_s_median', read):>13} "
        f"{pair(pred, 'comm_exposed_s', rounds, 'comm_exposed_s', read):>13} "
        f"{fmt(read.get(pred, 'bucket_copy_s', 'predict.rows[]'), '.0f', 1e3):>7} "
        f"{fmt(None if None in late else sum(late), '.0f', 1e3):>10} "
        f"{pair(pred, 'step_s', rounds, 'step_s_median', read):>13}"
    )


def report(
    nets: list[Network], calibration: dict, rounds: dict, predictions: dict, read: Reader
) -> list[Network]:
    """Print the two tables; return the networks whose efficiencies differ by more than
    MISMATCH_POINTS."""
    print(
        f"\n{'network':<22} {'FLOPs/param':>11} {'pred eff':>8} {'meas eff [95%]':>22} "
        f"{'diff pts':>8} {'pred comm':>9} {'meas comm':>9}"
    )
    mismatched = []
    for net in nets:
        pred = row_of(predictions[net], RANKS, read)
        line, diff = efficiency_line(net, rounds[net], pred, read)
        if diff is not None and abs(diff) > MISMATCH_POINTS:
            mismatched.append(net)
            line += f"  <- off by more than {MISMATCH_POINTS:.0f} points"
        print(line)
        effs = ", ".join(f"{e:.3f}" for e in rounds[net].efficiencies(read))
        print(f"{'':<22} rounds: {effs or '-'}")
    print(
        "\nsamples/s: calib = the one-process runs predict read; 1 process and 2 ranks the"
        " interleaved runs (mean [95% interval]); 2-rank step in ms, predicted / measured"
        " (mean over its runs); copies: DDP's bucket copies predicted, part of the exposed"
        " communication"
    )
    print(
        f"{'network':<22} {'calib':>7} {'1 process':>20} {'2 ranks':>20} {'compute':>13} "
        f"{'exposed comm':>13} {'copies':>7} {'stragg+ovh':>10} {'step':>13}"
    )
    for net in nets:
        pred = row_of(predictions[net], RANKS, read)
        print(step_line(net, calibration[net], rounds[net], pred, read))
    return mismatched


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--network",
        type=Network.parse,
        action="append",
        help="MODEL:BATCH:SIZE, repeatable (default: alexnet:16:64, resnet18:8:128 and "
        "gpt2-small:4:64)",
    )
    parser.add_argument("--steps", default="fixed:3:20", help="step budget of every case")
    parser.add_argument(
        "--runs",
        type=int,
        default=2,
        help="independent runs of the one-process case the prediction is calibrated with",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="interleaved rounds of one 1-process and one 2-rank run (module doc, 4)",
    )
    parser.add_argument("--iters", default="20", help="micro collective iterations per size")
    parser.add_argument("--timeout", default="900", help="seconds before a case is killed")
    parser.add_argument("--db", type=Path, help="database to create (default: a temporary one)")
    args = parser.parse_args()
    nets = args.network or list(DEFAULT_NETWORKS)
    for net in nets:  # a wrong name fails here, not after minutes of measuring
        try:
            models.get(net.model).resolve_size(net.size)
        except (models.UnknownModelError, models.SizeError) as exc:
            parser.error(f"--network {net}: {exc}")
    if args.runs < 1 or args.rounds < 1:
        parser.error(f"--runs {args.runs} --rounds {args.rounds}: each must be 1 or more")
    if args.db is not None and args.db.exists():
        parser.error(
            f"--db {args.db} exists: give a new path (the predictions must see only this run)"
        )

    read, complete = Reader(), True
    with tempfile.TemporaryDirectory(prefix="predict-vs-measured-") as tmp:
        db = args.db or Path(tmp) / "trainperf.db"
        micro = trainperf("micro", "collective", *COLLECTIVE, "--iters", args.iters, "--db", db)
        complete &= micro is not None and micro.get("status") == "ok"
        device = read.get(micro, "device", "micro collective") or {}
        print(f"  backend {device.get('backend')}, {device.get('threads')} thread(s) per rank")
        loaded = trainperf("micro", "collective", *UNDER_LOAD, "--db", db)
        complete &= loaded is not None and loaded.get("status") == "ok"
        load = read.get(loaded, "metrics.under_load", "micro collective --under-load") or {}
        print(
            f"  under load: all-reduce {fmt(load.get('busbw_slowdown'), '.3g')}x, "
            f"GEMM {fmt(load.get('gemm_slowdown'), '.3g')}x slower beside each other (median "
            f"over sizes); a rank's GEMM {fmt(load.get('neighbour_slowdown'), '.3g')}x slower "
            "beside the other ranks'"
        )
        calibration = {net: run_case(net, db, args, runs=args.runs) for net in nets}
        # All predictions before any 2-rank run: the calibration must not see the answer.
        predictions = {net: predict(net, db) for net in nets}
        rounds = {net: Rounds() for net in nets}
        for net in nets:
            for _ in range(args.rounds):
                rounds[net].singles.append(run_case(net, db, args))
                rounds[net].ddp.append(run_case(net, db, args, *DDP))
            rounds[net].singles.append(run_case(net, db, args))
        complete &= all(calibration.values()) and all(predictions.values())
        complete &= all(all(r.singles) and all(r.ddp) for r in rounds.values())
        mismatched = report(nets, calibration, rounds, predictions, read)
        for net in nets:
            show_terms(net, predictions[net], read)
        if args.db:
            print(f"\ndatabase kept: {db}")
    print()
    for net in mismatched:
        print(f"MISMATCH: {net}: predicted and measured efficiency differ by > 10 points")
    if read.missing:
        print("keys missing from the JSON (shown as -): " + "; ".join(sorted(read.missing)))
    if not complete:
        print("INCOMPLETE: a command failed or a case is not ok (see above)")
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())
