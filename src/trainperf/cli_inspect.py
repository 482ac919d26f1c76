"""The verbs that look at a machine or at stored results: ``scaling``, ``profile``,
``pareto``, ``system`` (kept apart from cli.py so each file stays readable; registered there)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from trainperf.cli import (
    DEFAULT_DB,
    EXIT_FAILED_CASES,
    BadInput,
    PositiveInt,
    _case_options,
    _db_option,
    _emit_json,
    _fail,
    _format_option,
    _json_option,
    _one_output,
    _open_machine,
    _read_results,
    show_table,
    stderr,
    stdout,
)


@click.command()
@click.option("--db", default=DEFAULT_DB, show_default=True, type=click.Path(path_type=Path))
@click.option("--model", "-m", help="only this model")
@click.option("--json", "as_json", is_flag=True, help="one JSON document: a row per device count")
@_format_option
def scaling(db: Path, model: str | None, as_json: bool, table_format: str) -> None:
    """Speedup, efficiency and exposed communication per model, setting and device count."""
    from trainperf.analysis.scaling import scaling_rows

    _one_output(as_json, table_format)
    rows = scaling_rows(_read_results(db, model))
    if as_json:
        _emit_json({"rows": rows})
    else:
        from trainperf.report.tables import scaling_table

        show_table(scaling_table(rows), table_format)


@click.command()
@click.argument("model")
@click.option("--batch-size", "-b", type=PositiveInt(), default=32, show_default=True)
@click.option("--steps", type=PositiveInt(), default=10, show_default=True, help="profiled steps")
@click.option("--warmup", type=click.IntRange(min=0), default=3, show_default=True)
@click.option("--no-mkldnn", is_flag=True, help="switch oneDNN off (CPU engines)")
@_case_options
@_db_option
@_json_option
def profile(
    model: str,
    batch_size: int,
    steps: int,
    warmup: int,
    no_mkldnn: bool,
    db: Path,
    as_json: bool,
    **flags: Any,
) -> None:
    """Where the time of a training step goes: per layer, optimizer, operator categories."""
    import tempfile

    from trainperf.case import CaseError, check_case, make_case
    from trainperf.runner import Interrupted, Launch, StopFlag, run_job
    from trainperf.store import Store

    record, capabilities = _open_machine(db)
    if flags["device"] == "auto":
        flags["device"] = "cuda" if "cuda" in capabilities else "cpu"
    try:
        case = make_case(
            model=model,
            batch_size=batch_size,
            mkldnn=not no_mkldnn,
            **{k.rstrip("_"): v for k, v in flags.items()},
        )
        check_case(case, capabilities)
    except CaseError as exc:
        raise BadInput(str(exc)) from None
    document = {"kind": "profile", "case": case.model_dump(), "steps": steps, "warmup": warmup}
    stderr.print(f"profiling {case.label()}", markup=False)
    try:
        with (
            tempfile.TemporaryDirectory(prefix="trainperf-") as tmp,
            StopFlag().installed() as stop,
        ):
            result = run_job(document, Launch(timeout_s=case.timeout_s), Path(tmp), stop)
    except Interrupted as exc:
        _fail(f"interrupted by {exc}: nothing stored", 128 + exc.signum)
    with Store(db) as store:
        result["id"] = store.add_micro(record, document, result)
    if as_json:
        _emit_json(result)
    elif result["status"] == "ok":
        from trainperf.report.profile import profile_view

        stdout.print(profile_view(result["metrics"], case.label()))
    else:
        stdout.print(f"{result['status']}: {result['error']['message']}", markup=False)
    if result["status"] != "ok":
        sys.exit(EXIT_FAILED_CASES)


@click.command()
@click.option("--db", default=DEFAULT_DB, show_default=True, type=click.Path(path_type=Path))
@click.option("--all", "show_all", is_flag=True, help="also list the dominated configurations")
@click.option("--json", "as_json", is_flag=True, help="one JSON document: fronts per network")
@_format_option
def pareto(db: Path, show_all: bool, as_json: bool, table_format: str) -> None:
    """Configurations on the power-performance Pareto front, per network."""
    from trainperf.analysis.pareto import pareto_fronts

    _one_output(as_json, table_format)
    fronts = pareto_fronts(_read_results(db))
    if as_json:
        _emit_json(fronts)
        return
    from trainperf.report.tables import pareto_table

    show_table(pareto_table(fronts, show_all), table_format)
    if fronts["left_out"]:
        left_out = f"{fronts['left_out']} ok result(s) left out: {fronts['left_out_reason']}"
        stderr.print(left_out, markup=False)


@click.command("system")
@click.option("--json", "as_json", is_flag=True, help="one JSON document")
def system_(as_json: bool) -> None:
    """What this machine is: CPU, memory, GPUs and their topology, network, software."""
    from trainperf import system

    record = system.collect()
    if as_json:
        _emit_json(record)
        return
    from trainperf.report.system import system_view

    stdout.print(system_view(record))
