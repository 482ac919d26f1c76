"""Tables a person can read at lab scale (issue 34, items 5 and 6): every table fits 100
columns without cutting a name or a number, names each row's system, shows an interval from
too few runs as "n/a (2 runs)", and says a text in full (wrapped at spaces, whole in
Markdown and CSV)."""

from __future__ import annotations

import csv
import io
import re

import pytest
from rich.console import Console

from trainperf.analysis.compare import compare
from trainperf.cli.common import PIPED_WIDTH, output_width
from trainperf.measure.hierarchy import mean_interval
from trainperf.report.cells import Column, chosen
from trainperf.report.compare import compare_table, groups_table
from trainperf.report.markdown import markdown_table
from trainperf.report.predict import prediction_table
from trainperf.report.sweep import summary_table
from trainperf.report.tables import CSV_COLUMNS, results_csv, results_table

WIDTH = 100


def rendered(table, width=WIDTH) -> list[str]:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(table)
    return console.export_text().splitlines()


def fits(lines: list[str], width: int = WIDTH) -> None:
    too_long = [line for line in lines if len(line.rstrip()) > width]
    assert not too_long, too_long
    assert not any("…" in line for line in lines), "a cell was cut"


def result(host, runs, *, fingerprint=None, model="resnet50", devices=1, framework="pytorch"):
    """An ok result whose runs measured ``runs`` samples/s, as a store returns it."""
    interval = mean_interval(runs)
    case = {"model": model, "batch_size": 64, "image_size": 224, "precision": "bf16"}
    case |= {"device": "cuda", "devices": devices, "framework": framework, "steps": "fixed:5:50"}
    metrics = {
        "samples_per_s_median": sum(runs) / len(runs),
        "run_samples_per_s": list(runs),
        "runs": len(runs),
        "samples_per_s_ci95": [interval.low, interval.high] if interval else None,
        "ci95_relative": interval.relative_half_width if interval else None,
    }
    system = {"fingerprint": fingerprint or f"fp-{host}", "hostname": host}
    return {"id": 1, "status": "ok", "case": case, "metrics": metrics, "system": system}


def failed(host, status, message):
    failure = result(host, [1.0])
    return failure | {"status": status, "metrics": {}, "error": {"message": message}}


# --- results ---------------------------------------------------------------------------


def test_results_fit_100_columns_and_name_the_system_of_each_row():
    rows = [result(f"gpu-node-{i:03d}.lab", [1502.3, 1498.7, 1510.2]) for i in (1, 2)]
    rows.append(result("gpu-node-003.lab", [1200.0, 1400.0], devices=2))
    lines = rendered(results_table(rows, width=WIDTH))
    fits(lines)
    header = lines[1].split()
    assert header[:5] == ["model", "size", "batch", "devices", "prec"]
    assert "system" in header and "status" in header and "±95%" in header
    assert sum("gpu-node-00" in line for line in lines) == 3  # each row names its system
    assert "1503.7" in lines[3] and "±1.0%" in lines[3]
    # two runs: a Student t interval with t = 12.7 is not shown as if it meant something
    assert "2 ddp" in lines[5] and "n/a (2 runs)" in lines[5]


def test_one_system_has_no_system_column_and_shared_hostnames_get_a_short_fingerprint():
    one = rendered(results_table([result("a", [1.0, 1.1, 1.2])], width=WIDTH))
    assert "system" not in one[1]
    rows = [result("node7", [1.0, 1.1, 1.2], fingerprint=f) for f in ("3f9a0c21aa", "77b1e5d0bb")]
    lines = rendered(results_table(rows, width=WIDTH))
    assert any("node7 (3f9a0c21)" in line for line in lines)
    assert any("node7 (77b1e5d0)" in line for line in lines)


def test_a_page_of_one_systems_rows_still_names_it_when_the_store_has_more():
    rows = [result("node001.lab", [1.0, 1.1, 1.2], fingerprint="fp1")]
    hostnames = {"fp1": "node001.lab", "fp2": "node002.lab"}
    lines = rendered(results_table(rows, width=WIDTH, systems=hostnames))
    assert "system" in lines[1] and "node001.lab" in lines[3]
    alone = rendered(results_table(rows, width=WIDTH, systems={"fp1": "node001.lab"}))
    assert "system" not in alone[1]


def test_jax_rows_are_labelled_and_all_pytorch_needs_no_framework_column():
    rows = [result("a", [10.0, 11.0, 12.0]), result("a", [9.0, 9.5, 9.2], framework="jax")]
    lines = rendered(results_table(rows, width=WIDTH))
    assert "framework" in lines[1] and "jax" in lines[4] and "pytorch" in lines[3]
    assert "framework" not in rendered(results_table(rows[:1], width=WIDTH))[1]


def test_a_narrow_console_drops_columns_by_priority_and_says_which():
    rows = [result(f"node{i}", [10.0, 11.0, 12.0]) for i in range(2)]
    lines = rendered(results_table(rows, width=70), width=70)
    fits(lines, 70)
    assert "±95%" not in lines[1] and "model" in lines[1] and "system" in lines[1]
    assert "left out to fit 70 columns: ±95%" in " ".join(" ".join(lines).split())


def test_wide_shows_every_column_whatever_the_width():
    rows = [result("a", [10.0, 11.0, 12.0])]
    lines = rendered(results_table(rows, wide=True), width=400)
    for header in ("framework", "device", "runs", "tokens/s", "MFU", "peak mem", "runs ended"):
        assert header in lines[1], header


def test_a_reason_shared_by_many_rows_is_given_once_under_the_table():
    reason = "device 'cuda' is not available on this machine: available cpu"
    rows = [failed("a", "skipped", reason) for _ in range(4)] + [failed("a", "oom", "no room")]
    lines = rendered(results_table(rows, width=WIDTH))
    fits(lines)
    text = " ".join(" ".join(lines).split())
    assert text.count("skipped [1]") == 4 and "oom [2]" in text
    assert text.count(reason) == 1 and "[1] " + reason in text and "[2] no room" in text


def test_status_reasons_wrap_at_word_boundaries_and_are_whole_in_markdown():
    reason = (
        "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total capacity; "
        "13.10 GiB already allocated; 1.20 GiB free) while building the optimizer state"
    )
    rows = [result("a", [10.0, 11.0, 12.0]), failed("a", "oom", reason)]
    for table in (results_table(rows, width=WIDTH), summary_table(rows)):
        lines = rendered(table)
        fits(lines)
        words = set(" ".join(lines).split())
        assert all(word in words for word in reason.split()), "a word was cut"
        assert reason in markdown_table(table)


def test_lows_are_never_below_zero_and_csv_tells_placements_apart():
    two_runs = result("host-a", [100.0, 300.0], devices=2)  # t = 12.7: low end far below 0
    assert two_runs["metrics"]["samples_per_s_ci95"][0] == 0.0
    old = result("host-b", [100.0, 110.0, 120.0], framework="jax")
    old["metrics"]["samples_per_s_ci95"] = [-67.3, 287.3]  # stored before the clamp
    rows = list(csv.DictReader(io.StringIO(results_csv([two_runs, old]), newline="")))
    for column in ("devices", "nodes", "parallel", "framework", "hostname"):
        assert column in CSV_COLUMNS, column
    assert [(r["devices"], r["parallel"], r["framework"]) for r in rows] == [
        ("2", "ddp", "pytorch"),
        ("1", "none", "jax"),
    ]
    assert [r["hostname"] for r in rows] == ["host-a", "host-b"]
    assert all(float(r["samples_per_s_ci95_low"]) >= 0 for r in rows)


def test_csv_and_markdown_keep_reasons_whole():
    reason = "skipped: framework jax is not installed here; " * 4
    text = results_csv([failed("a", "skipped", reason)])
    assert next(csv.DictReader(io.StringIO(text, newline="")))["error"] == reason


# --- compare -----------------------------------------------------------------------------


def test_compare_100_systems_are_100_rows_of_a_table_that_fits():
    hosts = [f"node{i:03d}.lab" for i in range(100)]
    results = [result(h, [100.0 + i, 101.0 + i, 102.5 + i]) for i, h in enumerate(hosts)]
    document = compare(results, baseline=hosts[0])
    lines = rendered(compare_table(document, WIDTH))
    fits(lines)
    assert lines[1].split() == [
        "case", "system", "samples/s", "±95%", "ratio", "95%", "CI", "decision"
    ]  # fmt: skip
    rows = [line for line in lines if re.search(r"node\d{3}\.lab +\d", line)]
    assert len(rows) == 100 and [re.search(r"node\d{3}\.lab", r)[0] for r in rows] == hosts
    assert "resnet50 b64" in rows[0] and "baseline" in rows[0]
    assert re.search(r"node050\.lab +151\.2 +±2\.1% +1\.49 +1\.46-1\.53 +faster", rows[50])
    groups = rendered(groups_table(document, WIDTH))
    fits(groups)
    assert sum(bool(re.search(r"node\d{3}\.lab +\d", line)) for line in groups) == 2 * 99


def test_compare_shows_an_interval_from_2_runs_as_not_applicable():
    results = [result("a", [100.0, 101.0, 102.0]), result("b", [150.0, 190.0])]
    lines = rendered(compare_table(compare(results), WIDTH))
    (row,) = [line for line in lines if " b " in f" {line} "]
    assert row.count("n/a (2 runs)") == 2 and "no decision" in row  # ±95% and 95% CI


def test_compare_json_keeps_its_shape():
    document = compare([result("a", [1.0, 1.1, 1.2]), result("b", [2.0, 2.1, 2.2])])
    assert set(document) == {"baseline", "systems", "group_by", "across", "cases", "groups"}
    entry = document["cases"][0]["per_system"]["fp-b"]
    assert set(entry) >= {"samples_per_s", "samples_per_s_ci95", "ratio", "ci95", "decision"}


# --- predict -----------------------------------------------------------------------------


def test_the_readme_prediction_fits_100_columns(run_cli):
    code, out, err = run_cli(
        "predict -m resnet50 --device v100-sxm2-16gb --devices 1,8,64,512 --per-node 8 "
        "--intra nvlink2 --inter ib-edr --batch-size 64 --precision fp16"
    )
    assert code == 0, err
    fits(out.splitlines())
    # 385,970.0 before DDP's bucket copies (0.6 ms a step here) and the refitted 8.25 ms;
    # 385,531.5 before the optimizer's step was split out of the backward (1.1 ms of SGD
    # here) and the terms refitted (8.37 ms, cv 0.0254)
    assert "samples/s" in out and "efficiency" in out and "385,538.7" in out


def test_prediction_columns_are_dropped_by_priority():
    def column(header, drop):
        return Column(header, ["x" * 20], drop=drop)

    columns = [column("a", 0), column("b", 2), column("c", 1), column("d", 99)]
    assert [c.header for c in chosen(columns, 100, wide=False)] == ["a", "b", "c"]
    assert [c.header for c in chosen(columns, 44, wide=False)] == ["a", "b"]
    assert [c.header for c in chosen(columns, 10, wide=False)] == ["a"]
    assert [c.header for c in chosen(columns, 10, wide=True)] == ["a", "b", "c", "d"]
    assert callable(prediction_table)


# --- the width of the console --------------------------------------------------------------


@pytest.mark.parametrize(
    "terminal, environ, expected",
    [
        (False, {}, PIPED_WIDTH),
        (False, {"COLUMNS": "80"}, 80),
        (True, {"COLUMNS": "132"}, 132),
        (True, {}, None),  # the terminal's own, as Rich reads it
        (False, {"COLUMNS": "wide"}, PIPED_WIDTH),
        (False, {"COLUMNS": "0"}, PIPED_WIDTH),
        (False, {"COLUMNS": "²"}, PIPED_WIDTH),  # str.isdigit takes it, int() does not
        (False, {"COLUMNS": "٣٠"}, PIPED_WIDTH),  # int() takes it; Rich is not shown it
    ],
)
def test_one_rule_decides_the_width(terminal, environ, expected):
    assert output_width(terminal, environ) == expected


def test_the_consoles_are_not_shown_a_size_that_is_not_digits():
    """Rich reads COLUMNS and LINES by str.isdigit, then int(): COLUMNS=² was a traceback
    in every verb, at import."""
    from rich.console import Console

    from trainperf.cli.common import ScreenEnviron

    raw = {"COLUMNS": "²", "LINES": "٣", "TERM": "dumb"}
    environ = ScreenEnviron(raw)
    assert dict(environ) == {"TERM": "dumb"} and environ.get("COLUMNS") is None
    assert Console(_environ=environ, file=io.StringIO()).size.width == 80  # Rich's default
    assert ScreenEnviron({"COLUMNS": "72"})["COLUMNS"] == "72"


def test_piped_output_is_100_columns_or_columns(report_db_zoo, run_cli, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    for verb in ("results", "compare", "scaling"):
        code, out, err = run_cli([verb, "--db", report_db_zoo])
        assert code == 0, err
        fits(out.splitlines())
        assert max(len(line) for line in out.splitlines()) > 80, verb  # not Rich's 80
    monkeypatch.setenv("COLUMNS", "72")
    code, out, err = run_cli(["results", "--db", report_db_zoo])
    assert code == 0, err
    fits(out.splitlines(), 72)
    assert "big-cpu<b>" in out  # the system column is kept


def test_results_of_one_system_of_two_name_it(report_db_zoo, run_cli, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    code, out, err = run_cli(["results", "--db", report_db_zoo, "--system", "big-cpu<b>"])
    assert code == 0, err
    lines = out.splitlines()
    assert lines[1].split()[-1] == "system"
    rows = [line for line in lines[3:] if line[:1].strip()]  # not a wrapped reason's line
    assert rows and all(line.endswith("big-cpu<b>") for line in rows)


def test_results_wide_piped_is_not_squeezed(report_db_zoo, run_cli, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    code, out, err = run_cli(["results", "--db", report_db_zoo, "--wide"])
    assert code == 0, err
    assert max(len(line) for line in out.splitlines()) > WIDTH and "…" not in out
    assert "runs ended" in out and "peak mem" in out


def test_a_verb_runs_with_a_columns_that_is_not_digits():
    import os
    import subprocess
    import sys

    environ = os.environ | {"COLUMNS": "²", "LINES": "²"}
    done = subprocess.run(
        [sys.executable, "-m", "trainperf", "suites"], env=environ, capture_output=True, text=True
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert max(len(line) for line in done.stdout.splitlines()) <= PIPED_WIDTH
