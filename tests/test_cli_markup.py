"""User text is printed as text: a model or host name holding Rich markup (``[/]``) neither
crashes a verb with MarkupError nor styles what it prints."""

import sqlite3

import report_fixture

MODEL = "my.nets:[/]net[bold]"
HOST = "node[/]7"


def hostile_db(tmp_path):
    """The report fixture with one model renamed MODEL and every host renamed HOST."""
    db = tmp_path / "fixture.db"
    report_fixture.build(db)
    with sqlite3.connect(db) as connection:
        connection.execute(
            "UPDATE results SET model = ?, case_json = json_set(case_json, '$.model', ?) "
            "WHERE model = 'cifarnet'",
            (MODEL, MODEL),
        )
        connection.execute(
            "UPDATE systems SET hostname = ?, record = json_set(record, '$.hostname', ?)",
            (HOST, HOST),
        )
    return db


def test_results_print_markup_in_names_as_text(tmp_path, run_cli):
    db = hostile_db(tmp_path)
    code, out, err = run_cli(["results", "--db", db])
    assert code == 0, err
    assert MODEL in out  # as given: no markup eaten, no backslash shown
    code, out, err = run_cli(["results", "--db", db, "--format", "md"])
    assert code == 0 and f"| {MODEL} |" in out, err


def test_scaling_and_pareto_print_markup_in_host_names_as_text(tmp_path, run_cli):
    db = hostile_db(tmp_path)
    for verb in ("scaling", "pareto"):
        code, out, err = run_cli([verb, "--db", db, "--format", "md"])
        assert code == 0, (verb, err)
        assert HOST in out, verb
        code, out, err = run_cli([verb, "--db", db])
        assert code == 0 and "node[/]7" in out, (verb, err)


def test_a_sweep_prints_suite_and_host_names_with_markup_as_text(tmp_path, run_cli, monkeypatch):
    from trainperf.system import inventory as system

    collect = system.collect
    monkeypatch.setattr(system, "collect", lambda *a, **k: collect(*a, **k) | {"hostname": HOST})
    suite = tmp_path / "grid.yaml"
    suite.write_text(
        'name: "[/]grid"\n'
        "cases:\n"
        "  - {model: cifarnet, batch_size: 2, image_size: 16, steps: 'fixed:1:2', runs: 1,"
        " device: cpu}\n"
    )
    code, out, err = run_cli(["run", suite, "--db", tmp_path / "r.db"])
    assert code in (0, 1), err  # 1 if the case failed: its tables are printed all the same
    assert f"trainperf on {HOST}: suite [/]grid" in out
    assert "summary" in out
