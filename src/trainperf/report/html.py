"""``trainperf report``: one self-contained HTML file from the results database.

The page holds the systems and their software, the results per system (failed cases with
their status and reason, never dropped), the side-by-side comparison when there are
several systems, and the studies' figures as inline SVG (``report/figures.py``), each with
a caption saying what was measured, how and on which system. It opens offline: no script,
no external style sheet, font or image; a Content-Security-Policy forbids any script, so
text that slipped past escaping still could not run.

Escaping: Jinja2's autoescape escapes every value taken from results (model names,
hostnames, error messages). The SVG figures are the only markup inserted as is; Matplotlib
writes their text as escaped XML character data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2

from trainperf import __version__
from trainperf.fileio import write_atomic
from trainperf.store_query import EVERYTHING, ResultFilter

# Report sections in page order: (anchor, title, figure-key prefixes, what "no data" means).
SECTIONS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    (
        "scaling",
        "Scaling over devices",
        ("throughput-vs-devices", "scaling-efficiency"),
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
        ("step-breakdown", "layer-breakdown"),
        "no profiles stored (`trainperf profile MODEL`)",
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
        ("convergence",),
        "no training runs stored (`trainperf train MODEL --data ... --target top1=...`)",
    ),
    (
        "energy",
        "Power and energy",
        ("power-vs-performance", "energy-per-sample"),
        "no results with energy readings (NVML on GPUs, RAPL on CPUs)",
    ),
)


@dataclass
class ReportSummary:
    path: Path
    systems: int
    results: int
    failed: int
    figures: list[str] = field(default_factory=list)
    empty_sections: list[str] = field(default_factory=list)


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
    from trainperf.case import label_of
    from trainperf.parallel.scaling import device_count

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


def render(
    db_path: Path, generated_at: str | None = None, result_filter: ResultFilter = EVERYTHING
) -> tuple[str, ReportSummary]:
    """The report page for the database at ``db_path`` and what it holds (the results
    ``result_filter`` selects; micro-benchmarks and training runs of its systems and time)."""
    from trainperf.report.figure_set import all_figures
    from trainperf.report.figures_convergence import convergence_figures
    from trainperf.report.figures_llm import llm_figures
    from trainperf.store import Store

    with Store.read_only(db_path) as store:  # in place, writing nothing
        results = list(store.select(result_filter, oldest_first=True))
        micro_runs = list(store.rows_beside("micro", result_filter))
        systems = store.systems(result_filter)
        train_runs = list(store.rows_beside("train_runs", result_filter))
    hosts = {s["fingerprint"]: s.get("hostname", "?") for s in systems}
    llm = llm_figures(results)  # each with the table shown under it
    figures = all_figures(results, micro_runs, hosts) + convergence_figures(train_runs)
    figures += [f.figure for f in llm]
    sections = []
    for anchor, title, prefixes, empty in SECTIONS:
        chosen = [f for f in figures if f.key.startswith(prefixes)]
        sections.append({"anchor": anchor, "title": title, "figures": chosen, "empty": empty})
    by_system = [
        {
            "hostname": hosts[fingerprint],
            "fingerprint": fingerprint,
            "rows": [result_row(r) for r in results if r["system"]["fingerprint"] == fingerprint],
        }
        for fingerprint in hosts
    ]
    failed = [
        {"hostname": r["system"].get("hostname", "?"), **result_row(r)}
        for r in results
        if r["status"] not in ("ok", "skipped")
    ]
    comparison = _comparison(results)
    page = (
        _environment()
        .get_template("report.html.j2")
        .render(
            generated_at=generated_at or datetime.now(UTC).isoformat(timespec="seconds"),
            version=__version__,
            db_name=db_path.name,
            systems=[system_row(s) for s in systems],
            by_system=[b for b in by_system if b["rows"]],
            failed=failed,
            comparison=comparison,
            sections=sections,
            figure_tables={f.figure.key: f.table for f in llm},
            figure_count=len(figures),
        )
    )
    summary = ReportSummary(
        path=Path(),
        systems=len(systems),
        results=len(results),
        failed=len(failed),
        figures=[f.key for section in sections for f in section["figures"]],
        empty_sections=[s["anchor"] for s in sections if not s["figures"]],
    )
    return page, summary


def write_report(
    db_path: Path, out_dir: Path, result_filter: ResultFilter = EVERYTHING
) -> ReportSummary:
    """Write ``out_dir/index.html`` (created atomically; the directory is made if needed)."""
    page, summary = render(db_path, result_filter=result_filter)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / "index.html"
    write_atomic(target, page)
    summary.path = target
    return summary
