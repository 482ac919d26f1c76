"""The verbs that move results between databases: ``export`` (the JSON format of
``trainperf.store.exchange``, or CSV) and ``import`` (registered in trainperf.cli)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from trainperf.cli.common import (
    check_out_file,
    db_option,
    emit_json,
    json_option,
    result_filter_options,
    stdout,
)
from trainperf.cli.flag_types import BadInput, NonEmptyPath
from trainperf.cli.store_access import check_db_writable, reading_store, store_errors, writing_store

FORMATS = ("json", "csv")


@click.command()
@click.argument("file", type=NonEmptyPath(path_type=Path))
@db_option()
@result_filter_options
@click.option(
    "--format",
    "format_",
    type=click.Choice(FORMATS),
    help="json (for `trainperf import`) or csv (the results); default: FILE's extension",
)
@click.option(
    "--follow-symlinks",
    is_flag=True,
    help="FILE may be a symlink to a regular file: replace that file (else refused)",
)
def export(
    file: Path, db: Path, result_filter: Any, format_: str | None, follow_symlinks: bool
) -> None:
    """Write the database, or what the filters select, to FILE.

    JSON holds every system, sweep, result with its runs, micro-benchmark, largest-batch
    search and training run, for `trainperf import` on another machine; CSV holds the
    results, as `results --csv`. The filters select results (and their runs); rows of
    other kinds follow --system and --since only. FILE is written as the database is
    read, and replaces an existing FILE atomically, only when it is a regular file: a
    directory, device, FIFO or socket is refused, and so is a symlink unless
    --follow-symlinks.
    """
    from trainperf.core.fileio import atomic_writer
    from trainperf.store import exchange

    if str(file) == "-":
        raise BadInput(
            "export writes a file: give FILE a name, not '-' (`trainperf results --csv` "
            "prints the results on stdout)"
        )
    format_ = format_ or _format_of(file)
    target = check_out_file(
        file, "", follow_symlinks=follow_symlinks, follow_flag="--follow-symlinks"
    )
    with reading_store(db) as store:
        selection = store.select(result_filter) if format_ == "csv" else None
        try:
            with atomic_writer(target, text=True) as out:
                if selection is not None:
                    from trainperf.report.tables import results_csv_lines

                    out.writelines(results_csv_lines(selection))
                    counts = {"results": len(selection)}
                else:
                    counts = exchange.write_export(store, out, result_filter)
        except OSError as exc:
            raise BadInput(f"cannot write {file}: {exc.strerror or exc}") from None
    line = f"exported {exchange.counts_text(counts)} to {file}"
    stdout.print(line, markup=False, highlight=False, soft_wrap=True)


@click.command("import")
@click.argument("file", type=NonEmptyPath(path_type=Path))
@db_option()
@json_option
def import_(file: Path, db: Path, as_json: bool) -> None:
    """Add the rows of FILE (written by `trainperf export`) to the database.

    Rows already there are left as they are, so importing a file twice adds nothing; a
    training run stored as running takes the end a recovery file gives it. The
    whole file is checked first: one that does not check out writes nothing.
    """
    from trainperf.store import exchange

    try:
        document = exchange.read_file(file)
    except exchange.ExchangeError as exc:
        raise BadInput(str(exc)) from None
    try:
        validated = exchange.validate(document)
    except exchange.ExchangeError as exc:
        raise BadInput(f"{file}: {exc}") from None
    check_db_writable(db)
    if validated.unresolved and not db.exists():  # do not create a database to say no
        where, kind, key = validated.unresolved[0]
        raise BadInput(f"{file}: {where}: {kind} '{key}' is not in the file and {db} is absent")
    try:
        with store_errors(f"cannot import into {db}"), writing_store(db) as store:
            summary = exchange.import_document(store, validated)
    except exchange.ExchangeError as exc:
        raise BadInput(f"{file}: {exc}") from None
    if as_json:
        emit_json(_import_report(file, db, validated, summary))
    else:
        stdout.print(summary.line(str(file)), markup=False, highlight=False, soft_wrap=True)


def _format_of(file: Path) -> str:
    format_ = file.suffix.lower().removeprefix(".")
    if format_ not in FORMATS:
        raise BadInput(
            f"cannot tell the format of {file} from its extension: "
            "name it .json or .csv, or give --format json|csv"
        )
    return format_


def _import_report(file: Path, db: Path, validated: Any, summary: Any) -> dict[str, Any]:
    return {
        "file": str(file),
        "db": str(db),
        "format_version": validated.format_version,
        "exported_at": validated.exported_at,
        "trainperf_version": validated.trainperf_version,
    } | summary.as_dict()
