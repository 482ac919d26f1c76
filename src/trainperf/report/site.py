"""Writing a report's files: ``index.html`` alone for a small store, or the pages of a large
one (trainperf.report.pages), its figures drawn in worker processes with a content cache
(trainperf.report.drawing). What the pages show is decided in trainperf.report.html.
"""

from __future__ import annotations

from pathlib import Path

from trainperf.core.fileio import check_output, write_atomic
from trainperf.report import pages
from trainperf.report.html import Report, ReportSummary, one_page, read
from trainperf.store.query import EVERYTHING, ResultFilter


def write_report(
    db_path: Path,
    out_dir: Path,
    result_filter: ResultFilter = EVERYTHING,
    *,
    generated_at: str | None = None,
    workers: int | None = None,
) -> ReportSummary:
    """Write the report of the database at ``db_path`` (the results ``result_filter``
    selects) into ``out_dir`` (made if needed): ``index.html``, and the other pages of a
    large store; each file is replaced whole. Figures are drawn in ``workers`` processes
    (default: the usable CPUs)."""
    from trainperf.report.drawing import CACHE_DIR, FigureCache, drawn

    report = Report(read(db_path, result_filter), db_path.name, generated_at)
    planned = pages.plan(report) if report.large() else {"index.html": None}
    out_dir.mkdir(exist_ok=True)  # in a directory that exists (cli.report checks)
    for name in planned:  # every file checked before any is written
        check_output(out_dir / name)
    cache_dir = out_dir / CACHE_DIR  # a cache only where it is ours to write: not a link
    ours = not cache_dir.is_symlink() and (cache_dir.is_dir() or not cache_dir.exists())
    cache = FigureCache(cache_dir) if ours else None
    with drawn(report.figures, cache, workers) as figures:
        if report.large():
            written = pages.write(report, planned, figures, out_dir)
        else:
            write_atomic(out_dir / "index.html", one_page(report, figures))
            written = ["index.html"]
    if cache:
        cache.prune()
    return report.summary(out_dir / "index.html", written)
