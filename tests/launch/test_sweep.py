"""Sweeps end to end: every outcome, resume after SIGKILL, SIGTERM, concurrent writers."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import psutil
import pytest

from flaky_nets import FLAKY_NETS
from trainperf.case.suite import BUILTIN, builtin_path

FLAKY_SUITE = """\
name: flaky
description: one case of each outcome
defaults: {image_size: 8, steps: "fixed:1:2", timeout_s: 120, runs: 1}
cases:
  - {model: "flakynets:normal", batch_size: 4}
  - {model: "flakynets:hog", batch_size: 2}
  - {model: "flakynets:hog", batch_size: 4}
  - {model: "flakynets:aborts", batch_size: 2}
  - {model: "flakynets:hangs", batch_size: 2, timeout_s: 20}
  - {model: cifarnet, batch_size: 2, device: cuda}
"""


def write_suite(directory, text, name="suite.yaml"):
    path = directory / name
    path.write_text(text)
    return path


def rows(db):
    with sqlite3.connect(db) as connection:
        return connection.execute(
            "SELECT json_extract(case_json, '$.model'), json_extract(case_json, '$.batch_size'),"
            " status, case_key FROM results ORDER BY id"
        ).fetchall()


def test_every_outcome_gets_its_status_and_nothing_is_left_running(tmp_path, run_cli, user_nets):
    suite, db = write_suite(tmp_path, FLAKY_SUITE), tmp_path / "r.db"
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    code, out, err = run_cli(["run", suite, "--db", db, "--json"])
    assert code == 1  # some cases failed
    document = json.loads(out)
    statuses = [(r["case"]["model"], r["status"]) for r in document["results"]]
    assert statuses == [
        ("flakynets:normal", "ok"),
        ("flakynets:hog", "oom"),
        ("flakynets:hog", "skipped"),  # a larger batch than one that ran out of memory
        ("flakynets:aborts", "crashed"),
        ("flakynets:hangs", "timeout"),
        ("cifarnet", "skipped"),  # no CUDA device here
    ]
    errors = [r["error"] for r in document["results"]]
    assert "can't allocate memory" in errors[1]["message"]
    assert errors[2]["message"] == "batch 2 of the same case already ran out of memory"
    assert errors[3]["message"] == "killed by signal SIGABRT"
    # 20 s: the runs are shuffled, so the hanging case may be the first process of a fresh
    # clone, compiling torch's bytecode before it reaches the forward that hangs.
    assert errors[4]["message"].startswith("no result after 20 s: killed; stuck at ")
    sleep_line = 1 + FLAKY_NETS.splitlines().index("                time.sleep(600)")
    assert errors[4]["message"].endswith(f"flakynets.py:{sleep_line} in forward")
    assert "device 'cuda' is not available" in errors[5]["message"]
    assert document["counts"] == {"ok": 1, "oom": 1, "skipped": 2, "crashed": 1, "timeout": 1}
    assert document["suite"]["name"] == "flaky" and len(document["suite"]["version"]) == 12
    # Stored as they finished (skips first, the runs shuffled), one row per case.
    assert sorted(status for _, _, status, _ in rows(db)) == sorted(s for _, s in statuses)
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


def test_summary_groups_by_status_with_reasons(tmp_path, run_cli, user_nets):
    text = FLAKY_SUITE.split('  - {model: "flakynets:hog"')[0]
    text += "  - {model: cifarnet, batch_size: 2, device: cuda}\n"
    code, out, err = run_cli(["run", write_suite(tmp_path, text), "--db", tmp_path / "r.db"])
    assert code == 0, out  # ok and skipped only
    assert "summary" in out and "device 'cuda' is not available" in out
    assert "left ~" not in out  # progress goes to stderr, and is gone at the end


def test_max_batch_comes_from_the_store_or_a_search(tmp_path, run_cli, user_nets):
    text = (
        "name: biggest\ndefaults: {image_size: 8, steps: 'fixed:1:2', timeout_s: 60, runs: 1}\n"
        "cases:\n  - {model: 'flakynets:hog_above_5', batch_size: max}\n"
    )
    db = tmp_path / "r.db"
    code, out, _ = run_cli(
        ["maxbatch", "flakynets:hog_above_5", "--image-size", 8, "--start", 4, "--limit", 6]
        + ["--db", db, "--json"]
    )
    assert code == 0
    found = json.loads(out)
    assert found["batch_size"] == 5
    assert [(p["batch_size"], p["fits"]) for p in found["probes"]] == [
        (4, True),
        (6, False),
        (5, True),
    ]
    code, out, _ = run_cli(["run", write_suite(tmp_path, text), "--db", db, "--json"])
    (result,) = json.loads(out)["results"]
    assert code == 0 and result["status"] == "ok" and result["case"]["batch_size"] == 5


def test_bad_suites_are_refused_before_anything_is_written(tmp_path, run_cli):
    cases = {
        "malformed.yaml": ("name: x\ncases: [\n  {model: resnet18\n", ":4: malformed YAML"),
        "unknown.yaml": (
            "name: x\ncases:\n  - {model: resnet18, batch_size: 2, colour: red}\n",
            ":3: cases[0].colour: unknown case field 'colour'",
        ),
        "type.yaml": (
            "name: x\nmatrix:\n  model: [resnet18]\n  batch_size: [two]\n",
            ":4: matrix.batch_size[0]: batch_size must be a positive integer",
        ),
        "empty.yaml": ("name: x\nmatrix: {}\n", ":2: matrix: is empty"),
        "model.yaml": (
            "name: x\ncases:\n  - {model: resnt18, batch_size: 2}\n",
            ":3: cases[0]: unknown model 'resnt18'",
        ),
    }
    db = tmp_path / "r.db"
    for name, (text, message) in cases.items():
        path = write_suite(tmp_path, text, name)
        code, out, err = run_cli(["run", path, "--db", db])
        assert code == 2, name
        assert err.startswith(f"trainperf: error: {path}{message}") and err.count("\n") == 1
        assert out == ""
    assert not db.exists()
    code, _, err = run_cli(["run", "resnet50-please", "--db", db])
    assert code == 2 and "unknown suite 'resnet50-please'" in err
    code, _, err = run_cli(["run", "quick", "--model", "resnet18", "--db", db])
    assert code == 2 and "not both" in err
    code, _, err = run_cli(["run", "--precision", "bf16", "--db", db])
    assert code == 2 and "--precision describe one case and need --model" in err
    assert not db.exists()


def test_suites_lists_the_builtins(run_cli):
    code, out, _ = run_cli(["suites", "--json"])
    names = [s["name"] for s in json.loads(out)]
    assert code == 0
    assert names == list(BUILTIN)  # in the order the module declares them
    shipped = {p.stem for p in builtin_path("quick").parent.glob("*.yaml")}
    assert sorted(names) == sorted(shipped) and len(names) == 11


# --- the sweep as a separate process, killed from outside -------------------------------

SLOW_SUITE = """\
name: slow
defaults: {image_size: 8, timeout_s: 120, runs: RUNS}
cases:
  - {model: "flakynets:normal", batch_size: 2, steps: "fixed:0:2"}
  - {model: "flakynets:slow", batch_size: 2, steps: "fixed:0:10"}
  - {model: "flakynets:normal", batch_size: 4, steps: "fixed:0:2"}
"""


def slow_suite(directory, runs, cases=3):
    lines = SLOW_SUITE.replace("RUNS", str(runs)).splitlines()
    return write_suite(directory, "\n".join(lines[: 3 + cases]) + "\n")


def run_rows(db):
    """(case key, result uid, status) of every stored run."""
    with sqlite3.connect(db) as connection:
        return connection.execute("SELECT case_key, result_uid, status FROM runs").fetchall()


def start_sweep(suite, db, *extra):
    command = [sys.executable, "-m", "trainperf", "run", str(suite), "--db", str(db), *extra]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_rows(db, count, sweep, timeout_s=90, table=rows):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert sweep.poll() is None, sweep.communicate()
        if db.exists():
            try:
                if len(table(db)) >= count:
                    return
            except sqlite3.OperationalError:
                pass  # the schema is being created
        time.sleep(0.2)
    raise AssertionError(f"fewer than {count} results after {timeout_s} s")


def measuring_children(sweep):
    """The worker processes of the sweep, once the second case has started."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        children = psutil.Process(sweep.pid).children(recursive=True)
        if children:
            return children
        time.sleep(0.1)
    raise AssertionError("the sweep started no child")


def test_sigkill_mid_sweep_then_rerun_measures_only_the_runs_missing(tmp_path, user_nets):
    suite, db = slow_suite(tmp_path, runs=2, cases=2), tmp_path / "r.db"
    sweep = start_sweep(suite, db, "--order-seed", "3")
    wait_for_rows(db, 1, sweep, table=run_rows)
    children = measuring_children(sweep)  # the next run is being measured
    os.kill(sweep.pid, signal.SIGKILL)
    sweep.wait()
    # the worker dies with its parent instead of measuring on as an orphan
    _, alive = psutil.wait_procs(children, timeout=10)
    assert alive == []
    before = run_rows(db)
    assert before and all(status == "ok" for *_, status in before)

    rerun = start_sweep(suite, db)
    out, err = rerun.communicate(timeout=240)
    assert rerun.returncode == 0, err
    final = rows(db)
    assert [status for _, _, status, _ in final] == ["ok", "ok"]
    assert len({key for *_, key in final}) == 2  # each case exactly once
    runs = run_rows(db)
    assert len(runs) == 4  # 2 per case: the runs stored before the kill were kept and used
    assert all(result_uid for _, result_uid, _ in runs)
    assert {key for key, _, _ in before} <= {key for key, _, _ in runs}


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_ctrl_c_stop_cleanly_after_ending_the_running_child(
    tmp_path, user_nets, signum
):
    suite, db = slow_suite(tmp_path, runs=1), tmp_path / "r.db"
    sweep = start_sweep(suite, db)
    wait_for_rows(db, 1, sweep)
    children = measuring_children(sweep)
    sweep.send_signal(signum)
    out, err = sweep.communicate(timeout=30)
    assert sweep.returncode == 128 + signum
    assert f"interrupted by {signal.Signals(signum).name}: 2 case(s) not run" in err
    assert "summary" in out  # what finished is still reported
    _, alive = psutil.wait_procs(children, timeout=5)
    assert alive == []
    assert [status for _, _, status, _ in rows(db)] == ["ok"]  # no row for the killed case


def grid_suite(name, model, runs, batch_sizes):
    """A suite of ``model`` at each batch size, 2 steps a run: the concurrent sweeps' suites."""
    cases = "".join(f"  - {{model: '{model}', batch_size: {b}}}\n" for b in batch_sizes)
    return (
        f"name: {name}\ndefaults: {{image_size: 8, steps: 'fixed:0:2', runs: {runs}}}\ncases:\n"
        + cases
    )


def finish_all(sweeps, timeout_s):
    """Wait for sweeps started together; each must exit 0."""
    for sweep in sweeps:
        _, err = sweep.communicate(timeout=timeout_s)
        assert sweep.returncode == 0, err


def test_two_concurrent_sweeps_share_one_database(tmp_path, user_nets):
    db = tmp_path / "shared.db"
    suites = [
        write_suite(tmp_path, grid_suite(f"s{n}", "flakynets:normal", 1, (1, 2)), f"s{n}.yaml")
        for n in (1, 2)
    ]
    finish_all([start_sweep(suite, db) for suite in suites], timeout_s=180)
    with sqlite3.connect(db) as connection:
        per_suite = connection.execute(
            "SELECT suite, count(*) FROM results WHERE status = 'ok' GROUP BY suite ORDER BY suite"
        ).fetchall()
        runs = connection.execute("SELECT count(*) FROM runs WHERE result_uid IS NOT NULL")
        assert runs.fetchone() == (4,)
    assert per_suite == [("s1", 2), ("s2", 2)]


def test_two_identical_sweeps_at_once_measure_each_case_once(tmp_path, user_nets):
    db = tmp_path / "shared.db"
    suite = write_suite(tmp_path, grid_suite("same", "flakynets:slow", 2, (1, 2, 3)), "same.yaml")
    finish_all([start_sweep(suite, db, "--order-seed", str(seed)) for seed in (1, 2)], 240)
    with sqlite3.connect(db) as connection:
        per_case = connection.execute(
            "SELECT case_key, count(*) FROM runs GROUP BY case_key"
        ).fetchall()
        leases = connection.execute("SELECT count(*) FROM leases").fetchone()
    assert len(per_case) == 3 and all(count == 2 for _, count in per_case)  # not 4
    assert [status for _, _, status, _ in rows(db)] == ["ok"] * 3
    assert leases == (0,)
