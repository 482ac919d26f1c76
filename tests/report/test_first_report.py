"""The first report a newcomer makes: `trainperf run` (the quick suite) names the report
command, and the report of what it stored has the throughput of every case, its interval
and its runs; with several systems, the same side by side."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest

import report_fixture
from trainperf.launch import sweep as sweep_module
from trainperf.report.figures_cases import case_figures
from trainperf.store.database import Store

QUICK_CPU = ("cifarnet b64", "resnet18 b16 @64", "resnet50 b8 @64", "bert-squad b2 @32")


class Worker:
    """Stands in for ``run_in_child``: an ok run whose throughput depends on the case and,
    by a few percent, on the call (runs differ as real ones do)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, case, workdir, stop=None, rendezvous=None):
        self.calls += 1
        value = 1000.0 / case.batch_size * (1 + 0.01 * (self.calls % 3))
        return report_fixture.worker_ok_run(case, value)


def runs_drawn(svg: str) -> int:
    """How many run dots a figure holds: the points of its scatter collections."""
    root = ET.fromstring(svg)
    groups = [
        g for g in root.iter("{http://www.w3.org/2000/svg}g") if "PathCollection" in g.get("id", "")
    ]
    return sum(1 for g in groups for _ in g.iter("{http://www.w3.org/2000/svg}use"))


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """`trainperf run` of the quick suite (CPU cases measured by a stand-in worker), then
    `trainperf report` of its store."""
    root = tmp_path_factory.mktemp("quick")
    db = root / "quick.db"
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(sweep_module, "run_in_child", Worker())
    from trainperf.cli import main

    def cli(args):
        with pytest.raises(SystemExit) as info:
            main([str(a) for a in args])
            raise SystemExit(0)
        return info.value.code

    try:
        run_code = cli(["run", "--db", db])
    finally:
        monkeypatch.undo()
    return root, db, run_code


def test_run_ends_by_naming_the_report_command(quick, capsys, tmp_path, run_cli):
    root, db, run_code = quick
    assert run_code == 0
    with Store(db) as store:
        assert {r["status"] for r in list(store.select())} >= {"ok"}
    # The line itself, from a run of one case (what the quick suite's last lines say too).
    worker = Worker()
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(sweep_module, "run_in_child", worker)
        args = ["run", "--model", "cifarnet", "--batch-size", "8", "--runs", "3"]
        code, out, err = run_cli([*args, "--db", tmp_path / "one b.db"])
    assert code == 0, err
    last = err.strip().splitlines()[-1]
    assert last == (
        f"figures of what is stored: trainperf report --db '{tmp_path / 'one b.db'}' "
        "(writes trainperf-report/index.html)"
    )


def test_first_report_has_the_throughput_of_every_case(quick, run_cli):
    root, db, _ = quick
    code, out, err = run_cli(["report", "--db", db, "--out", root / "site", "--json"])
    assert code == 0, err
    summary = json.loads(out)
    assert (
        summary["figures"][0] == "throughput-per-case" and "cases" not in summary["empty_sections"]
    )
    page = (root / "site" / "index.html").read_text()
    body = page.split('<figure id="throughput-per-case" class="chart">')[1].split("</figure>")[0]
    svg = re.search(r"<svg.*?</svg>", body, re.S).group(0)
    text = " ".join(ET.fromstring(svg).itertext())
    for label in QUICK_CPU:
        assert label in text
    with Store(db) as store:
        ok = [r for r in list(store.select()) if r["status"] == "ok"]
    assert len(ok) == 4 and all(r["metrics"]["runs"] >= 3 for r in ok)
    assert runs_drawn(svg) == sum(r["metrics"]["runs"] for r in ok)  # every run a dot
    assert "95% confidence interval" in body and "Throughput per case:" in body


def test_a_single_run_is_a_marker_without_interval(tmp_path):
    db = tmp_path / "one.db"
    data = report_fixture.seed()
    result = next(r for r in data["results"] if r["case"].get("devices", 1) == 1)
    single = report_fixture.recombined(
        result | {"case": result["case"] | {"runs": 1}}, result["runs"][:1]
    )
    with Store(db) as store:
        sweep = store.start_sweep(data["system"])
        store.add_result(sweep, data["system"]["fingerprint"], single)
        (figure,) = case_figures(list(store.select()))
    assert single["metrics"]["runs"] == 1 and not single["metrics"].get("samples_per_s_ci95")
    assert runs_drawn(figure.svg) == 0 and "Throughput per case: vm" in figure.title


def test_several_systems_side_by_side(tmp_path):
    db = tmp_path / "two.db"
    facts = report_fixture.build(db)
    with Store(db) as store:
        (figure,) = case_figures(list(store.select()))
    assert figure.title == "Throughput per case, systems side by side"
    text = " ".join(ET.fromstring(figure.svg).itertext())
    assert facts["hostnames"]["a"] in text and facts["hostnames"]["b"] in text
    assert "cifarnet b32 fp32 cpu ddp x4" in text and "Capped" not in figure.caption
