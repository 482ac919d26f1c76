"""``trainperf report``: the HTML report of a results database, self-contained pages.

The report holds the systems and their software, the results per system (failed cases with
their status and reason, never dropped), the side-by-side comparison when there are
several systems, and the studies' figures as inline SVG (``report/figures*.py``), each with
a caption saying what was measured, how and on which system. It opens offline: no script,
no external style sheet, font or image; a Content-Security-Policy forbids any script, so
text that slipped past escaping still could not run.

A store that is not large is one page, ``index.html``. A large one (more systems than a
figure draws, ``cap.SERIES_CAP``, or more than ``LARGE_RESULTS`` results) is split into
pages linked from ``index.html``: one per section of figures, one per system's results,
the comparison and the failed cases, each as self-contained as the one page. They are
written one after the other, each whole (``fileio.write_atomic``) as soon as it is done,
the index last: a report that is stopped leaves the pages it finished, and holds in memory
the figures of one page at most. Figures are drawn by ``report.drawing``: from the cache
in the output folder when their data did not change, the others in parallel processes.

Escaping: Jinja2's autoescape escapes every value taken from results (model names,
hostnames, error messages). The SVG figures are the only markup inserted as is; Matplotlib
writes their text as escaped XML character data.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2

from trainperf import __version__
from trainperf.report import cap
from trainperf.store.query import EVERYTHING, ResultFilter

if TYPE_CHECKING:
    from trainperf.report.figure_kit import Figure

# Report sections in page order: (anchor, title, figure-key prefixes, what "no data" means).
SECTIONS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    (
        "cases",
        "Throughput per case",
        ("throughput-per-case",),
        "no ok results (`trainperf run`)",
    ),
    (
        "scaling",
        "Scaling over devices",
        ("throughput-vs-devices", "scaling-efficiency", "speedup-vs-devices"),
        "no multi-device results with a 1-device baseline (`trainperf run --devices 1,2,...`)",
    ),
    (
        "frameworks",
        "Frameworks compared",
        ("framework-",),
        "no results of one workload under two frameworks or with and without torch.compile "
        "(`trainperf run frameworks`)",
    ),
    (
        "precision",
        "Reduced precision",
        ("precision-speedup",),
        "no case measured in fp16 or bf16 and in fp32 on one system "
        "(`trainperf run --precision bf16` beside an fp32 run)",
    ),
    (
        "llm",
        "Language models",
        ("llm-",),
        "no language-model workload measured under two methods (parallel mode or activation "
        "checkpointing) on the same devices (`trainperf run llm`)",
    ),
    (
        "batch",
        "Throughput against batch size",
        ("throughput-vs-batch",),
        "no single-device results at several batch sizes (`trainperf run batch-scaling`)",
    ),
    (
        "breakdown",
        "Where the time goes",
        (
            "step-breakdown",
            "layer-breakdown",
            "layers-across-systems",
            "host-api-vs-devices",
            "comm-share-vs-devices",
        ),
        "no profiles stored (`trainperf profile MODEL`, with `--devices N` on several)",
    ),
    (
        "collectives",
        "Collective bus bandwidth",
        ("collective-busbw",),
        "no collective micro-benchmarks stored (`trainperf micro collective`)",
    ),
    (
        "gemm",
        "GEMM throughput",
        ("gemm-tflops",),
        "no GEMM micro-benchmarks stored (`trainperf micro gemm`)",
    ),
    (
        "convergence",
        "Time to accuracy",
        ("convergence", "time-to-train-relative"),
        "no training runs stored (`trainperf train MODEL --data ... --target top1=...`)",
    ),
    (
        "energy",
        "Power and energy",
        ("power-vs-performance", "energy-per-sample"),
        "no results with energy readings (NVML on GPUs, RAPL on CPUs)",
    ),
)


# A store is large (the report split into pages) with more systems than a figure draws
# (cap.SERIES_CAP) or more results than this: 1,000 rows are a page of tables already.
LARGE_RESULTS = 1000


@dataclass
class ReportData:
    """What a report shows, as read from the store."""

    results: list[dict[str, Any]]  # without their runs: the report reads metrics only
    micro_runs: list[dict[str, Any]]
    systems: list[dict[str, Any]]
    train_runs: list[dict[str, Any]]


def read(db_path: Path, result_filter: ResultFilter = EVERYTHING) -> ReportData:
    """Everything the report shows, from the database at ``db_path`` read in place, writing
    nothing: the one place where the report reads the store. The results are those
    ``result_filter`` selects, oldest first, without their runs (the report reads their
    metrics only); micro-benchmarks and training runs those of its systems and time."""
    from trainperf.store.database import Store

    with Store.read_only(db_path) as store:
        return ReportData(
            list(store.select(result_filter, oldest_first=True)),
            list(store.rows_beside("micro", result_filter)),
            store.systems(result_filter),
            list(store.rows_beside("train_runs", result_filter)),
        )


@dataclass
class ReportSummary:
    path: Path
    systems: int
    results: int
    failed: int
    figures: list[str] = field(default_factory=list)
    empty_sections: list[str] = field(default_factory=list)
    pages: list[str] = field(default_factory=list)  # file names written, index.html last


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("trainperf.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def _gib(value: Any) -> str:
    return f"{value / 2**30:.1f} GiB" if isinstance(value, int | float) else "-"


def system_row(record: dict[str, Any]) -> dict[str, str]:
    """The facts of one system that decide its training speed, as display strings."""
    cpu, sw = record.get("cpu") or {}, record.get("software") or {}
    gpus = record.get("gpus") or []
    if gpus:
        names = sorted({g.get("name", "?") for g in gpus})
        gpu_text = f"{len(gpus)} × " + ", ".join(names)
    else:
        gpu_text = "none (" + str(record.get("gpus_absent_reason") or "not found") + ")"

    def version(key: str) -> str:
        return str(sw.get(key) or "absent: " + str(sw.get(f"{key}_absent_reason") or "unknown"))

    return {
        "hostname": str(record.get("hostname", "?")),
        "fingerprint": str(record.get("fingerprint", "?")),
        "cpu": f"{cpu.get('model', '?')} ({cpu.get('sockets', '?')} socket(s), "
        f"{cpu.get('cores', '?')} cores, {cpu.get('threads', '?')} threads)",
        "memory": _gib(record.get("memory_bytes")),
        "gpus": gpu_text,
        "os": str(record.get("os", "?")),
        "torch": str(sw.get("torch", "?")),
        "cuda": version("cuda"),
        "cudnn": version("cudnn"),
        "nccl": version("nccl"),
        "onednn": str(sw.get("onednn") or "-"),
    }


def result_row(result: dict[str, Any]) -> dict[str, Any]:
    """One results-table row; failed cases keep their status and reason."""
    from trainperf.analysis.scaling import device_count
    from trainperf.case.spec import label_of

    m, case = result.get("metrics") or {}, result["case"]
    ok = result["status"] == "ok"

    def number(key: str, fmt: str) -> str:
        value = m.get(key)
        return format(value, fmt) if ok and isinstance(value, int | float) else "-"

    reason = ""
    if not ok:
        reason = str((result.get("error") or {}).get("message") or "")
    elif m.get("unstable"):
        reason = "unstable: " + "; ".join(m.get("unstable_reasons") or [])
    return {
        "label": label_of(case),
        "model": case["model"],
        "devices": device_count(case),
        "status": result["status"],
        "ok": ok,
        "samples_per_s": number("samples_per_s_median", ".1f"),
        "ci": number("ci95_relative", ".1%") if m.get("runs", 1) > 1 or not ok else "1 run",
        "runs": number("runs", "d"),
        "between": number("between_run_cv", ".1%"),
        "tokens_per_s": number("tokens_per_s_median", ".0f"),
        "mfu": number("mfu", ".1%"),
        "j_per_sample": number("energy_per_sample_j", ".4g"),
        "steps": f"{m['steps_warmup']}+{m['steps_measured']}" if "steps_measured" in m else "-",
        "reason": reason,
        "created_at": result.get("created_at", ""),
    }


def _comparison(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tables of ``trainperf compare`` (default baseline), none with fewer than 2 systems."""
    from trainperf.analysis.compare import compare
    from trainperf.report.compare import compare_table, groups_table
    from trainperf.report.markdown import plain_table

    if len({r["system"]["fingerprint"] for r in results}) < 2:
        return []
    document = compare(results)
    return [plain_table(compare_table(document)), plain_table(groups_table(document))]


class Report:
    """The contents of a report of ``data``: its figures (not drawn yet) by section, its
    tables, and what every page's header says."""

    def __init__(self, data: ReportData, db_name: str, generated_at: str | None = None) -> None:
        from trainperf.report.figure_set import all_figures
        from trainperf.report.figures_convergence import (
            convergence_figures,
            relative_time_figures,
        )
        from trainperf.report.figures_llm import llm_figures

        self.data = data
        self.hosts = {s["fingerprint"]: s.get("hostname", "?") for s in data.systems}
        figures = all_figures(data.results, data.micro_runs, self.hosts)
        figures += convergence_figures(data.train_runs)
        figures += relative_time_figures(data.train_runs)
        figures += [replace(f.figure, table=f.table) for f in llm_figures(data.results)]
        self.sections = [
            {
                "anchor": anchor,
                "title": title,
                "figures": [f for f in figures if f.key.startswith(prefixes)],
                "empty": empty,
            }
            for anchor, title, prefixes, empty in SECTIONS
        ]
        self.figures = [f for section in self.sections for f in section["figures"]]
        self._results_of: dict[str, list[dict[str, Any]]] = {}
        for r in data.results:
            self._results_of.setdefault(r["system"]["fingerprint"], []).append(r)
        self.failed = [
            {"hostname": r["system"].get("hostname", "?"), **result_row(r)}
            for r in data.results
            if r["status"] not in ("ok", "skipped")
        ]
        self.header = {
            "generated_at": generated_at or datetime.now(UTC).isoformat(timespec="seconds"),
            "version": __version__,
            "db_name": db_name,
            "system_count": len(data.systems),
            "figure_count": len(self.figures),
            "page_title": "",
        }

    def large(self) -> str:
        """Why the store is large (the report split into pages), or "" when it is not."""
        systems, results = len(self.data.systems), len(self.data.results)
        if systems > cap.SERIES_CAP:
            return f"more than {cap.SERIES_CAP} systems"
        return f"more than {LARGE_RESULTS} results" if results > LARGE_RESULTS else ""

    def by_system(self, fingerprints: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """The results table of each system (of ``fingerprints``), those with results."""
        chosen = list(self.hosts) if fingerprints is None else fingerprints
        return [
            {"hostname": self.hosts[fp], "fingerprint": fp, "rows": list(map(result_row, mine))}
            for fp in chosen
            if (mine := self._results_of.get(fp))
        ]

    def system_rows(self) -> list[dict[str, str]]:
        return [system_row(s) for s in self.data.systems]

    def comparison(self) -> list[dict[str, Any]]:
        """The tables of ``trainperf compare`` (default baseline), none with fewer than 2
        systems."""
        return _comparison(self.data.results)

    @staticmethod
    def template(name: str) -> jinja2.Template:
        return _environment().get_template(name)

    def summary(self, path: Path, pages: list[str]) -> ReportSummary:
        return ReportSummary(
            path=path,
            systems=len(self.data.systems),
            results=len(self.data.results),
            failed=len(self.failed),
            figures=[f.key for f in self.figures],
            empty_sections=[s["anchor"] for s in self.sections if not s["figures"]],
            pages=pages,
        )


def one_page(report: Report, drawn: Iterator[Figure]) -> str:
    """The whole report as one page, its figures taken from ``drawn`` in report order."""
    sections = [
        section | {"figures": list(islice(drawn, len(section["figures"])))}
        for section in report.sections
    ]
    return report.template("report.html.j2").render(
        **report.header,
        systems=report.system_rows(),
        by_system=report.by_system(),
        failed=report.failed,
        comparison=report.comparison(),
        sections=sections,
    )


def render(
    db_path: Path, generated_at: str | None = None, result_filter: ResultFilter = EVERYTHING
) -> tuple[str, ReportSummary]:
    """The report of the database at ``db_path`` as one page, and what it holds (the
    results ``result_filter`` selects; micro-benchmarks and training runs of its systems
    and time)."""
    from trainperf.report.drawing import drawn

    report = Report(read(db_path, result_filter), db_path.name, generated_at)
    with drawn(report.figures) as figures:
        page = one_page(report, figures)
    return page, report.summary(Path(), ["index.html"])
