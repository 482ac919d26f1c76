"""How every figure of the report is drawn: the ``Figure`` record and its ``Drawing``,
rendering to inline SVG, and the axes helpers the figure modules share (legends, log axes,
failed cases, confidence bars, labels from the data).

Output is deterministic (a constant ``svg.hashsalt``, no date), so two reports of one
database are byte-identical, and fit to inline in a page: no XML prolog, text kept as text
(``svg.fonttype: none``), every id prefixed with the figure's key so that the ids of
several inline figures never collide. Text from the data (model names, hostnames) reaches
the SVG only as Matplotlib text, which writes it as escaped XML character data; ``$`` is
escaped first so that Matplotlib does not read it as mathtext. A failed case of a drawn
setting is an ``x`` on the axis at its batch size or device count, labelled by status and
named in the caption, never left out silently.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import matplotlib
from matplotlib.figure import Figure as MplFigure
from matplotlib.ticker import FuncFormatter, NullLocator
from matplotlib.transforms import blended_transform_factory

STYLE: dict[str, Any] = {
    "svg.hashsalt": "trainperf-report",
    "svg.fonttype": "none",
    "svg.id": None,
    "font.size": 9,
    "axes.grid": True,
    "axes.axisbelow": True,
    "grid.alpha": 0.35,
    "legend.fontsize": 8,
}


SIZE = (6.4, 4.0)


LEGEND_INSIDE = 6


LEGEND_LABEL = 48


FAILED_COLOR = "#c0392b"


NOT_FAILED = ("ok", "skipped")  # a skip is hardware absent, not a failure at that point


# No date (determinism) and no RDF block: nothing a reader of the page needs.
NO_METADATA = {"Date": None, "Creator": None, "Format": None, "Type": None}


CI_NOTE = (
    "small dots: the independent runs (worker processes); vertical bars: 95% confidence "
    "interval of the mean over the runs (none for a single run)"
)


@dataclass(frozen=True)
class Drawing:
    """How a figure is drawn: ``function(fig, *args)`` on a new Matplotlib figure of ``size``
    inches. ``function`` is a module-level function and ``args`` plain data (dicts, lists,
    numbers, text, frozen dataclasses of them), so that a drawing can be sent to another
    process and named by its content (``trainperf.report.drawing``)."""

    function: Callable[..., None]
    args: tuple[Any, ...] = ()
    size: tuple[float, float] = SIZE

    def render(self, key: str) -> str:
        return render(key, lambda fig: self.function(fig, *self.args), self.size)

    def content(self, key: str) -> str:
        """Everything the SVG of figure ``key`` depends on besides the code, as text: equal
        texts give equal SVGs (``repr`` of plain data is exact, floats included)."""
        name = f"{self.function.__module__}.{self.function.__qualname__}"
        return repr((key, tuple(self.size), name, self.args))


@dataclass(frozen=True)
class Figure:
    """One figure of the report; its SVG is drawn when first asked for (``svg``), or given
    by whoever drew many at once (``drawn``)."""

    key: str  # stable slug, unique in a report, usable as an HTML id
    title: str
    caption: str  # what was measured, how, and on which systems (plain text)
    system: str  # hostnames of the systems drawn, comma-separated
    drawing: Drawing
    table: dict[str, Any] | None = None  # shown under the figure (markdown.plain_table's form)

    @cached_property
    def svg(self) -> str:
        """``<svg ...>...</svg>`` only, to inline in HTML."""
        return self.drawing.render(self.key)

    def drawn(self, svg: str) -> Figure:
        """This figure with its SVG already drawn (by ``trainperf.report.drawing``)."""
        copy = replace(self)
        copy.__dict__["svg"] = svg  # where cached_property keeps the value
        return copy


def plain(text: object) -> str:
    """``text`` for a Matplotlib label: ``$`` escaped so it is never read as mathtext."""
    return str(text).replace("$", r"\$")


def slug(*parts: object) -> str:
    """A lowercase id made of letters, digits and hyphens."""
    text = "-".join(str(p) for p in parts if p not in (None, ""))
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def hosts(names: Iterable[str]) -> str:
    """'a', 'a and b', 'a, b and c' of the distinct names, in order of appearance."""
    distinct = list(dict.fromkeys(names))
    return " and ".join(filter(None, [", ".join(distinct[:-1]), "".join(distinct[-1:])]))


def span(values: Iterable[Any]) -> str:
    """'8' or '4–8': the range of some counts."""
    distinct = sorted(set(values))
    return str(distinct[0]) if len(distinct) == 1 else f"{distinct[0]}–{distinct[-1]}"


def hostname(result: dict[str, Any]) -> str:
    return result["system"].get("hostname") or result["system"]["fingerprint"]


def _namespaced(svg: str, prefix: str) -> str:
    """``svg`` from its root element on, with ``prefix`` before every id and reference.

    Only tags are rewritten: character data holds no raw ``<`` (Matplotlib escapes it), so
    ``<[^>]+>`` never reaches into text taken from the data.
    """
    svg = svg[svg.index("<svg") :]

    def tag(match: re.Match[str]) -> str:
        return re.sub(r'(\sid="|href="#|url\(#)', lambda m: m.group(1) + prefix, match.group(0))

    return re.sub(r"<[^>]+>", tag, svg)


def render(key: str, draw: Callable[[MplFigure], None], size: Sequence[float] = SIZE) -> str:
    """The SVG of a new figure of ``size`` inches drawn by ``draw``."""
    with matplotlib.rc_context(STYLE):
        fig = MplFigure(figsize=tuple(size), layout="constrained")
        draw(fig)
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata=NO_METADATA)
    return _namespaced(buffer.getvalue(), key + "-")


def make_figure(
    key: str,
    title: str,
    caption: str,
    systems: Iterable[str],
    drawing: Drawing,
    note: str = "",
    table: dict[str, Any] | None = None,
) -> Figure:
    """A figure whose caption ends with its systems (hostnames), then ``note``."""
    names = list(dict.fromkeys(systems))
    caption = f"{caption} Systems: {hosts(names)}." + (f" {note}" if note else "")
    return Figure(key, title, caption, ", ".join(names), drawing, table)


def legend(ax: Any, **options: Any) -> None:
    """The axes' legend where it hides the fewest points, or beside the axes when it is
    long (more than ``LEGEND_INSIDE`` entries) and would hide the data. A label longer
    than ``LEGEND_LABEL`` characters is cut with an ellipsis, so that a long hostname or
    model name cannot squeeze the axes to nothing (the caption names them in full)."""
    handles, labels = ax.get_legend_handles_labels()
    labels = [
        label if len(label) <= LEGEND_LABEL else label[: LEGEND_LABEL - 1] + "…" for label in labels
    ]
    if len(labels) > LEGEND_INSIDE:
        options |= {"loc": "upper left", "bbox_to_anchor": (1.02, 1), "borderaxespad": 0}
    ax.legend(handles, labels, **options)


def log2_ticks(ax: Any, values: Iterable[float], label: Callable[[float], str] = str) -> None:
    """A base-2 log x axis with a tick at each value, labelled in plain text."""
    ticks = sorted(set(values))
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [label(t) for t in ticks])
    ax.xaxis.set_minor_locator(NullLocator())


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.3g}"


def log_axis(ax: Any, which: str = "y") -> None:
    """A log axis labelled with plain numbers, minor ticks too where it spans few decades."""
    axis = ax.yaxis if which == "y" else ax.xaxis
    (ax.set_yscale if which == "y" else ax.set_xscale)("log")

    def minor(value: float, _: Any) -> str:
        low, high = axis.get_view_interval()  # read when drawn, after autoscaling
        mantissa = round(value / 10 ** math.floor(math.log10(value)), 6)
        shown = high <= 10 * low or (high <= 1000 * low and mantissa in (2, 5))
        return _number(value) if shown else ""

    axis.set_major_formatter(FuncFormatter(lambda value, _: _number(value)))
    axis.set_minor_formatter(FuncFormatter(minor))


def mark_failed(ax: Any, failures: Sequence[tuple[float, str]]) -> None:
    """An ``x`` on the x axis at each failed point, labelled with its status (and host)."""
    on_axis = blended_transform_factory(ax.transData, ax.transAxes)
    for i, (x, label) in enumerate(failures):
        ax.plot(
            [x],
            [0],
            "x",
            ms=9,
            mew=2,
            color=FAILED_COLOR,
            transform=on_axis,
            clip_on=False,
            label="failed (status above)" if i == 0 else None,
        )
        ax.annotate(
            plain(label),
            (x, 0),
            xycoords=on_axis,
            xytext=(0, 9),
            textcoords="offset points",
            rotation=90,
            ha="center",
            va="bottom",
            fontsize=7,
            color=FAILED_COLOR,
        )


def ci_bar(ax: Any, x: float, result: dict[str, Any] | None, color: str) -> None:
    """The runs of ``result`` as small dots at ``x``, and the 95% confidence interval of
    their mean throughput as a vertical bar."""
    metrics = (result or {}).get("metrics") or {}
    runs = metrics.get("run_samples_per_s") or []
    if len(runs) > 1:
        ax.scatter([x] * len(runs), runs, s=8, color=color, alpha=0.45, lw=0, zorder=3)
    low, high = metrics.get("samples_per_s_ci95") or (0, 0)
    if low > 0 and math.isfinite(high):
        ax.vlines(x, low, high, color=color, lw=1.2, alpha=0.7)


def failed_note(items: Iterable[str]) -> str:
    items = list(items)
    return f"Failed runs, marked x on the axis: {'; '.join(items)}." if items else ""


def slim(result: dict[str, Any], *metrics: str) -> dict[str, Any]:
    """What a drawing needs of a result: status, case, host and the throughput metrics (and
    ``metrics``), so that a drawing stays small to send and to name by its content."""
    keys = ("samples_per_s_median", "run_samples_per_s", "samples_per_s_ci95", *metrics)
    system = result["system"]
    return {
        "id": result.get("id"),
        "status": result["status"],
        "case": result["case"],
        "metrics": {k: result["metrics"][k] for k in keys if k in (result["metrics"] or {})},
        "system": {"hostname": system.get("hostname"), "fingerprint": system["fingerprint"]},
    }


def unique_keys(figures: Iterable[Figure]) -> list[Figure]:
    """The figures, a key already taken (two names giving one slug) made unique by a suffix."""
    taken: set[str] = set()
    out = []
    for figure in figures:
        key, n = figure.key, 1
        while key in taken:
            n += 1
            key = f"{figure.key}-{n}"
        taken.add(key)
        out.append(figure if key == figure.key else replace(figure, key=key))
    return out


def data_table(
    headers: Sequence[str], justify: Sequence[str], rows: Iterable[Sequence[Any]]
) -> dict[str, Any]:
    """The numbers a figure draws as a table under it (``markdown.plain_table``'s form),
    folded: the page shows its title, a click opens it."""
    rows = [[str(cell) for cell in row] for row in rows]
    return {
        "folded": True,
        "title": f"Data of the figure ({len(rows)} rows)",
        "caption": "",
        "headers": list(headers),
        "justify": list(justify),
        "rows": rows,
    }


def number_text(value: float | None) -> str:
    """A number for a figure's table: thousands separated at 10 and above, else 3 figures."""
    return "-" if value is None else f"{value:,.1f}" if value >= 10 else f"{value:.3g}"


def result_size(result: dict[str, Any]) -> Any:
    """The input size of a result: its image side or sequence length, measured or asked."""
    m, case = result["metrics"], result["case"]
    return m.get("image_size") or m.get("seq_len") or case.get("image_size") or case.get("seq_len")
