"""``trainperf doctor``: is this machine fit to be measured (trainperf.doctor)."""

from __future__ import annotations

from pathlib import Path

import click

from trainperf.cli.common import (
    db_option,
    emit_json,
    format_option,
    json_option,
    one_output,
    show_table,
)
from trainperf.cli.flag_types import EXIT_FAILED_CASES


@click.command()
@json_option
@click.option(
    "--strict", is_flag=True, help="exit 1 when any check fails (for CI and Slurm prologues)"
)
@db_option(help="the store whose disk is checked for room (read only: nothing is written)")
@format_option
def doctor(as_json: bool, strict: bool, db: Path, table_format: str) -> None:
    """Is this machine in a state to be measured, and does each instrument read true?

    One line per check (ok / warn / fail / absent): what was seen, why it matters for a
    training benchmark and the command that fixes it, which trainperf never runs. Reads
    only; trains no model; a few seconds. Every sweep records the same checks with its
    results (but the 2-process all_reduce, which only this verb runs)."""
    one_output(as_json, table_format)
    from trainperf.doctor import examine

    verdict = examine(db=db)
    if as_json:
        emit_json(verdict)
    else:
        from trainperf.report.doctor import doctor_table

        show_table(doctor_table(verdict), table_format)
    if strict and verdict["counts"]["fail"]:
        raise SystemExit(EXIT_FAILED_CASES)
