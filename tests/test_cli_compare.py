"""`trainperf compare` on the two-system fixture database."""

import json

import pytest

from report_fixture import SPEEDUP, build


@pytest.fixture(scope="module")
def fixture_db(tmp_path_factory):
    path = tmp_path_factory.mktemp("compare") / "r.db"
    return path, build(path, hostile_model=False)  # its export must import: zoo models only


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


# --- compare A B: two files or databases, read in place --------------------------------


@pytest.fixture(scope="module")
def sides(fixture_db, tmp_path_factory):
    """System A exported to a file; system B exported, then imported into a database."""
    db, known = fixture_db
    directory = tmp_path_factory.mktemp("sides")
    a, b_file, b_db = directory / "a.json", directory / "b.json", directory / "b.db"
    from trainperf.store import exchange
    from trainperf.store.database import Store
    from trainperf.store.query import ResultFilter

    with Store(db) as store:
        for path, system in ((a, known["systems"]["a"]), (b_file, known["systems"]["b"])):
            document = exchange.export_document(store, ResultFilter(system=(system,)))
            path.write_text(json.dumps(document))
    with Store(b_db) as store:
        exchange.import_document(store, json.loads(b_file.read_text()))
    return a, b_db


def test_compare_a_file_with_a_database(sides, run_cli):
    a, b = sides
    before = b.read_bytes()
    code, out, err = run_cli(["compare", a, b, "--json"])
    assert code == 0, err
    doc = json.loads(out)
    assert [s["label"] for s in doc["systems"]] == [f"A: {a}", f"B: {b}"]
    one_device = [
        c["per_system"]["B"]
        for c in doc["cases"]
        if c["case"]["devices"] == 1 and c["per_system"]["B"]["ratio"] is not None
    ]
    assert one_device and all(e["decision"] == "faster" for e in one_device)
    assert all(e["ratio"] == pytest.approx(SPEEDUP) for e in one_device)
    assert b.read_bytes() == before  # read in place, nothing written


def test_compare_a_side_with_itself_finds_no_difference(sides, run_cli):
    a, _ = sides
    code, out, _ = run_cli(["compare", a, a])
    assert code == 0
    assert "no significant difference" in out and "faster" not in out and "slower" not in out


def test_results_of_one_run_get_no_decision(tmp_path, run_cli):
    from old_store import old_database

    old = tmp_path / "old.db"
    old_database(old)
    before = old.read_bytes()
    code, out, err = run_cli(["compare", old, old, "--json"])
    assert code == 0, err
    entries = [c["per_system"]["B"] for c in json.loads(out)["cases"]]
    ok = [e for e in entries if e["status"] == "ok"]
    assert ok and all(e["decision"] is None for e in ok)
    assert all(e["absent_reason"].startswith("not enough runs: 1 on") for e in ok)
    assert old.read_bytes() == before  # the old schema is migrated in memory only


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: [d / "a.json"], "give two sources to compare, A B"),
        (lambda d: [d / "a.json", d / "missing.db"], "missing.db: no such file"),
        (
            lambda d: [d / "a.json", d / "junk.bin"],
            "is neither a trainperf database (SQLite) nor an exported file (JSON)",
        ),
        (lambda d: [d / "a.json", d / "other.json"], "format: missing"),
        (lambda d: [d / "a.json", d / "a.json", "--baseline", "vm"], "with A B the baseline"),
    ],
)
def test_compare_a_b_bad_input_is_one_line_and_exit_2(sides, tmp_path, run_cli, make, message):
    a, _ = sides
    (tmp_path / "a.json").write_text(a.read_text())
    (tmp_path / "junk.bin").write_bytes(b"\x00\x01 not a database" * 10)
    (tmp_path / "other.json").write_text('{"hello": 1}')
    before = sorted(p.name for p in tmp_path.iterdir())
    code, out, err = run_cli(["compare", *make(tmp_path)])
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_across_prints_a_column_per_system_and_value(fixture_db, run_cli, tmp_path):
    db, known = fixture_db
    code, out, err = run_cli(["compare", "--db", db, "--across", "framework"])
    assert code == 0, err
    assert out.count("framework=pytorch") >= 2 and "4.00" in out  # a column per system
    code, _, err = run_cli(["compare", db, db, "--across", "framework"])
    assert code == 2 and "--across compares within --db" in err
    code, _, err = run_cli(["compare", "--db", db, "--across", "colour"])
    assert code == 2 and "cannot compare across 'colour'" in err


def test_a_file_that_is_not_an_export_is_named_in_the_error(tmp_path, run_cli):
    array = tmp_path / "array.json"
    array.write_text("[1]")
    code, out, err = run_cli(["compare", array, array])
    assert code == 2 and out == ""
    assert (
        err
        == f"trainperf: error: {array}: expected a JSON object (trainperf-results), got an array\n"
    )
