"""The doctor's verdict travels with the results: `results` marks the results of sweeps
that warned, `compare` names every setting that differs between the compared sides (and
nothing when they agree), export and import carry it."""

import json
import shutil
import sqlite3

from trainperf.doctor import verdict_document
from trainperf.doctor.checks import Check

WHY = "matters"


def verdict(governor="performance", pcie=16, load_status="ok"):
    return verdict_document(
        [
            Check(
                "host.governor",
                "ok" if governor == "performance" else "warn",
                governor,
                WHY,
                value=governor,
                condition=True,
            ),
            Check("gpu0.pcie_link", "ok", f"x{pcie}", WHY, value={"width": pcie}, condition=True),
            Check("host.load", load_status, "load", WHY, value=0.5),  # volatile: never compared
        ],
        seconds=0.2,
    )


def set_verdicts(path, by_hostname):
    """Store a verdict on the sweeps of each system named (by hostname)."""
    with sqlite3.connect(path) as db:
        for hostname, document in by_hostname.items():
            db.execute(
                "UPDATE sweeps SET doctor_json = ? WHERE system IN"
                " (SELECT fingerprint FROM systems WHERE hostname = ?)",
                (json.dumps(document), hostname),
            )


def test_compare_names_the_settings_that_differ_between_systems(report_db_zoo, tmp_path, run_cli):
    db = tmp_path / "differ.db"
    shutil.copy(report_db_zoo, db)
    set_verdicts(
        db, {"vm": verdict(), "big-cpu<b>": verdict("powersave", pcie=8, load_status="warn")}
    )
    code, out, err = run_cli(["compare", "--db", db])
    assert code == 0, err
    assert "warning: measured under different conditions" in err
    assert "host.governor: performance (vm) vs powersave (big-cpu<b>)" in err
    assert 'gpu0.pcie_link: {"width": 16} (vm) vs {"width": 8} (big-cpu<b>)' in err
    assert "host.load" not in err  # a volatile reading is not a condition
    code, out, _ = run_cli(["compare", "--db", db, "--json"])
    differ = json.loads(out)["conditions_differ"]
    assert [d["check"] for d in differ] == ["host.governor", "gpu0.pcie_link"]
    assert differ[0]["values"] == {"performance": ["vm"], "powersave": ["big-cpu<b>"]}


def test_compare_of_systems_under_equal_conditions_warns_of_nothing(
    report_db_zoo, tmp_path, run_cli
):
    db = tmp_path / "equal.db"
    shutil.copy(report_db_zoo, db)
    set_verdicts(db, {"vm": verdict(load_status="warn"), "big-cpu<b>": verdict()})
    code, out, err = run_cli(["compare", "--db", db])
    assert code == 0 and "different conditions" not in err
    assert json.loads(run_cli(["compare", "--db", db, "--json"])[1])["conditions_differ"] == []


def test_compare_of_two_stores_names_what_differs_between_them(report_db_zoo, tmp_path, run_cli):
    a, b, c = (tmp_path / f"{name}.db" for name in "abc")
    for path, governor in ((a, "performance"), (b, "ondemand"), (c, "performance")):
        shutil.copy(report_db_zoo, path)
        set_verdicts(path, {"vm": verdict(governor), "big-cpu<b>": verdict(governor)})
    exported = tmp_path / "b.json"
    assert run_cli(["export", exported, "--db", b])[0] == 0  # one side an export: format 5
    code, _, err = run_cli(["compare", a, exported])
    assert code == 0, err
    assert f"host.governor: performance ({a}) vs ondemand ({exported})" in err
    code, _, err = run_cli(["compare", a, c])
    assert code == 0 and "different conditions" not in err


def test_results_mark_what_was_measured_while_the_doctor_warned(report_db_zoo, tmp_path, run_cli):
    db = tmp_path / "marked.db"
    shutil.copy(report_db_zoo, db)
    set_verdicts(db, {"vm": verdict(), "big-cpu<b>": verdict("powersave")})
    code, out, err = run_cli(["results", "--db", db, "-s", "vm", "--status", "ok"])
    assert code == 0 and " !" not in out and "trainperf doctor warned" not in out
    code, out, err = run_cli(["results", "--db", db, "-s", "big-cpu<b>", "--status", "ok"])
    assert code == 0, err
    rows = [line for line in out.splitlines() if line.rstrip().endswith("big-cpu<b>")]
    assert rows and all(" !" in line for line in rows)
    assert "measured while trainperf doctor warned or failed (host.governor)" in out
    document = json.loads(run_cli(["results", "--db", db, "--json"])[1])
    verdicts = {s: v["doctor"]["verdict"] for s, v in document["sweeps"].items()}
    assert sorted(verdicts.values()) == ["ok", "warn"]


def test_a_sweep_stores_the_verdict_it_printed(tmp_path, run_cli, monkeypatch):
    import trainperf.doctor as doctor

    stored = verdict("powersave")
    monkeypatch.setattr(doctor, "sweep_verdict", lambda db=None: stored)
    db = tmp_path / "r.db"
    code, out, err = run_cli(
        [
            "run",
            "-m",
            "cifarnet",
            "-b",
            "2",
            "--image-size",
            "8",
            "--steps",
            "fixed:0:1",
            "--runs",
            "1",
            "--db",
            db,
        ]
    )
    assert code == 0, err
    assert "doctor: warn: 2 ok, 1 warn (host.governor), 0 fail, 0 absent" in err
    document = json.loads(run_cli(["results", "--db", db, "--json"])[1])
    (sweep,) = document["sweeps"].values()
    assert sweep["doctor"] == stored
