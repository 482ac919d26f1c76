"""``trainperf train`` (time to accuracy) and ``trainperf isoaccuracy`` (registered in
trainperf.cli).

A training run goes to a child process (torchrun over ``--devices`` processes per node on
``--nodes`` nodes when more than one), like a benchmark case: a crash, an out-of-memory or
a hang becomes a stored status. The parent stores the run when it starts and again after
every evaluation the child reports (``progress.jsonl``), so Ctrl-C or a crash keeps what
was reached. On several nodes every node runs the same command and only the node of rank
0 hears of the run (rank 0 alone writes the progress file): it stores the run when the
progress file says it started, and the other nodes store nothing. A database that cannot
be written meanwhile (locked or full for the store's whole wait) does not stop the run;
its end then goes to a recovery file that ``trainperf import`` adds to the row (``Progress``).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import click

from trainperf.case.stored import ADDED_TRAIN_FIELDS
from trainperf.case.training import OPTIMIZERS
from trainperf.cli.common import (
    batch_size_option,
    check_out_file,
    count_option,
    db_option,
    device_option,
    emit_json,
    precision_option,
    rdzv_option,
    resolve_device,
    stderr,
    stdout,
    tell_other_nodes,
    workers_option,
)
from trainperf.cli.flag_types import (
    EXIT_FAILED_CASES,
    BadInput,
    FiniteFloat,
    NonEmptyPath,
    PositiveInt,
    seed_range,
    timeout_seconds,
)
from trainperf.cli.store_access import open_machine, reading_store, writing_store
from trainperf.core.limits import INT64_MAX


def parse_target(text: str) -> tuple[str, float]:
    """``top1=0.80`` -> ("top1", 0.8); bad text is bad input."""
    from trainperf.case.training import HIGHER_IS_BETTER

    metric, _, value = text.partition("=")
    allowed = ", ".join(f"{m}=VALUE" for m in HIGHER_IS_BETTER)
    if metric not in HIGHER_IS_BETTER or not value:
        raise BadInput(f"--target '{text}' is not valid: allowed {allowed}")
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise BadInput(f"--target '{text}': '{value}' is not a finite number")
    if metric != "eval_loss" and not 0 < number <= 1:
        raise BadInput(f"--target '{text}': accuracy targets are fractions in (0, 1]")
    if metric == "eval_loss" and number <= 0:
        raise BadInput(f"--target '{text}': a loss target must be positive")
    return metric, number


def _check_config(config: dict[str, Any], capabilities: dict, momentum_given: bool) -> None:
    """Everything that can be refused before a process starts: the run's own checks
    (``TrainConfig``: schedule, sizes, optimizer settings; ``check_metric``), the model and
    data, and a ``--momentum`` the optimizer would ignore (AdamW's)."""
    from trainperf import models
    from trainperf.case.training import TrainConfig
    from trainperf.convergence.trainer import check_metric, requested_size
    from trainperf.datasets import check_source, parse_data

    try:
        # A user's network is only looked up here: its code runs in the job's process,
        # which checks it against the data and the target (trainer.train).
        spec = models.look_up(config["model"])
    except ValueError as exc:  # UnknownModelError, CustomModelError
        raise BadInput(str(exc)) from None
    try:
        source = parse_data(config["data"])
        if not source.is_synthetic and spec is not None:
            size = config["image_size"] if spec.size_name == "image_size" else config["seq_len"]
            check_source(source, spec, size)
    except ValueError as exc:  # DataError included
        raise BadInput(str(exc)) from None
    if source.is_synthetic:
        raise BadInput(
            "--data synthetic has nothing to learn: give cifar10:DIR, imagefolder:DIR, "
            "tokens:FILE or jpeg-sample"
        )
    try:
        run = TrainConfig(**config)  # ScheduleError and the other field checks
        if spec is not None:
            requested_size(spec, run)
            check_metric(spec, run.target_metric)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    optimizer = run.optimizer or (spec.optimizer if spec is not None else None)
    if momentum_given and optimizer == "adamw":
        raise BadInput(
            f"--momentum: {config['model']} trains with adamw, which takes no momentum; "
            "give --optimizer sgd or lars, or leave --momentum out"
        )
    available = capabilities.get(config["device"])
    if available is None or (config["device"] == "cuda" and available.count < config["devices"]):
        have = 0 if available is None else available.count
        raise BadInput(
            f"--device {config['device']} with --devices {config['devices']}: this machine "
            f"has {have} {config['device']} device(s) (`trainperf system` lists them): "
            "give fewer --devices or --device cpu"
        )


def _mllog_path(base: Path, index: int, runs: int) -> Path:
    """The log of run ``index``: ``base`` itself for one run, else ``NAME.runK.EXT``."""
    return base if runs == 1 else base.with_name(f"{base.stem}.run{index + 1}{base.suffix}")


class Progress:
    """Reads the child's progress file as it grows, stores new evaluations, prints each.

    The run's row is made by ``stored_id``: before the child starts on one node, and on
    several when the progress file first speaks (only rank 0's node has one). A database
    that cannot be written while the run goes on (locked or full for the store's whole
    wait, damaged) does not stop it: the evaluations are kept and written with the next
    one; the run's end is written by ``finish``, or saved aside (``store_final``)."""

    def __init__(self, store: Any, record: dict, config: dict[str, Any], path: Path) -> None:
        self.store, self.record, self.config, self.path = store, record, config, path
        self.run_id: int | None = None
        self.identity: tuple[str, str] | None = None  # the row's (uid, created_at)
        self.evaluations: list[dict[str, Any]] = []
        self.unstored = False  # the last write of progress failed (and was told)
        self._offset = 0  # bytes of whole lines already read

    def stored_id(self) -> int:
        """The run's id in the store, its row added (status running) on the first call."""
        from trainperf.convergence.records import start_run

        if self.run_id is None:
            self.run_id = start_run(self.store, self.record, self.config)
            row = self.store.train_run(str(self.run_id))
            self.identity = (row["uid"], row["created_at"])
        return self.run_id

    def poll(self) -> None:
        if not self.path.exists():
            return
        with self.path.open("rb") as f:
            f.seek(self._offset)
            text = f.read()
        complete = text[: text.rfind(b"\n") + 1]  # whole lines only
        if not complete:
            return
        self._offset += len(complete)
        fresh = []
        for line in complete.decode().splitlines():
            event = json.loads(line)
            if event.get("event") == "eval":
                fresh.append({k: v for k, v in event.items() if k != "event"})
        self.evaluations += fresh
        if fresh or self.run_id is None:
            self._store_progress()
        for e in fresh:
            self._show(e)

    def _store_progress(self) -> None:
        """The run's row and its evaluations so far, written; a write that fails is told
        once and made again with the next evaluation (the list replaces the stored one)."""
        from trainperf.cli.store_access import store_write_errors

        try:
            self.store.update_train_run(self.stored_id(), self.evaluations)
        except store_write_errors() as exc:
            if not self.unstored:
                stderr.print(
                    f"could not store the run's progress ({exc}): the run goes on; "
                    "trying again at the next evaluation and when it ends",
                    markup=False,
                )
            self.unstored = True
        else:
            self.unstored = False

    def finish(self, target: Any, **final: Any) -> dict[str, Any]:
        """The run's end (``Store.update_train_run``'s fields) written to ``target``: the
        database, or a spool whose row carries the database row's uid and start, so that
        importing the recovery file completes that row (``Store.import_documents``); the
        run's document as ``target`` holds it."""
        from trainperf.convergence.records import start_run

        if target is self.store:
            run_id = self.stored_id()
        else:
            run_id = start_run(target, self.record, self.config, self.identity)
        target.update_train_run(run_id, **final)
        return target.train_run(str(run_id))

    def _show(self, e: dict[str, Any]) -> None:
        metric, target = self.config["target_metric"], self.config["target_value"]
        value = e.get(metric)
        shown = "-" if value is None else f"{value:.4f}"
        eta = e.get("eta_s")
        eta_text = "-" if eta is None else time.strftime("%H:%M:%S", time.gmtime(eta))
        stderr.print(
            f"epoch {e['epoch']}/{self.config['max_epochs']}  {metric} {shown} "
            f"(target {metric}={target:g})"
            f"  eval loss {e.get('eval_loss', float('nan')):.4f}  at {e['time_s']:.1f} s"
            f"  time left ≤ {eta_text}",
            markup=False,
            highlight=False,
        )


def store_final(db: Path, progress: Progress, **final: Any) -> dict[str, Any]:
    """The run's end stored, and its stored document; or, where the database cannot be
    written now, saved in a recovery file (the line that says where is printed at once),
    the document's ``id`` null and ``not_stored`` set: hours of training are never lost
    to a lock. ``final``: ``Store.update_train_run``'s fields."""
    from trainperf.cli.store_access import store_or_save_aside

    run, not_stored = store_or_save_aside(
        db, lambda target: progress.finish(target, **final), "train", into=progress.store
    )
    if not_stored is None:
        return run
    stderr.print(not_stored.line(), markup=False)
    return run | {"id": None, "not_stored": not_stored.as_dict()}


def _train_once(
    db: Path,
    store: Any,
    record: dict,
    config: dict[str, Any],
    document: dict[str, Any],
    timeout: float | None,
    rendezvous: str | None,
) -> dict[str, Any] | None:
    """Run and store one training run; its stored document, or None on a node that only
    took part (the node of rank 0 stores the run)."""
    from trainperf.convergence.job import PROGRESS_FILE
    from trainperf.launch.runner import ChildJob, Interrupted, StopFlag, job_directory, run_job

    child = ChildJob.of_training(config, timeout)
    with job_directory() as tmp:
        progress = Progress(store, record, config, tmp / PROGRESS_FILE)
        if config["nodes"] == 1:
            progress.stored_id()  # stored before it starts: Ctrl-C in start-up keeps it
        try:
            with StopFlag().installed() as stop:
                launched = document | {"launched_at": time.time()}
                result = run_job(launched, child, tmp, stop, rendezvous, on_poll=progress.poll)
        except Interrupted as exc:
            progress.poll()
            if progress.run_id is None and not progress.evaluations:
                stderr.print(f"interrupted by {exc}: this node stored nothing", markup=False)
                sys.exit(128 + exc.signum)
            stored = store_final(
                db,
                progress,
                evaluations=progress.evaluations,
                status="aborted",
                error={"type": "Interrupted", "message": f"stopped by {exc}"},
            )
            where = "saved aside" if stored["id"] is None else f"stored run {stored['id']}"
            stderr.print(
                f"interrupted by {exc}: {where} with {len(progress.evaluations)} evaluation(s)",
                markup=False,
            )
            _show_run(stored)
            sys.exit(128 + exc.signum)
        progress.poll()
    if result.get("follower"):
        return None
    metrics = result.get("metrics") or {}
    if result["status"] == "ok":
        return store_final(
            db,
            progress,
            evaluations=metrics.get("evaluations", progress.evaluations),
            status=metrics.get("status", "ok"),
            reached=bool(metrics.get("reached")),
            time_to_target_s=metrics.get("time_to_target_s"),
            metrics={k: v for k, v in metrics.items() if k != "evaluations"},
        )
    return store_final(
        db,
        progress,
        evaluations=progress.evaluations,
        status=result["status"],
        error=result.get("error"),
    )


def _show_run(run: dict[str, Any]) -> None:
    from trainperf.report.convergence import run_table, time_split_text

    stdout.print(run_table(run))
    if run["reached"]:
        stdout.print(
            f"time to target: {run['time_to_target_s']:.1f} s (MLPerf's clock: from run start)",
            markup=False,
        )
    elif run["status"] == "ok":
        stdout.print("target not reached within the epoch limit", markup=False)
    else:
        message = (run.get("error") or {}).get("message", "")
        stdout.print(f"{run['status']}: {message}", markup=False)
    if split := run["metrics"].get("time_split"):
        stdout.print(time_split_text(split), markup=False)


@click.command()
@click.argument("model")
@click.option("--data", required=True, help="cifar10:DIR, imagefolder:DIR or tokens:FILE")
@click.option("--target", "target_text", required=True, help="top1=0.80, top5=... or eval_loss=...")
@count_option("--max-epochs", 30)
@batch_size_option(128, "samples per step per device")
@click.option(
    "--lr-schedule",
    default="piecewise:0.1@0,0.01@30,0.001@60",
    show_default=True,
    help="piecewise:LR@EPOCH,...  |  cosine[:BASE_LR]  |  constant:LR",
)
@click.option("--warmup-epochs", type=FiniteFloat(min=0), default=0.0, show_default=True)
@click.option(
    "--optimizer",
    type=click.Choice(OPTIMIZERS),
    help="default: the model's own (sgd for the CNNs, adamw for the language models); "
    "lars: SGD with momentum and a per-layer trust ratio (You et al. 2017)",
)
@click.option(
    "--momentum",
    type=FiniteFloat(min=0, max=1, max_open=True),
    help="sgd and lars momentum  [default: 0.9]",
)
@click.option(
    "--weight-decay",
    type=FiniteFloat(min=0),
    default=ADDED_TRAIN_FIELDS["weight_decay"],
    show_default=True,
    help="L2 penalty (AdamW: decoupled; lars: not on biases and norm weights)",
)
@count_option(
    "--devices",
    1,
    "processes (one device each) per node under torchrun with DDP",
)
@count_option("--nodes", 1, "nodes, each running this same command (torchrun rendezvous)")
@rdzv_option
@workers_option(2, "data-loader processes per device")
@precision_option
@device_option
@click.option("--image-size", type=PositiveInt(), help="image side (imagefolder data)")
@click.option("--seq-len", type=PositiveInt(), help="sequence length (token data)")
@click.option("--seed", type=seed_range(), default=0, show_default=True)
@count_option(
    "--runs",
    1,
    "repeat with seeds seed, seed+1, ...; 3 or more give the olympic mean",
)
@click.option(
    "--mllog",
    type=NonEmptyPath(path_type=Path),
    help="write an MLPerf-style log here (new, or a regular file to replace)",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=timeout_seconds(),
    help="seconds before a run is killed and stored as timeout",
)
@db_option()
@click.option("--json", "as_json", is_flag=True, help="print one JSON document")
def train(
    model: str,
    target_text: str,
    runs: int,
    mllog: Path | None,
    timeout_s: float | None,
    rdzv_endpoint: str | None,
    momentum: float | None,
    db: Path,
    as_json: bool,
    **options: Any,
) -> None:
    """Train MODEL on real data until --target (or --max-epochs): time to accuracy."""
    from trainperf.convergence.olympic import olympic_mean
    from trainperf.convergence.records import config_key

    metric, value = parse_target(target_text)
    last_seed = options["seed"] + runs - 1  # run k trains with seed + k - 1
    if last_seed > INT64_MAX:
        raise BadInput(
            f"--seed {options['seed']} with --runs {runs}: the last run's seed would be "
            f"{last_seed}, above {INT64_MAX}"
        )
    record, capabilities = open_machine(db)
    device = resolve_device(options.pop("device"), capabilities)
    config = {
        "model": model,
        "target_metric": metric,
        "target_value": value,
        "device": device,
        "momentum": ADDED_TRAIN_FIELDS["momentum"] if momentum is None else momentum,
        **options,
    }
    _check_config(config, capabilities, momentum_given=momentum is not None)
    if mllog is not None:  # every run's log, before the first run starts
        for index in range(runs):
            check_out_file(_mllog_path(mllog, index, runs), "--mllog")
    if config["nodes"] > 1:
        tell_other_nodes(config["nodes"], rdzv_endpoint)

    stored, followed = [], 0
    with writing_store(db) as store:
        for index in range(runs):
            this = config | {"seed": config["seed"] + index}
            document = {
                "kind": "train",
                "config": this,
                "timeout_s": timeout_s,
                "mllog": str(_mllog_path(mllog, index, runs)) if mllog else None,
                "system_name": record.get("hostname", "unknown"),
            }
            stderr.print(
                f"run {index + 1}/{runs}: {model} on {config['data']} "
                f"until {target_text} (seed {this['seed']})",
                markup=False,
            )
            run = _train_once(db, store, record, this, document, timeout_s, rdzv_endpoint)
            if run is None:
                followed += 1
                stderr.print("this node took part; the node of rank 0 stores the run", markup=False)
                continue
            stored.append(run)
            if not as_json:
                _show_run(run)
            if run.get("not_stored"):  # a run started now could not be stored either
                stderr.print(f"{runs - index - 1} run(s) not started", markup=False)
                break
        same = [r for r in store.train_runs(config_key(config)) if r["status"] == "ok"]
    olympic = olympic_mean([r["time_to_target_s"] if r["reached"] else None for r in same])
    if as_json:
        document = {"runs": stored, "olympic": olympic, "config_runs": len(same)}
        emit_json(document | ({"followed": followed} if followed else {}))
    else:
        from trainperf.report.convergence import olympic_line

        stdout.print(olympic_line(olympic, len(same)), markup=False)
    if any(r["status"] != "ok" or r.get("not_stored") for r in stored):
        sys.exit(EXIT_FAILED_CASES)


@click.command()
@click.argument("run_a")
@click.argument("run_b")
@click.option("--top1-tolerance", type=FiniteFloat(min=0), default=0.02, show_default=True)
@click.option(
    "--loss-tolerance",
    type=FiniteFloat(min=0),
    default=0.05,
    show_default=True,
    help="relative",
)
@db_option()
@click.option("--json", "as_json", is_flag=True, help="print one JSON document")
def isoaccuracy(
    run_a: str, run_b: str, top1_tolerance: float, loss_tolerance: float, db: Path, as_json: bool
) -> None:
    """Do two stored training runs agree at equal samples seen (loss and accuracy curves)?"""
    from trainperf.convergence.isoaccuracy import compare_curves

    with reading_store(db, made_by="train") as store:
        runs = [store.train_run(ref) for ref in (run_a, run_b)]
    for ref, run in zip((run_a, run_b), runs, strict=True):
        if run is None:
            raise BadInput(
                f"no training run '{ref}' in {db}: give a run id or uid "
                "(`trainperf train --json` prints them)"
            )
    a, b = (dict(r, label=_run_label(r)) for r in runs)  # type: ignore[arg-type]
    document = compare_curves(
        a, b, tolerance_top1=top1_tolerance, tolerance_loss_rel=loss_tolerance
    )
    if as_json:
        emit_json(document)
        return
    from trainperf.report.isoaccuracy import isoaccuracy_table

    stdout.print(isoaccuracy_table(document))


def _run_label(run: dict[str, Any]) -> str:
    c = run["config"]
    return (
        f"run {run['id']} {c['model']} {c['precision']} x{c['devices']} "
        f"on {run['system'].get('hostname', '?')}"
    )
