"""A lab's fleet in the report: at most ``cap.SERIES_CAP`` systems drawn in a figure, the
others summarised in grey and listed under it, the caption saying so; a page per section
and per system, linked from the index."""

from __future__ import annotations

import re
import warnings
import xml.etree.ElementTree as ET

import pytest

import report_fixture
from trainperf.report import cap
from trainperf.report.site import write_report

SYSTEMS = 30
FIGURE = re.compile(r'<figure id="([^"]+)" class="chart">(.*?)</figure>', re.S)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet")
    db = root / "fleet.db"
    facts = report_fixture.build_fleet(db, systems=SYSTEMS)
    with warnings.catch_warnings(record=True) as caught:  # drawn here, where they are seen
        warnings.simplefilter("always")
        summary = write_report(db, root / "site", generated_at="now", workers=1)
    facts["warnings"] = [str(w.message) for w in caught]
    pages = {name: (root / "site" / name).read_text() for name in summary.pages}
    figures = {key: body for page in pages.values() for key, body in FIGURE.findall(page)}
    return facts | {"db": db, "site": root / "site"}, summary, pages, figures


def svg_text(body: str) -> str:
    """What a reader sees in the figure's drawing (its SVG's character data)."""
    return " ".join(ET.fromstring(re.search(r"<svg.*?</svg>", body, re.S).group(0)).itertext())


def hosts_in(text: str) -> set[str]:
    return set(re.findall(r"node\d\d", text))


def test_every_figure_draws_at_most_the_cap_of_systems(fleet):
    facts, summary, _, figures = fleet
    assert facts["warnings"] == []  # no "axes sizes collapsed to zero": sized for content
    assert sorted(figures) == sorted(summary.figures) and len(figures) >= 15
    for key, body in figures.items():
        caption = body.split("<figcaption>")[1].split("</figcaption>")[0]
        named = hosts_in(caption.split("Systems: ")[1].split(".")[0])
        assert 1 <= len(named) <= cap.SERIES_CAP, key
        if not key.startswith("layer-breakdown"):  # one system's, named in the title
            assert hosts_in(svg_text(body)) == named, key


def test_what_is_capped_is_said_and_listed_under_the_figure(fleet):
    facts, _, _, figures = fleet
    fastest = facts["hostnames"]  # fastest first
    for key in (
        "throughput-per-case",
        "throughput-vs-batch-cifarnet-32-fp32-cpu",
        "gemm-tflops-square",
    ):
        body = figures[key]
        assert f"Capped at 8 of {SYSTEMS}" in body and "listed in the table under" in body, key
        assert hosts_in(svg_text(body)) == hosts_in(" ".join(fastest[: cap.SERIES_CAP])), key
        assert f"{SYSTEMS - 8} other systems" in svg_text(body) or "other series" in svg_text(body)
        table = body.split("<details>")[1].split("</details>")[0]
        assert f"Not drawn: {SYSTEMS - 8} other" in table
        assert hosts_in(table) == hosts_in(" ".join(fastest[cap.SERIES_CAP :])), key
    # Lines, not systems, are capped where a system has two (in place and out of place).
    gather = figures["collective-busbw-all-gather-fp32"]
    assert len(hosts_in(svg_text(gather))) == cap.SERIES_CAP // 2
    # One layer breakdown per system drawn in the step breakdown, the others listed there.
    layers = [key for key in figures if key.startswith("layer-breakdown")]
    assert len(layers) == cap.SERIES_CAP
    assert f"Not drawn: {SYSTEMS - 8} other profiles" in figures["step-breakdown"]


def test_a_failure_of_a_system_not_drawn_is_counted_not_lost(fleet):
    _, summary, pages, figures = fleet
    batch = figures["throughput-vs-batch-cifarnet-32-fp32-cpu"]
    assert "oom at batch 4096 on node29&lt;b&gt;" in batch  # the fastest: drawn, marked x
    assert "oom at 4096" in batch.split("<details>")[1]  # node00's, in the table
    assert summary.failed == 2 and pages["failures.html"].count('class="status-oom"') == 2


def test_pages_are_whole_linked_from_the_index_and_escaped(fleet):
    _, summary, pages, _ = fleet
    assert summary.pages[-1] == "index.html" and len(summary.pages) == SYSTEMS + 7 + 3
    index = pages["index.html"]
    for name, page in pages.items():
        assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
        assert "default-src 'none'" in page and "<script" not in page.lower()
        if name != "index.html":
            assert f'href="{name}"' in index, name
            assert '<a href="index.html">Index</a>' in page
    assert "node29&lt;b&gt;" in index and "node29<b>" not in index
    node00 = next(page for name, page in pages.items() if name.startswith("system-node00-"))
    assert node00.count("<tr class=") == 6 + 1  # its results and its failed case
    assert "more than 8 systems" in index


def test_the_cli_names_the_pages_and_draws_nothing_again(run_cli, fleet):
    facts, summary, _, _ = fleet
    code, out, err = run_cli(["report", "--db", facts["db"], "--out", facts["site"]])
    assert code == 0, err
    assert out.startswith(f"wrote {facts['site'] / 'index.html'} and {SYSTEMS + 7 + 2} other page")
    assert f": {SYSTEMS} system(s), {summary.results} result(s) (2 failed)" in out
