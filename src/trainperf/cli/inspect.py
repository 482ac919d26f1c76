"""The verbs that look at a machine or at stored results: ``scaling``, ``profile``,
``pareto``, ``system`` (registered in trainperf.cli)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from trainperf.cli.common import (
    batch_size_option,
    case_from_flags,
    case_options,
    db_option,
    emit_json,
    fail,
    json_option,
    one_output,
    parallel_options,
    rdzv_option,
    result_filter_options,
    show_table,
    stderr,
    stdout,
    table_output_options,
    table_width,
    tell_if_none_selected,
    tell_other_nodes,
    warn_deprecated,
)
from trainperf.cli.flag_types import (
    EXIT_FAILED_CASES,
    STEPS_METAVAR,
    BadInput,
    count_range,
    fixed_steps,
)
from trainperf.cli.store_access import (
    exit_if_not_stored,
    open_machine,
    reading_store,
    stored_micro,
)


@click.command()
@db_option()
@result_filter_options
@table_output_options("one JSON document: a row per device count")
def scaling(db: Path, result_filter: Any, as_json: bool, table_format: str, wide: bool) -> None:
    """Speedup, efficiency and exposed communication per model, setting and device count
    (of the ok results the filters select); a speed-up above linear is flagged unstable
    with the reason."""
    from trainperf.analysis.scaling import scaling_rows

    one_output(as_json, table_format)
    with reading_store(db) as store:
        selected = store.select(result_filter.ok_only(), oldest_first=True)
        rows = scaling_rows(selected)
    if as_json:
        emit_json({"rows": rows})
    else:
        tell_if_none_selected(selected, db, result_filter, "ok results")
        from trainperf.report.tables import scaling_table

        table = scaling_table(rows, wide=wide, width=table_width(table_format, wide))
        show_table(table, table_format, wide)


PROFILE_WARMUP = 3  # warm-up steps of `profile --steps N`, as before fixed:W:N


@click.command()
@click.argument("model")
@batch_size_option(32)
@click.option(
    "--steps",
    default="fixed:3:10",
    show_default=True,
    metavar=STEPS_METAVAR,
    help="W warm-up steps, then N profiled steps (run's syntax); N alone: N profiled steps "
    "after 3 warm-up steps",
)
@click.option("--warmup", type=count_range(), hidden=True)  # deprecated: --steps fixed:W:N
@click.option("--no-mkldnn", is_flag=True, help="switch oneDNN off (CPU engines)")
@case_options
@parallel_options
@rdzv_option
@db_option()
@json_option
def profile(
    model: str,
    batch_size: int,
    steps: str,
    warmup: int | None,
    no_mkldnn: bool,
    devices: tuple[int, ...] | None,
    rdzv_endpoint: str | None,
    db: Path,
    as_json: bool,
    **flags: Any,
) -> None:
    """Where the time of a training step goes: per layer, optimizer, operator categories;
    with --devices N under DDP or FSDP, on every rank, communication and its exposed part."""
    from trainperf.launch.runner import ChildJob, Interrupted, StopFlag, job_directory, run_job

    steps_warmup, measured = fixed_steps(steps, "profile")
    if warmup is not None:
        warn_deprecated("--warmup", "--steps fixed:W:N")
        if steps_warmup is not None:
            raise BadInput(f"--steps {steps} gives the warm-up: leave out --warmup")
    warmup = next(w for w in (steps_warmup, warmup, PROFILE_WARMUP) if w is not None)
    if devices is not None and len(devices) > 1:
        shown = ",".join(map(str, devices))
        raise BadInput(f"--devices {shown}: profile takes one device count (run it per count)")
    record, capabilities = open_machine(db)
    case = case_from_flags(
        capabilities,
        model=model,
        batch_size=batch_size,
        mkldnn=not no_mkldnn,
        **({"devices": devices[0]} if devices else {}),
        **flags,
    )
    document = {"kind": "profile", "case": case.model_dump(), "steps": measured, "warmup": warmup}
    if case.nodes > 1:
        tell_other_nodes(case.nodes, rdzv_endpoint)
    stderr.print(f"profiling {case.label()}", markup=False)
    try:
        with (
            job_directory() as tmp,
            StopFlag().installed() as stop,
        ):
            result = run_job(document, ChildJob.of_case(case), tmp, stop, rdzv_endpoint)
    except Interrupted as exc:
        fail(f"interrupted by {exc}: nothing stored", 128 + exc.signum)
    if result.get("follower"):
        stderr.print("this node took part; the node of rank 0 stores the result")
        return
    result = stored_micro(db, record, document, result)
    if as_json:
        emit_json(result)
    elif result["status"] == "ok":
        from trainperf.report.profile import profile_view

        stdout.print(profile_view(result["metrics"], case.label()))
    else:
        stdout.print(f"{result['status']}: {result['error']['message']}", markup=False)
    exit_if_not_stored(result)
    if result["status"] != "ok":
        sys.exit(EXIT_FAILED_CASES)


@click.command()
@db_option()
@result_filter_options
@click.option("--all", "show_all", is_flag=True, help="also list the dominated configurations")
@table_output_options("one JSON document: fronts per network")
def pareto(
    db: Path, result_filter: Any, show_all: bool, as_json: bool, table_format: str, wide: bool
) -> None:
    """Configurations on the power-performance Pareto front, per network (of the ok
    results the filters select)."""
    from trainperf.analysis.pareto import pareto_fronts

    one_output(as_json, table_format)
    with reading_store(db) as store:
        selected = store.select(result_filter.ok_only(), oldest_first=True)
        fronts = pareto_fronts(selected)
    if as_json:
        emit_json(fronts)
        return
    tell_if_none_selected(selected, db, result_filter, "ok results")
    from trainperf.report.tables import pareto_table

    show_table(pareto_table(fronts, show_all, table_width(table_format, wide)), table_format, wide)
    if fronts["left_out"]:
        left_out = f"{fronts['left_out']} ok result(s) left out: {fronts['left_out_reason']}"
        stderr.print(left_out, markup=False)


@click.command("system")
@click.option("--json", "as_json", is_flag=True, help="one JSON document")
def system_(as_json: bool) -> None:
    """What this machine is: CPU, memory, GPUs and their topology, network, software."""
    from trainperf.system import inventory as system

    record = system.collect(with_jax_devices=True)
    if as_json:
        emit_json(record)
        return
    from trainperf.report.system import system_view

    stdout.print(system_view(record))
