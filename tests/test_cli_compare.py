"""`trainperf compare` on the two-system fixture database."""

import json

import pytest

from report_fixture import SPEEDUP, build


@pytest.fixture(scope="module")
def fixture_db(tmp_path_factory):
    path = tmp_path_factory.mktemp("compare") / "r.db"
    return path, build(path)


def test_table_names_the_baseline_and_shows_failures(fixture_db, run_cli):
    db, known = fixture_db
    code, out, err = run_cli(["compare", "--db", db])
    assert code == 0, err
    assert f"baseline {known['hostnames']['a']}" in out and "most ok cases" in out
    for status in ("oom", "timeout", "crashed", "error", "not run", "faster"):
        assert status in out
    assert "4.00" in out and "all cases" in out


def test_baseline_by_hostname_inverts_the_ratios(fixture_db, run_cli):
    db, known = fixture_db
    code, out, err = run_cli(["compare", "--db", db, "--baseline", "big-cpu<b>", "--json"])
    assert code == 0, err
    doc = json.loads(out)
    assert doc["baseline"]["fingerprint"] == known["systems"]["b"]
    assert "given" in doc["baseline"]["chosen"]
    a = known["systems"]["a"]
    ratios = [
        c["per_system"][a]["ratio"]
        for c in doc["cases"]
        if c["case"]["devices"] == 1 and c["per_system"][a]["ratio"] is not None
    ]
    assert ratios and all(r == pytest.approx(1 / SPEEDUP) for r in ratios)


def test_json_document(fixture_db, run_cli):
    db, known = fixture_db
    code, out, _ = run_cli(["compare", "--db", db, "--json", "--group-by", "none"])
    assert code == 0
    doc = json.loads(out)
    assert {s["fingerprint"] for s in doc["systems"]} == set(known["systems"].values())
    assert [g["label"] for g in doc["groups"]] == ["all cases"]
    for case in doc["cases"]:
        assert set(case["per_system"]) == set(known["systems"].values())
        assert case["key"] and case["case"]["model"]


def test_markdown_prints_both_tables(fixture_db, run_cli):
    db, _ = fixture_db
    code, out, _ = run_cli(["compare", "--db", db, "--format", "md"])
    assert code == 0
    table_lines = [line for line in out.splitlines() if line.startswith("|")]
    assert len(table_lines) > 10
    assert sum(1 for line in table_lines if line.startswith("| --- |")) == 2
    assert "**geometric mean of the ratios" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--baseline", "nowhere"], "no system 'nowhere'"),
        (["--group-by", "seed"], "cannot group by 'seed'"),
        (["--json", "--format", "md"], "choose one of --json and --format md"),
        (["--model", "vgg11"], "no results"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(fixture_db, run_cli, args, message):
    db, _ = fixture_db
    code, out, err = run_cli(["compare", "--db", db, *args])
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err
