"""The pages of a large report (``html.Report.large``), written one after the other.

``index.html`` links them all: one page per system's results
(``system-<host>-<fingerprint>.html``), ``compare.html`` with several systems,
``failures.html``, and one page per section of figures (``<anchor>.html``). Each page is
whole and self-contained (the same head, style and Content-Security-Policy as the one-page
report) and is written as soon as it is done, the index last, so that a stopped report
leaves whole pages behind. The tables come first, written while the worker processes draw
the figures; a section's figures are let go once its page is written, so memory holds a
few pages' figures at most.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainperf.core.fileio import write_atomic
from trainperf.report import cap
from trainperf.report.figure_kit import slug

if TYPE_CHECKING:
    from trainperf.report.figure_kit import Figure
    from trainperf.report.html import Report


def plan(report: Report) -> dict[str, tuple[str, Any]]:
    """File name -> (kind, what it shows), in the order written: the tables first (while
    the figures are being drawn), then the sections of figures, ``index.html`` last."""
    planned: dict[str, tuple[str, Any]] = {}
    for fingerprint, host in report.hosts.items():
        name, n = f"system-{slug(host, fingerprint)[:80]}", 1
        while f"{name}.html" in planned:  # two names giving one slug
            n += 1
            name = f"system-{slug(host, fingerprint)[:80]}-{n}"
        planned[f"{name}.html"] = ("results", fingerprint)
    if len(report.hosts) > 1:
        planned["compare.html"] = ("comparison", None)
    planned["failures.html"] = ("failures", None)
    for section in report.sections:
        if section["figures"]:
            planned[f"{section['anchor']}.html"] = ("figures", section)
    planned["index.html"] = ("index", None)
    return planned


def write(
    report: Report, planned: dict[str, tuple[str, Any]], drawn: Iterator[Figure], out_dir: Path
) -> list[str]:
    """Write the planned pages in order, figures taken from ``drawn`` in report order;
    return the names written."""
    template = report.template("page.html.j2")
    result_pages: dict[str, str] = {}
    written = []
    for name, (kind, what) in planned.items():
        context: dict[str, Any] = {"kind": kind}
        if kind == "figures":
            figures = islice(drawn, len(what["figures"]))
            context |= {"page_title": what["title"], "section": what, "figures": figures}
        elif kind == "results":
            tables = report.by_system([what])
            if not tables:
                continue
            result_pages[what] = name
            context |= {"page_title": f"results of {report.hosts[what]}", "by_system": tables}
        elif kind == "comparison":
            context |= {"page_title": "systems side by side"}
            context["comparison"] = report.comparison()
        elif kind == "failures":
            context |= {"page_title": "failed cases", "failed": report.failed}
        else:
            page = report.template("index.html.j2").render(
                **report.header,
                why_large=report.large(),
                result_count=len(report.data.results),
                series_cap=cap.SERIES_CAP,
                sections=[
                    s | {"page": _page_of(planned, s), "count": len(s["figures"])}
                    for s in report.sections
                ],
                systems=report.system_rows(),
                result_pages=result_pages,
                comparison_page="compare.html" if "compare.html" in planned else "",
                failures_page="failures.html",
                failed_count=len(report.failed),
            )
            write_atomic(out_dir / name, page)
            written.append(name)
            continue
        write_atomic(out_dir / name, template.render(**(report.header | context)))
        written.append(name)
    return written


def _page_of(planned: dict[str, tuple[str, Any]], section: dict[str, Any]) -> str:
    name = f"{section['anchor']}.html"
    return name if name in planned else ""
