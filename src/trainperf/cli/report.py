"""``trainperf report``: the HTML report of a results database (registered in trainperf.cli)."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from trainperf.cli.common import (
    REPORT_DIR,
    check_out_file,
    db_option,
    emit_json,
    result_filter_options,
    stdout,
)
from trainperf.cli.flag_types import BadInput, NonEmptyPath
from trainperf.cli.store_access import check_db_readable, store_errors


@click.command()
@db_option()
@result_filter_options
@click.option(
    "--out",
    default=REPORT_DIR,
    show_default=True,
    type=NonEmptyPath(path_type=Path),
    help="directory for index.html and, for a large store, its other pages (made if absent, "
    "in a directory that exists, never through a symlink; the pages there must be regular "
    "files)",
)
@click.option("--json", "as_json", is_flag=True, help="print what was written as JSON")
def report(db: Path, result_filter: Any, out: Path, as_json: bool) -> None:
    """Write a self-contained HTML report (tables, figures, failures) of the database, or
    of the results the filters select (micro-benchmarks and training runs: of the systems
    and time of --system and --since)."""
    from trainperf.core.fileio import kind
    from trainperf.report.site import write_report

    check_db_readable(db)
    if out.is_symlink() and out.is_dir():  # written through, the pages land elsewhere
        raise BadInput(
            f"--out {out} is a symlink (to {os.readlink(out)}): give the directory itself"
        )
    if out.is_dir():
        check_out_file(out / "index.html", "--out")
    elif not out.exists() and not out.is_symlink() and not out.absolute().parent.is_dir():
        raise BadInput(f"--out {out}: directory {out.absolute().parent} does not exist")
    elif out.exists() or out.is_symlink():
        what = kind(out.stat().st_mode) if out.exists() else "a dangling symlink"
        raise BadInput(f"--out {out} is {what}: give a directory for the report")
    try:
        with store_errors(f"cannot read {db}"):
            summary = write_report(db, out, result_filter)
    except OSError as exc:
        raise BadInput(f"--out {out}: cannot write the report: {exc.strerror or exc}") from None
    if as_json:
        emit_json({**asdict(summary), "path": str(summary.path)})
        return
    empty = f"; no data for {', '.join(summary.empty_sections)}" if summary.empty_sections else ""
    pages = f" and {len(summary.pages) - 1} other page(s)" if len(summary.pages) > 1 else ""
    stdout.print(
        f"wrote {summary.path}{pages}: {summary.systems} system(s), {summary.results} "
        f"result(s) ({summary.failed} failed), {len(summary.figures)} figure(s){empty}",
        markup=False,
        soft_wrap=True,  # one line for scripts, however long the path
    )
