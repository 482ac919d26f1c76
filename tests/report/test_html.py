"""``trainperf report``: the page from a two-system database, escaping, bad input."""

from __future__ import annotations

import json
import re

import pytest

import report_fixture
from trainperf.store.database import Store


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    db = root / "two.db"
    facts = report_fixture.build(db)
    from trainperf.report.site import write_report

    summary = write_report(db, root / "site")
    return facts, summary, summary.path.read_text()


def test_systems_and_results_of_both_machines(site):
    facts, summary, page = site
    assert summary.systems == 2
    for fingerprint in facts["systems"].values():
        assert fingerprint in page
    assert "big-cpu&lt;b&gt;" in page and "big-cpu<b>" not in page
    assert "2.13.0+cpu" in page  # the software of each system
    assert re.search(r"<td>cifarnet b32 fp32 cpu ddp x4</td><td class=\"num\">4</td>", page)


def test_failed_cases_are_shown_with_their_reason(site):
    _, summary, page = site
    failures = page.split('id="failures"')[1]
    for status, reason in (
        ("oom", "not enough memory"),
        ("timeout", "killed after 600 s"),
        ("crashed", "SIGABRT"),
        ("error", "raised"),
    ):
        assert f'class="status-{status}">{status}</td>' in failures
        assert reason in failures
    assert summary.failed == 4


def test_every_figure_has_a_caption_naming_its_system(site):
    facts, summary, page = site
    figures = re.findall(r'<figure id="([^"]+)" class="chart">(.*?)</figure>', page, re.S)
    assert [key for key, _ in figures] == summary.figures
    # The fixture runs one framework, one precision and no language model under two methods.
    assert summary.empty_sections == ["frameworks", "precision", "llm"]
    for key, body in figures:
        assert "<svg" in body, key
        caption = body.split("<figcaption>")[1]
        assert "vm" in caption or "big-cpu&lt;b&gt;" in caption, key


def test_text_from_results_is_escaped(site):
    _, _, page = site
    assert "<script" not in page.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<img" not in page  # the error message holding an <img onerror=...>
    assert "script-src" not in page and "default-src 'none'" in page


def test_empty_database_says_what_is_missing(tmp_path, run_cli):
    db = tmp_path / "empty.db"
    Store(db).close()
    code, out, err = run_cli(["report", "--db", db, "--out", tmp_path / "r", "--json"])
    assert code == 0, err
    summary = json.loads(out)
    assert summary["figures"] == [] and len(summary["empty_sections"]) == 11
    page = (tmp_path / "r" / "index.html").read_text()
    assert "No results stored." in page and "trainperf micro gemm" in page


def test_bad_input_writes_nothing(tmp_path, run_cli):
    code, out, err = run_cli(["report", "--db", tmp_path / "none.db", "--out", tmp_path / "r"])
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "no results database" in err
    assert not (tmp_path / "r").exists()
    db = tmp_path / "empty.db"
    Store(db).close()
    (tmp_path / "file").write_text("x")
    code, _, err = run_cli(["report", "--db", db, "--out", tmp_path / "file"])
    assert code == 2 and "is a file" in err
