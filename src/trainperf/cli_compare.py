"""The ``compare`` verb: the same cases on different systems side by side (registered in
cli.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from trainperf.cli import (
    BadInput,
    _db_option,
    _emit_json,
    _format_option,
    _json_option,
    _one_output,
    _read_results,
    show_table,
    stderr,
)


@click.command()
@_db_option
@click.option("--baseline", help="hostname or fingerprint (default: the system with most ok cases)")
@click.option(
    "--group-by",
    default="devices",
    show_default=True,
    help="case fields, comma-separated, for the geometric means ('none': one group)",
)
@click.option("--model", "-m", help="only results of this model")
@_json_option
@_format_option
def compare(
    db: Path,
    baseline: str | None,
    group_by: str,
    model: str | None,
    as_json: bool,
    table_format: str,
) -> None:
    """The same cases on different systems: throughput ratios to a baseline.

    Per case and system: median samples/s, the ratio to the baseline, a bootstrap 95%
    interval of the ratio from the raw step times and whether the difference is
    significant; then the geometric mean of the ratios per group of cases.
    """
    from trainperf.analysis.compare import UnknownField, UnknownSystem
    from trainperf.analysis.compare import compare as compare_results

    _one_output(as_json, table_format)
    fields = [f.strip() for f in group_by.split(",") if f.strip()]
    if fields == ["none"]:
        fields = []
    results = _read_results(db, model)
    if not results:
        raise BadInput(f"no results in {db}" + (f" for model {model}" if model else ""))
    try:
        document = compare_results(results, baseline, fields)
    except (UnknownSystem, UnknownField) as exc:
        raise BadInput(str(exc)) from None
    if as_json:
        _emit_json(document)
        return
    from trainperf.report.compare import compare_table, groups_table

    show_table(compare_table(document), table_format)
    if len(document["systems"]) < 2:
        stderr.print(
            "only one system in the database: nothing to compare against "
            "(`trainperf import` another machine's export)",
            markup=False,
        )
        return
    if table_format == "md":
        sys.stdout.write("\n")
    show_table(groups_table(document), table_format)
