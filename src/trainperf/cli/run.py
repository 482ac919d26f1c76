"""The verbs of measuring and listing: ``run``, ``suites``, ``maxbatch``, ``models`` and
``results`` (registered in trainperf.cli)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import click

from trainperf.case.modes import RANK_MODES
from trainperf.cli.common import (
    apply_options,
    batch_size_option,
    case_from_flags,
    case_options,
    choice_option,
    count_option,
    db_option,
    emit_json,
    fail,
    format_option,
    framework_option,
    json_option,
    one_output,
    parallel_options,
    rdzv_option,
    report_command,
    result_filter_options,
    sharding_options,
    show_table,
    stderr,
    stdout,
    table_output_options,
    table_width,
    tell_if_none_selected,
    tell_other_nodes,
    warn_deprecated,
    wide_option,
    workers_option,
)
from trainperf.cli.flag_types import EXIT_FAILED_CASES, BadInput, PositiveInt, seed_range
from trainperf.cli.store_access import (
    exit_if_not_stored,
    open_machine,
    reading_store,
    store_or_save_aside,
    writing_store,
)
from trainperf.report.cells import escape

# Flags that describe one case; a suite sets these in its file instead.
CASE_FLAGS = (
    "model",
    "framework",
    "batch_size",
    "image_size",
    "seq_len",
    "precision",
    "steps",
    "device",
    "channels_last",
    "cudnn_benchmark",
    "compile_",
    "threads",
    "timeout_s",
    "devices",
    "nodes",
    "parallel",
    "scaling",
    "bucket_mb",
    "grad_compression",
    "static_graph",
    "reshard_after_forward",
    "fsdp_reduce",
    "activation_checkpointing",
    "grad_accum",
    "data",
    "workers",
)


@click.command()
@click.argument("suite_name", metavar="[SUITE]", required=False)
@click.option("--model", "-m", help="zoo model (see `trainperf models`) or package.module:function")
@click.option(
    "--batch-size",
    "-b",
    type=PositiveInt(),
    help="samples per step per device (with --model: 1 when left out)",
)
@click.option(
    "--steps",
    default="adaptive",
    show_default=True,
    help="fixed:W:N or adaptive[:TARGET[:MAX_STEPS[:MAX_SECONDS]]]: the step budget of "
    "a case, shared by its runs",
)
@click.option(
    "--runs",
    default="adaptive",
    show_default=True,
    help="independent runs (fresh processes) per case: N, or adaptive[:TARGET[:MAX_RUNS"
    "[:MAX_SECONDS]]] (at least 3, more until the between-run 95% CI is within ±TARGET)",
)
@framework_option
@case_options
@click.option(
    "--data",
    default="synthetic",
    show_default=True,
    help="synthetic, cifar10:DIR, imagefolder:DIR, tokens:FILE or jpeg-sample",
)
@workers_option(0, "data-loader processes per device (real data only)")
@db_option()
@json_option
@parallel_options
@rdzv_option
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="FIELD=VALUE",
    help="set a case field in every case of the suite, e.g. --set device=cpu",
)
@click.option("--fresh", is_flag=True, help="measure every case again, even those already done")
@click.option(
    "--order-seed",
    type=seed_range(),
    help="seed of the shuffled order of the runs (default: a random one, stored)",
)
@click.pass_context
def run(
    ctx: click.Context,
    suite_name: str | None,
    overrides: tuple[str, ...],
    fresh: bool,
    order_seed: int | None,
    rdzv_endpoint: str | None,
    db: Path,
    as_json: bool,
    **flags: Any,
) -> None:
    """Run a suite (a built-in name or a YAML file; default: quick) or one case from flags.

    Every case is measured in several independent runs (fresh processes), the runs of
    all cases interleaved in a shuffled order. A rerun of a suite against the same
    database resumes: cases with an ok result for this system and suite version are not
    measured again, and a case cut short keeps its finished runs (--fresh measures all).
    """
    from trainperf.case.suite import SuiteError, resolve
    from trainperf.launch.sweep_items import SweepItem, planned_item
    from trainperf.store.access import StoreUnavailable

    given = [
        param.opts[0]
        for param in ctx.command.params
        if param.name in CASE_FLAGS
        and ctx.get_parameter_source(param.name) is not click.core.ParameterSource.DEFAULT
    ]
    if flags["model"] is None and given:
        raise BadInput(f"{', '.join(given)} describe one case and need --model")
    if flags["model"] is not None and (suite_name is not None or overrides):
        raise BadInput("give a suite (with --set) or --model, not both")
    _check_runs(flags["runs"])
    suite = None
    if flags["model"] is None:
        if ctx.get_parameter_source("runs") is not click.core.ParameterSource.DEFAULT:
            overrides += (f"runs={flags['runs']}",)  # --runs sets the runs of every case
        try:  # before reading the machine (which imports torch): a typo answers at once
            suite = resolve("quick" if suite_name is None else suite_name)
            if overrides:
                suite = suite.with_overrides(list(overrides))
        except SuiteError as exc:
            raise BadInput(str(exc)) from None
    record, capabilities = open_machine(db)
    if suite is not None:
        try:
            skips = suite.check(capabilities)
        except SuiteError as exc:
            raise BadInput(str(exc)) from None
        items = [planned_item(p, skips.get(p.key)) for p in suite.planned]
    else:
        # One sample (sequence) per device unless given: always the smallest step, and the
        # per-device batch large language models are measured at (torchtitan's Llama 3 8B).
        fields = {k: v for k, v in flags.items() if k != "devices"}
        fields["batch_size"] = flags["batch_size"] or 1
        items = [
            SweepItem(case_from_flags(capabilities, **fields, devices=devices))
            for devices in flags["devices"] or [1]
        ]

    order_seed = _tell_other_nodes(items, rdzv_endpoint, order_seed)
    try:
        outcome = _sweep(items, db, record, suite, fresh, rdzv_endpoint, order_seed)
    except StoreUnavailable as exc:  # before the first run: see trainperf.launch.sweep
        fail(f"{exc}: the sweep could not start; nothing was measured", EXIT_FAILED_CASES)
    not_stored = outcome.not_stored
    if as_json:
        emit_json(
            {
                "suite": suite.summary() if suite else None,
                "sweep_id": outcome.sweep_id,
                "order_seed": outcome.order_seed,
                "interrupted": outcome.interrupted,
                "counts": outcome.counts(),
                "results": outcome.results,
                "not_stored": not_stored.as_dict(outcome.not_run) if not_stored else None,
            }
        )
    else:
        from trainperf.report.sweep import summary_table
        from trainperf.report.tables import results_table

        title = f"trainperf on {record['hostname']}" + (f": suite {suite.name}" if suite else "")
        show_table(results_table(outcome.results, title=escape(title), width=table_width()))
        show_table(summary_table(outcome.results))
        if not not_stored:
            stderr.print(
                f"stored in {db} (sweep {outcome.sweep_id}, run order seed {outcome.order_seed})",
                markup=False,
            )
            stderr.print(f"figures of what is stored: {report_command(db)}", markup=False)
    if not_stored:  # what it measured is in a recovery file (trainperf.store.recovery)
        fail(not_stored.line(outcome.not_run), EXIT_FAILED_CASES)
    if outcome.interrupted:
        stderr.print(
            f"interrupted by {outcome.interrupted}: {outcome.not_run} case(s) not run; "
            "run the same command again to resume",
            markup=False,
        )
        sys.exit(128 + (outcome.exit_signal or 2))
    if outcome.failed:
        sys.exit(EXIT_FAILED_CASES)


def _check_runs(runs: str) -> None:
    """``--runs`` must be a run policy (trainperf.measure.runs)."""
    from trainperf.measure.runs import RunsError, parse_runs

    try:
        parse_runs(runs)
    except RunsError as exc:
        raise BadInput(f"--runs {runs}: {exc}") from None


def _tell_other_nodes(items: list, rdzv_endpoint: str | None, order_seed: int | None) -> int | None:
    """Cases on several nodes need the same command on every node, with the same order of
    runs: print it; return the order seed (one chosen here when none was given)."""
    nodes = max((item.case.nodes for item in items), default=1)
    if nodes == 1:
        return order_seed
    added = []
    if order_seed is None:
        # The nodes shuffle alike without talking: a seed from the cases themselves.
        cases = json.dumps([item.fields for item in items], sort_keys=True)
        order_seed = int(hashlib.sha256(cases.encode()).hexdigest()[:8], 16)
        added = ["--order-seed", str(order_seed)]
    tell_other_nodes(nodes, rdzv_endpoint, added)
    return order_seed


def _sweep(
    items: list,
    db: Path,
    record: dict,
    suite: Any,
    fresh: bool,
    rendezvous: str | None = None,
    order_seed: int | None = None,
) -> Any:
    from trainperf.doctor import summary_line, sweep_verdict
    from trainperf.launch.sweep import SweepEvents, run_sweep
    from trainperf.report.sweep import SweepDisplay

    doctor = sweep_verdict(db)  # stored with the sweep; `trainperf doctor` says more
    stderr.print(summary_line(doctor) + " (trainperf doctor for details)", markup=False)
    with (
        SweepDisplay(stderr, len(items)) as display,
        writing_store(db, display.on_store_wait) as store,
    ):
        events = SweepEvents(
            display.on_start, display.on_probe, display.on_run, display.on_result, display.on_wait
        )
        return run_sweep(
            items,
            store,
            record,
            suite=(suite.name, suite.version) if suite else None,
            fresh=fresh,
            events=events,
            label=f"suite {suite.name} {suite.version}" if suite else None,
            rendezvous=rendezvous,
            order_seed=order_seed,
            doctor=doctor,
        )


@click.command()
@click.option("--json", "as_json", is_flag=True, help="print a JSON array")
@format_option
def suites(as_json: bool, table_format: str) -> None:
    """List the built-in suites (run one with `trainperf run NAME`)."""
    from trainperf.case.suite import BUILTIN, builtin_path, load

    one_output(as_json, table_format)
    rows = [load(builtin_path(name)).summary() | {"source": "built-in"} for name in BUILTIN]
    if as_json:
        emit_json(rows)
    else:
        from trainperf.report.tables import suites_table

        show_table(suites_table(rows), table_format)


@click.command()
@click.argument("model")
@framework_option
@case_options
@db_option()
@json_option
@count_option("--start", 1, "first batch tried")
@click.option(
    "--limit",
    type=PositiveInt(),
    help="largest value tried (default: batch 65536; the model's longest sequence)",
)
@choice_option(
    "--find",
    ["batch", "seq-len"],
    "batch",
    "search the batch per device, or the sequence length at --batch-size",
)
@batch_size_option(1, "batch per device while searching the sequence length")
@count_option("--devices", 1, "devices per node")
@choice_option(
    "--parallel",
    ["auto", "none", *RANK_MODES],
    "auto",
    "data parallelism over --devices (fsdp: sharded)",
)
@apply_options(sharding_options)
def maxbatch(
    model: str,
    start: int,
    limit: int | None,
    find: str,
    batch_size: int,
    db: Path,
    as_json: bool,
    **flags: Any,
) -> None:
    """Find the largest batch per device (or, with --find seq-len, the longest sequence)
    that trains MODEL, alone or on --devices ranks (doubling, then bisection).

    Every probe is the case at one value in its own process or torchrun job (1 warm-up
    and 2 measured steps). A batch answer is stored; suites use it through
    `batch_size: max`. A sequence-length answer is printed only.
    """
    from trainperf.launch import maxbatch as search
    from trainperf.launch.runner import Interrupted

    dimension = "seq_len" if find == "seq-len" else "batch_size"
    if dimension == "seq_len":
        if flags.get("seq_len") is not None:
            raise BadInput("--find seq-len searches the sequence length: leave out --seq-len")
        flags["seq_len"] = 1
    else:
        batch_size = 1
    record, capabilities = open_machine(db)
    template = case_from_flags(capabilities, model=model, batch_size=batch_size, **flags)
    try:
        limit = search.search_limit(template, dimension, limit)
    except search.NotALanguageModel:
        raise BadInput(f"--find seq-len needs a language model of the zoo, not {model}") from None
    if start > limit:
        raise BadInput(f"--start {start} is above --limit {limit}")
    what = "batch" if dimension == "batch_size" else "sequence length"

    def show(probe: Any) -> None:
        verdict = "fits" if probe.fits else f"does not fit ({probe.status})"
        stderr.print(f"  {what} {probe.batch_size}: {verdict}", markup=False)

    label = template.label().replace(" b1", "").replace(" @1", "")
    stderr.print(f"searching the largest {what} of {label}", markup=False)
    try:
        found = search.run_search(
            template, start=start, limit=limit, on_probe=show, dimension=dimension
        )
    except search.SearchFailed as exc:
        fail(str(exc), EXIT_FAILED_CASES)
    except Interrupted as exc:
        fail(f"interrupted by {exc}: nothing stored", 128 + exc.signum)
    if dimension == "seq_len":
        document = search.longest_sequence(found, template)
        if as_json:
            emit_json(document)
        else:
            answer = found.batch_size or "none"
            note = f" ({found.note})" if found.note else ""
            stdout.print(f"longest sequence that trains: {answer}{note}", markup=False)
    else:
        document, not_stored = store_or_save_aside(
            db, lambda store: search.store_answer(store, record, template, found), "maxbatch"
        )
        if not_stored:  # in a recovery file: the id was the spool's
            document |= {"id": None, "not_stored": not_stored.as_dict()}
        if as_json:
            emit_json(document)
        else:
            answer = found.batch_size if found.batch_size else "none"
            stdout.print(
                f"largest batch that trains: {answer}" + (f" ({found.note})" if found.note else ""),
                markup=False,
            )
        exit_if_not_stored(document)
    if found.batch_size is None:
        sys.exit(EXIT_FAILED_CASES)


@click.command()
@table_output_options("print a JSON array")
def models(as_json: bool, table_format: str, wide: bool) -> None:
    """List the zoo with parameters, FLOPs per sample and gradient bytes."""
    from trainperf.analysis.zoo_cache import zoo_rows

    one_output(as_json, table_format)
    rows = zoo_rows()
    if as_json:
        emit_json(rows)
    else:
        from trainperf.report.tables import models_table

        show_table(models_table(rows, table_width(table_format, wide)), table_format, wide)


@click.command()
@db_option()
@result_filter_options
@click.option("--json", "as_json", is_flag=True, help="print one JSON document, systems once")
@click.option(
    "--per-step",
    "with_steps",
    is_flag=True,
    help="with --json: the runs' per-step lists too (step times, warm-up, ranks, data waits)",
)
# deprecated: --steps is a step policy in run, profile and equivalence
@click.option("--steps", "old_steps", is_flag=True, hidden=True)
@click.option("--csv", "as_csv", is_flag=True, help="print CSV")
@format_option
@wide_option
def results(
    db: Path,
    result_filter: Any,
    as_json: bool,
    with_steps: bool,
    old_steps: bool,
    as_csv: bool,
    table_format: str,
    wide: bool,
) -> None:
    """Show the results stored in the database (those the filters select): by default
    the columns that tell results apart and their throughput, fitted to the terminal (100
    columns piped, or COLUMNS); --wide for every column."""
    if old_steps:
        warn_deprecated("results --steps", "--per-step")
    with_steps = with_steps or old_steps
    one_output(as_json, table_format, ("--csv", as_csv))
    if with_steps and not as_json:
        flag = "--steps" if old_steps else "--per-step"
        raise BadInput(f"{flag} goes with --json: tables and CSV show no per-step lists")
    with reading_store(db) as store:
        if as_json:
            from trainperf.store.results_json import write_results

            write_results(store.select(result_filter, runs=True, steps=with_steps), sys.stdout)
        elif as_csv:
            from trainperf.report.tables import results_csv_lines

            sys.stdout.writelines(results_csv_lines(store.select(result_filter)))
        else:
            from trainperf.report.tables import results_table

            hostnames = {f: r.get("hostname") for f, r in store.system_records().items()}
            width = table_width(table_format, wide)
            selected = store.select(result_filter)
            tell_if_none_selected(selected, db, result_filter, "results")
            table = results_table(
                selected,
                wide=wide,
                width=width,
                systems=hostnames,
                doctor_verdicts=store.doctor_verdicts,
            )
            show_table(table, table_format, wide)
