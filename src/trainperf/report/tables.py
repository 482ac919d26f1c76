"""Rich tables and CSV rows for results and model analytics.

The CSV (``results --csv``, ``export FILE.csv``) has one line per result and the columns
``CSV_COLUMNS``, the one list: what tells results apart (the case's fields, its framework,
devices, nodes and resolved parallel mode, the system's fingerprint and hostname), the
status and the metrics, the interval's low end clamped at 0 (a throughput cannot be below
0; results stored before the clamp may hold a negative one), and the error in full.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from rich.table import Table

from trainperf.analysis.system_labels import system_labels
from trainperf.case.spec import parallel_mode
from trainperf.report.cells import (
    WIDE,
    Column,
    compact_table,
    devices_text,
    escape,
    interval_range,
    options_text,
    plus_minus,
)
from trainperf.report.csv_safe import csv_lines

CASE_COLUMNS = ("model", "batch_size", "image_size", "seq_len", "precision", "device", "steps")
# Where and how a case ran: the framework, all its devices, the nodes, the parallel mode
# resolved (``auto`` is ddp above one device, mesh under JAX).
PLACEMENT_COLUMNS = ("framework", "devices", "nodes", "parallel")
METRIC_COLUMNS = (
    "samples_per_s_median",
    "samples_per_s_mean",
    "ci95_relative",
    "runs",
    "runs_stop_reason",
    "within_run_cv",
    "between_run_cv",
    "cv",
    "jitter",
    "tokens_per_s_median",
    "steps_warmup",
    "steps_measured",
    "mem_peak_bytes",
    "mfu",
    "unstable",
    "data_wait_share",
    "compute_samples_per_s",
)
CSV_COLUMNS = (
    ("id", "created_at", "sweep_id", "system", "hostname")
    + CASE_COLUMNS
    + PLACEMENT_COLUMNS
    + ("device_name", "status", "samples_per_s_ci95_low", "samples_per_s_ci95_high")
    + METRIC_COLUMNS
    + ("error",)
)


def add_columns(table: Table, columns: str) -> None:
    """Add ``columns`` to ``table``: names separated by ", ", a name ending in ">" is
    right-justified (as ">" aligns right in Python's format specifications)."""
    for column in columns.split(", "):
        right = column.endswith(">")
        table.add_column(column.removesuffix(">"), justify="right" if right else "left")


def _si(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.2f} {prefix}{unit}"
    return f"{value:.3g} {unit}".strip()


def _percent(value: float | None, absent: str = "-") -> str:
    return absent if value is None else f"{value:.1%}"


def _bytes(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**30:.2f} GiB"


def _size(case: dict[str, Any], metrics: dict[str, Any]) -> int | str:
    """The image size or sequence length used (metrics), else asked for (case)."""
    for key in ("image_size", "seq_len"):
        if metrics.get(key) or case.get(key):
            return metrics.get(key) or case[key]
    return "natural"


def results_table(
    results: Iterable[dict[str, Any]],
    title: str = "trainperf results",
    *,
    wide: bool = False,
    width: int | None = None,
    systems: Mapping[str, str | None] | None = None,
    doctor_verdicts: Callable[[list[str]], Mapping[str, Any]] | None = None,
) -> Table:
    """One row per result, its columns chosen to fit ``width`` (trainperf.report.cells):
    what the case is (model, size, batch, devices and parallel mode, the framework unless
    all are PyTorch, the device kind where they differ, precision, other options where
    any), the mean throughput of its runs and the ± of its between-run 95% interval
    ("n/a (2 runs)" below 3 runs), its status with the reason in full, and the system
    where the store holds more than one: ``systems``, the store's hostnames by
    fingerprint, so a page of rows from one system of a lab's store still names it (by
    default the systems of ``results``); labels by trainperf.analysis.system_labels. Cases on real
    data add the samples/s of compute alone (data ready) and the share of step time spent
    waiting for data, the first columns left out when the table does not fit.

    ``wide``: every column besides: runs, between-run coefficient of variation, tokens/s,
    MFU (a missing one has its reasons in the caption), peak memory, steps (warm-up +
    measured, over all runs) and what ended the runs; the loader workers of cases on real
    data; the training state per rank of distributed cases (parameters + gradients +
    optimizer state; sharded under fsdp).

    ``doctor_verdicts``: the stored doctor's verdict of sweeps by id (``Store.
    doctor_verdicts``): the status of a result whose sweep started while the doctor
    warned or failed ends in ``!``, and the caption names those checks."""
    results = list(results)
    flagged, caption_notes = _doctor_marks(results, doctor_verdicts)
    reasons: dict[str, int] = {}  # each reason once, under the table: [n] in the row
    cases = [r["case"] for r in results]
    metrics = [r.get("metrics") or {} for r in results]
    if systems is None:
        systems = {
            r["system"]["fingerprint"]: r["system"].get("hostname")
            for r in results
            if r.get("system")
        }
    labels = system_labels(systems)
    frameworks = {case.get("framework", "pytorch") for case in cases}
    kinds = {str(case.get("device")) for case in cases}
    options = [escape(options_text(case)) for case in cases]
    columns = [
        Column("model", [escape(str(c["model"])) for c in cases]),
        Column(
            "size",
            [escape(str(_size(c, m))) for c, m in zip(cases, metrics, strict=True)],
            right=True,
            drop=3,
        ),
        Column("batch", [escape(str(c["batch_size"])) for c in cases], right=True),
        Column("devices", [escape(devices_text(c)) for c in cases]),
        Column(
            "framework",
            [escape(str(c.get("framework", "pytorch"))) for c in cases],
            drop=0 if frameworks - {"pytorch"} else WIDE,
        ),
        Column("prec", [escape(str(c["precision"])) for c in cases], drop=4),
        Column(
            "device", [escape(str(c["device"])) for c in cases], drop=0 if len(kinds) > 1 else WIDE
        ),
        Column("options", options, text=True, drop=0 if any(options) else WIDE),
        Column("samples/s", [_samples(m) for m in metrics], right=True),
        Column(
            "±95%",
            [
                plus_minus(m) if r["status"] == "ok" else "-"
                for r, m in zip(results, metrics, strict=True)
            ],
            right=True,
            drop=2,
        ),
        *_wide_columns(cases, metrics),
        Column(
            "status",
            [
                _status(r, m, reasons) + (" !" if r.get("sweep_id") in flagged else "")
                for r, m in zip(results, metrics, strict=True)
            ],
            text=True,
        ),
        Column(
            "system",
            [
                escape(labels[r["system"]["fingerprint"]]) if r.get("system") else "-"
                for r in results
            ],
            drop=0 if len(labels) > 1 else WIDE,
        ),
    ]
    no_mfu = sorted(
        {
            m["mfu_absent_reason"]
            for m in metrics
            if m.get("mfu") is None and m.get("mfu_absent_reason")
        }
    )
    if no_mfu and wide:
        caption_notes.append("MFU -: " + "; ".join(no_mfu))
    caption_notes += [f"[{n}] {reason}" for reason, n in reasons.items()]
    caption = escape("; ".join(caption_notes)) if caption_notes else None
    return compact_table(title, columns, width=width, wide=wide, caption=caption)


def _doctor_marks(
    results: list[dict[str, Any]],
    doctor_verdicts: Callable[[list[str]], Mapping[str, Any]] | None,
) -> tuple[set[str], list[str]]:
    """The sweeps of ``results`` whose doctor warned or failed, and the caption's note
    naming those checks (trainperf.doctor.problems)."""
    if doctor_verdicts is None:
        return set(), []
    from trainperf.doctor import problems

    verdicts = doctor_verdicts(
        list(dict.fromkeys(r["sweep_id"] for r in results if r.get("sweep_id")))
    )
    named = {sweep: problems(verdict) for sweep, verdict in verdicts.items()}
    flagged = {sweep for sweep, names in named.items() if names}
    if not flagged:
        return set(), []
    checks = list(dict.fromkeys(name for names in named.values() for name in names))
    shown = ", ".join(checks[:6]) + (f" and {len(checks) - 6} more" if len(checks) > 6 else "")
    return flagged, [
        f"!: measured while trainperf doctor warned or failed ({shown}); results --json "
        "gives each sweep's checks"
    ]


def _samples(m: dict[str, Any]) -> str:
    return f"{m['samples_per_s_median']:.1f}" if "samples_per_s_median" in m else "-"


def _status(r: dict[str, Any], m: dict[str, Any], reasons: dict[str, int]) -> str:
    """'ok', 'ok (unstable)', 'ok (earlier sweep)', or the status and the number of its
    reason, which the caption gives in full, once for all the rows that share it
    (``reasons``: each reason's number, filled in here): four cases skipped for one
    missing GPU read 'skipped [1]' in four short rows, not one reason wrapped four times."""
    status = r["status"]
    if status == "ok" and r.get("reused"):
        return "ok (earlier sweep)" + (" unstable" if m.get("unstable") else "")
    if status == "ok" and m.get("unstable"):
        return "ok (unstable)"
    message = (r.get("error") or {}).get("message")
    if status != "ok" and message:
        number = reasons.setdefault(str(message), len(reasons) + 1)
        return escape(f"{status} [{number}]")  # the caption is escaped whole
    return escape(str(status))


def _wide_columns(cases: list[dict[str, Any]], metrics: list[dict[str, Any]]) -> list[Column]:
    """The columns of ``results --wide``, and the data split by default (results_table's
    doc)."""
    with_data = any("data_wait_share" in m for m in metrics)
    with_ranks = any("mem_params_bytes" in m for m in metrics)
    columns = [
        Column("runs", [str(m.get("runs", "-")) for m in metrics], right=True, drop=WIDE),
        Column(
            "between", [_percent(m.get("between_run_cv")) for m in metrics], right=True, drop=WIDE
        ),
        Column(
            "tokens/s", [_si(m.get("tokens_per_s_median")) for m in metrics], right=True, drop=WIDE
        ),
        Column(
            "MFU",
            [f"{m['mfu']:.1%}" if m.get("mfu") is not None else "-" for m in metrics],
            right=True,
            drop=WIDE,
        ),
        Column(
            "peak mem", [_bytes(m.get("mem_peak_bytes")) for m in metrics], right=True, drop=WIDE
        ),
    ]
    if with_ranks:
        state = [_state_bytes(m) for m in metrics]
        cells = ["-" if b is None else _binary(b) for b in state]
        columns.append(Column("state/rank", cells, right=True, drop=WIDE))
    steps = [
        f"{m['steps_warmup']}+{m['steps_measured']}" if "steps_measured" in m else "-"
        for m in metrics
    ]
    columns += [
        Column("steps", steps, right=True, drop=WIDE),
        Column(
            "runs ended", [escape(str(m.get("runs_stop_reason", "-"))) for m in metrics], drop=WIDE
        ),
    ]
    if with_data:  # shown by default, the first left out when the table does not fit
        data = [_data_cells(c, m) for c, m in zip(cases, metrics, strict=True)]
        columns = [
            Column("workers", [d[0] for d in data], right=True, drop=WIDE),
            Column("compute/s", [d[1] for d in data], right=True, drop=1),
            Column("data wait", [d[2] for d in data], right=True, drop=1),
            *columns,
        ]
    return columns


def _binary(value: int) -> str:
    """Bytes in MiB below a GiB, else in GiB."""
    return f"{value / 2**20:.1f} MiB" if value < 2**30 else f"{value / 2**30:.2f} GiB"


def _state_bytes(m: dict[str, Any]) -> int | None:
    """Parameters + gradients + optimizer state of the largest rank, or None."""
    parts = [m.get(k) for k in ("mem_params_bytes", "mem_grads_bytes", "mem_optimizer_bytes")]
    return None if parts[0] is None else sum(p or 0 for p in parts)


def _data_cells(case: dict[str, Any], m: dict[str, Any]) -> list[str]:
    """Loader workers, compute-only samples/s and data-wait share (marked if input-bound)."""
    if case.get("data", "synthetic") == "synthetic":
        return ["-", "-", "-"]
    share = m.get("data_wait_share")
    wait = (
        "-" if share is None else f"{share:.1%}" + (" input-bound" if m.get("input_bound") else "")
    )
    compute = m.get("compute_samples_per_s")
    return [str(case.get("workers", 0)), "-" if compute is None else f"{compute:.1f}", wait]


def models_table(rows: Iterable[dict[str, Any]], width: int | None = None) -> Table:
    """One row per zoo model: family, natural input, parameters, FLOPs per sample (forward,
    training step), gradient size and FLOPs per parameter; columns fit to ``width``."""
    rows = list(rows)
    columns = [
        Column("model", [escape(r["name"]) for r in rows]),
        Column("family", [escape(r["family"]) for r in rows]),
        Column("input", [f"{r['size_name']}={r['size']}" for r in rows]),
        Column("params", [f"{r['params']:,}" for r in rows], right=True),
        Column("fwd FLOPs", [_si(r["fwd_flops_per_sample"]) for r in rows], right=True),
        Column("train FLOPs", [_si(r["train_flops_per_sample"]) for r in rows], right=True),
        Column("grad MB", [f"{r['grad_bytes_fp32'] / 1e6:.1f}" for r in rows], right=True),
        Column("FLOPs/param", [f"{r['flops_per_param']:.0f}" for r in rows], right=True, drop=1),
    ]
    return compact_table(
        "trainperf model zoo (natural input size)",
        columns,
        width=width,
        caption="FLOPs per sample (forward; training step); gradients in fp32",
    )


def scaling_table(
    rows: Iterable[dict[str, Any]], *, wide: bool = False, width: int | None = None
) -> Table:
    """One row per ``trainperf.analysis.scaling`` row, its columns chosen to fit ``width``
    (trainperf.report.cells): the system where there are several, the setting, devices
    and parallel mode, weak or strong, samples/s, speed-up, efficiency and its 95% interval
    ("n/a (2 runs)" below 3 runs a side), and the status: "unstable" with the reason for a
    speed-up above linear. ``wide`` adds the speed-up's interval, the runs of each side,
    the exposed communication and the spread between ranks."""
    rows = list(rows)
    labels = system_labels({r["system"]: r["hostname"] for r in rows})
    fewest = [min(r["runs"], r.get("baseline_runs") or 0) for r in rows]

    def interval(r: dict[str, Any], runs: int, key: str, fmt: str) -> str:
        if r["devices"] == 1 or r["speedup"] is None:
            return "-"
        return interval_range(r.get(key), runs, fmt, "unbounded")

    def share(value: float | None) -> str:
        return "-" if value is None else f"{value:.1%}"

    columns = [
        Column(
            "system",
            [escape(labels[r["system"]]) for r in rows],
            drop=0 if len(labels) > 1 else WIDE,
        ),
        Column("setting", [escape(_setting(r)) for r in rows], text=True),
        Column("devices", [escape(_placement(r)) for r in rows]),
        Column("scaling", [escape(str(r["scaling"])) for r in rows], drop=3),
        Column("samples/s", [f"{r['samples_per_s']:.1f}" for r in rows], right=True),
        Column("speed-up", [_number(r["speedup"], "{:.2f}") for r in rows], right=True),
        Column(
            "efficiency",
            [_number(r["efficiency"], "{:.1%}", "no baseline") for r in rows],
            right=True,
        ),
        Column(
            "95% CI",
            [
                interval(r, n, "efficiency_ci95", "{:.1%}")
                for r, n in zip(rows, fewest, strict=True)
            ],
            right=True,
            drop=2,
        ),
        Column(
            "speed-up 95% CI",
            [interval(r, n, "speedup_ci95", "{:.2f}") for r, n in zip(rows, fewest, strict=True)],
            right=True,
            drop=WIDE,
        ),
        Column("runs", [_runs(r) for r in rows], right=True, drop=WIDE),
        Column(
            "exposed comm",
            [share(r.get("comm_exposed_share")) for r in rows],
            right=True,
            drop=WIDE,
        ),
        Column("rank spread", [share(r.get("rank_spread")) for r in rows], right=True, drop=WIDE),
        Column("status", [escape(_scaling_status(r)) for r in rows], text=True),
    ]
    return compact_table(
        "scaling: speed-up and efficiency against 1 device of the same setting",
        columns,
        width=width,
        wide=wide,
        caption="95% CI: of the efficiency, from the variation between runs "
        "(n/a below 3 runs a side)",
    )


def _number(value: float | None, fmt: str, absent: str = "-") -> str:
    return absent if value is None else fmt.format(value)


def _setting(r: dict[str, Any]) -> str:
    return r["setting"] + (f" ({r['ddp_options']})" if r.get("ddp_options") else "")


def _placement(r: dict[str, Any]) -> str:
    """The devices of a scaling row as results show a case's: '1', '2 ddp', '16 ddp 2n'."""
    nodes = r.get("nodes", 1)
    parallel = r["parallel"] if r["devices"] > 1 else "none"
    return devices_text({"devices": r["devices"] // nodes, "nodes": nodes, "parallel": parallel})


def _runs(r: dict[str, Any]) -> str:
    """Runs of the 1-device baseline / of this result."""
    return f"{r['baseline_runs']}/{r['runs']}" if r.get("baseline_runs") else str(r["runs"])


def _scaling_status(r: dict[str, Any]) -> str:
    return "unstable: " + "; ".join(r["unstable_reasons"]) if r.get("unstable") else "ok"


def pareto_table(fronts: dict[str, Any], show_all: bool = False, width: int | None = None) -> Table:
    """The power-performance points of each network (only those on the front unless
    ``show_all``): host, devices, batch, precision, samples/s, power, samples/s per watt,
    joules per sample; columns fit to ``width``."""
    points = [
        (group, p)
        for group in fronts["fronts"]
        for p in group["points"]
        if show_all or p["on_front"]
    ]

    def network(group: dict[str, Any]) -> str:
        return escape(group["model"] + (f" @{group['size']}" if group["size"] else ""))

    columns = [
        Column("network", [network(g) for g, _ in points]),
        Column("host", [escape(str(p["hostname"])) for _, p in points]),
        Column("devices", [str(p["devices"]) for _, p in points], right=True),
        Column("batch", [str(p["batch_size"]) for _, p in points], right=True),
        Column("prec", [escape(str(p["precision"])) for _, p in points]),
        Column("samples/s", [f"{p['samples_per_s']:.1f}" for _, p in points], right=True),
        Column("power W", [f"{p['average_power_w']:.1f}" for _, p in points], right=True),
        Column(
            "samples/s/W",
            [_number(p.get("samples_per_s_per_w") or None, "{:.3f}") for _, p in points],
            right=True,
        ),
        Column(
            "J/sample",
            [_number(p.get("energy_per_sample_j") or None, "{:.4f}") for _, p in points],
            right=True,
            drop=1,
        ),
        Column("front", ["yes" if p["on_front"] else "dominated" for _, p in points]),
    ]
    return compact_table("power-performance Pareto front per network", columns, width=width)


def suites_table(rows: Iterable[dict[str, Any]]) -> Table:
    table = Table(title="built-in suites")
    for column in ("name", "cases", "version", "description"):
        table.add_column(column, justify="right" if column == "cases" else "left")
    for row in rows:
        table.add_row(
            escape(row["name"]), str(row["cases"]), row["version"], escape(row["description"])
        )
    return table


def csv_row(r: dict[str, Any]) -> dict[str, Any]:
    """The CSV line of result ``r`` as a dict of ``CSV_COLUMNS`` (module doc)."""
    case, m = r["case"], r.get("metrics") or {}
    low, high = m.get("samples_per_s_ci95") or (None, None)
    return {
        "id": r.get("id"),
        "created_at": r.get("created_at"),
        "sweep_id": r.get("sweep_id"),
        "system": r["system"]["fingerprint"],
        "hostname": r["system"]["hostname"],
        **{k: case.get(k) for k in CASE_COLUMNS},
        "framework": case.get("framework", "pytorch"),
        "devices": case.get("devices", 1),
        "nodes": case.get("nodes", 1),
        "parallel": parallel_mode(case),
        "device_name": (r.get("device") or {}).get("name"),
        "status": r["status"],
        "samples_per_s_ci95_low": None if low is None else max(0.0, low),
        "samples_per_s_ci95_high": high,
        **{k: m.get(k) for k in METRIC_COLUMNS},
        "error": (r.get("error") or {}).get("message"),
    }


def results_csv(results: Iterable[dict[str, Any]]) -> str:
    """The results as CSV, one line each, safe to open in a spreadsheet (``csv_safe``)."""
    return "".join(results_csv_lines(results))


def results_csv_lines(results: Iterable[dict[str, Any]]) -> Iterator[str]:
    """The lines of ``results_csv``, one at a time, as ``results`` are read."""
    return csv_lines(CSV_COLUMNS, (csv_row(r) for r in results))
