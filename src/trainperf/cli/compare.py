"""The ``compare`` verb: the same cases on different systems side by side (registered in
trainperf.cli)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from trainperf.cli.common import (
    db_option,
    emit_json,
    format_option,
    json_option,
    one_output,
    result_filter_options,
    show_table,
    stderr,
    table_width,
)
from trainperf.cli.flag_types import BadInput
from trainperf.cli.store_access import reading_store
from trainperf.core.limits import comma_items


@click.command()
@click.argument("sources", nargs=-1, metavar="[A B]", type=click.Path(path_type=Path))
@db_option()
@click.option("--baseline", help="hostname or fingerprint (default: the system with most ok cases)")
@click.option(
    "--group-by",
    default="devices",
    show_default=True,
    help="case fields, comma-separated, for the geometric means ('none': one group)",
)
@click.option(
    "--across",
    default="",
    help="case fields, comma-separated, whose values are columns too (framework,compile: "
    "PyTorch, compiled PyTorch and JAX side by side); --baseline may name a column "
    "(framework=jax)",
)
@result_filter_options
@json_option
@format_option
def compare(
    sources: tuple[Path, ...],
    db: Path,
    baseline: str | None,
    group_by: str,
    across: str,
    result_filter: Any,
    as_json: bool,
    table_format: str,
) -> None:
    """The same cases side by side: throughput ratios to a baseline, with significance.

    With no argument, the systems of one database (--db). With A B (exported files or
    databases, read in place, nothing imported), B against A: did a change make training
    faster? Per case: the throughput (mean over its runs), the ratio to the baseline, its
    95% interval from the variation between runs, and faster / slower / no significant
    difference (no decision below 3 runs on a side); then the geometric mean of the
    ratios per group of cases. With --across framework,compile the columns are also
    the frameworks (and torch.compile) on each system: PyTorch against JAX, same method.
    """
    from trainperf.analysis.compare import UnknownField, UnknownSystem, compare_sources
    from trainperf.analysis.compare import compare as compare_results

    one_output(as_json, table_format)
    if sources and len(sources) != 2:
        raise BadInput(
            f"give two sources to compare, A B (exported files or databases), not "
            f"{len(sources)}; or none to compare the systems of --db"
        )
    if sources and baseline:
        raise BadInput("--baseline picks a system of --db; with A B the baseline is A")
    try:  # --across '' (its default) is none; an empty item of a list is a typo
        across_fields = list(comma_items(across, "--across")) if across.strip() else []
        fields = list(comma_items(group_by, "--group-by"))
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    if sources and across_fields:
        raise BadInput("--across compares within --db; with A B the columns are the sources")
    if fields == ["none"]:
        fields = []
    try:
        if sources:
            read = [_source(path, result_filter) for path in sources]
            document = compare_sources([(name, found.results) for name, found in read], fields)
            measured = [
                (name, found.doctor_verdicts[r["sweep_id"]])
                for name, found in read
                for r in found.results
            ]
        else:
            with reading_store(db) as store:
                results = store.select(result_filter, oldest_first=True)
                if not results:
                    raise BadInput(f"no results in {db}{result_filter.matching()}")
                document = compare_results(results, baseline, fields, across_fields)
                measured = _measured_under(store, results, document)
    except (UnknownSystem, UnknownField) as exc:
        raise BadInput(str(exc)) from None
    from trainperf.doctor.conditions import differences

    differ = differences(measured)
    document["conditions_differ"] = [{"check": d.name, "values": d.values} for d in differ]
    if as_json:
        emit_json(document)
        return
    from trainperf.report.compare import compare_table, groups_table
    from trainperf.report.doctor import difference_lines

    width = table_width(table_format)
    show_table(compare_table(document, width), table_format)
    for line in difference_lines(differ):
        stderr.print(line, markup=False, soft_wrap=True)
    if len(document["systems"]) < 2:  # one database of one system
        stderr.print(
            "only one system in the database: nothing to compare against "
            "(`trainperf import` another machine's export, or --across framework)",
            markup=False,
        )
        return
    if table_format == "md":
        sys.stdout.write("\n")
    show_table(groups_table(document, width), table_format)


def _source(path: Path, result_filter: Any) -> tuple[str, Any]:
    """(name, what ``exchange.read_results`` read) of one side of `compare A B`."""
    from trainperf.store.exchange import ExchangeError, read_results

    try:
        found = read_results(path, result_filter)
    except ExchangeError as exc:
        raise BadInput(str(exc)) from None
    if not found.results:
        raise BadInput(f"no results in {path}{result_filter.matching()}")
    return str(path), found


def _measured_under(store: Any, results: Any, document: dict) -> list[tuple[str, Any]]:
    """(the label compare gives a system, the doctor's verdict of a sweep of it) for each
    sweep of the results compared: what ``doctor.conditions.differences`` compares."""
    labels = {system["fingerprint"]: system["label"] for system in document["systems"]}
    pairs = results.sweeps()
    verdicts = store.doctor_verdicts(sweep for _, sweep in pairs)
    return [(labels.get(system, system), verdicts[sweep]) for system, sweep in pairs]
