"""Figures drawn at once: cached by content (the same data is not drawn again, changed data
or code is), drawn in worker processes exactly as here."""

from __future__ import annotations

import copy

import pytest

import report_fixture
from trainperf.report import drawing
from trainperf.report.figure_kit import Drawing
from trainperf.report.html import Report, read
from trainperf.report.site import write_report
from trainperf.store.database import Store


@pytest.fixture
def counted(monkeypatch):
    """The keys of the figures drawn in this process, in order."""
    keys: list[str] = []
    render = Drawing.render

    def counting(self, key):
        keys.append(key)
        return render(self, key)

    monkeypatch.setattr(Drawing, "render", counting)
    return keys


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    db = tmp_path_factory.mktemp("drawing") / "two.db"
    report_fixture.build(db)
    return db


def test_same_data_is_taken_from_the_cache_changed_data_is_drawn(store, tmp_path, counted):
    site = tmp_path / "site"
    first = write_report(store, site, generated_at="now", workers=1)
    page = (site / "index.html").read_bytes()
    assert counted == first.figures and len(counted) >= 10
    cached = sorted((site / drawing.CACHE_DIR).iterdir())
    assert len(cached) == len(first.figures)

    counted.clear()
    again = write_report(store, site, generated_at="now", workers=1)
    assert counted == [] and again.figures == first.figures
    assert (site / "index.html").read_bytes() == page

    # A new result of one system: the figures that show it are drawn again, no other.
    with Store(store) as db:
        result = copy.deepcopy(next(r for r in db.results() if r["case"]["batch_size"] == 128))
        result["case"]["batch_size"] = 256
        result["metrics"]["samples_per_s_median"] *= 1.5
        sweep = db.start_sweep(result["system"], label="more")
        db.add_result(sweep, result["system"]["fingerprint"], result)
    counted.clear()
    changed = write_report(store, site, generated_at="now", workers=1)
    assert (
        "throughput-per-case" in counted and "throughput-vs-batch-cifarnet-32-fp32-cpu" in counted
    )
    assert not any(key.startswith(("gemm", "collective", "layer")) for key in counted)
    assert "cifarnet b256 fp32 cpu" in (site / "index.html").read_text()
    # The cache holds this report's figures only.
    assert len(list((site / drawing.CACHE_DIR).iterdir())) == len(changed.figures)


def test_other_code_or_a_damaged_file_is_drawn_again(store, tmp_path, counted, monkeypatch):
    site = tmp_path / "site"
    summary = write_report(store, site, generated_at="now", workers=1)
    victim = sorted((site / drawing.CACHE_DIR).iterdir())[0]
    victim.write_text(victim.read_text()[:100])  # cut short, as by a full disk
    counted.clear()
    write_report(store, site, generated_at="now", workers=1)
    assert len(counted) == 1

    monkeypatch.setattr(drawing, "code_version", lambda: "another trainperf")
    counted.clear()
    write_report(store, site, generated_at="now", workers=1)
    assert counted == summary.figures


def test_workers_draw_what_this_process_draws(store):
    report = Report(read(store), "two.db")
    chosen = report.figures[: drawing.MIN_PARALLEL + 1]
    with drawing.drawn(chosen, workers=2) as figures:
        parallel = [f.svg for f in figures]
    assert parallel == [f.drawing.render(f.key) for f in chosen]


def test_a_link_in_place_of_the_cache_is_not_followed(store, tmp_path):
    site, elsewhere = tmp_path / "site", tmp_path / "elsewhere"
    site.mkdir()
    elsewhere.mkdir()
    (site / drawing.CACHE_DIR).symlink_to(elsewhere)
    write_report(store, site, generated_at="now", workers=1)
    assert list(elsewhere.iterdir()) == [] and (site / "index.html").is_file()
