"""``trainperf train`` and ``trainperf isoaccuracy`` end to end, on a tiny learnable CIFAR-10."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodes import loopback_endpoint, run_on_nodes
from trainperf.convergence.mllog import check_log

FAST = ["--max-epochs", "6", "-b", "32", "--lr-schedule", "piecewise:0.01@0", "--workers", "0"]


@pytest.fixture(scope="module")
def cifar(tmp_path_factory, colour_cifar10):
    return colour_cifar10(tmp_path_factory.mktemp("cifar"), 384, 128)


def test_cifarnet_reaches_its_target_and_the_mlperf_log_passes(cifar, tmp_path, run_cli):
    db, log = tmp_path / "t.db", tmp_path / "run.mllog"
    args = ["train", "cifarnet", "--data", f"cifar10:{cifar}", "--target", "top1=0.8"]
    code, out, err = run_cli(args + FAST + ["--mllog", log, "--db", db, "--json"])
    assert code == 0, err
    (run,) = json.loads(out)["runs"]
    assert run["status"] == "ok" and run["reached"]
    reached = [e for e in run["evaluations"] if e["top1"] >= 0.8]
    assert run["time_to_target_s"] == reached[0]["time_s"] > 0
    assert all(e["time_s"] > 0 for e in run["evaluations"])
    assert "epoch 1/6" in err  # progress while it runs
    ok, report = check_log(log)
    assert ok, report
    with sqlite3.connect(db) as connection:
        stored = connection.execute("SELECT status, reached FROM train_runs").fetchall()
    assert stored == [("ok", 1)]


def test_two_ranks_reach_the_target_with_weight_decay_and_split_the_wall_clock(
    cifar, tmp_path, run_cli
):
    """Issue 32's done-when: `train cifarnet --devices 2 --weight-decay 5e-4` on the sample
    data reaches its target and records where the wall-clock time to it went."""
    db = tmp_path / "t.db"
    args = ["train", "cifarnet", "--data", f"cifar10:{cifar}", "--target", "top1=0.8"]
    args += ["--devices", "2", "--weight-decay", "5e-4", "--max-epochs", "6", "-b", "16"]
    args += ["--lr-schedule", "piecewise:0.01@0", "--workers", "0", "--db", db]
    code, out, err = run_cli(args)
    assert code == 0, out + err
    assert "time to target:" in out and "+ data loading" in out and "+ evaluation" in out
    assert "wall clock to target (rank 0):" in out and "= start-up" in out
    with sqlite3.connect(db) as connection:
        row = connection.execute("SELECT config_json, metrics_json, reached FROM train_runs")
        config, metrics, reached = row.fetchone()
    config, metrics = json.loads(config), json.loads(metrics)
    assert reached == 1 and metrics["world_size"] == 2
    assert (config["weight_decay"], config["momentum"], config["nodes"]) == (5e-4, 0.9, 1)
    split = metrics["time_split"]
    parts = [split[k] for k in ("startup_s", "training_s", "data_loading_s", "evaluation_s")]
    assert split["until"] == "target" and min(parts) >= 0 and split["startup_s"] > 0
    assert sum(parts) == pytest.approx(split["total_s"], rel=1e-9)
    assert split["total_s"] == pytest.approx(split["startup_s"] + metrics["time_to_target_s"])


def test_two_ranks_follow_the_curve_of_one_process(cifar, tmp_path, run_cli):
    db = tmp_path / "t.db"
    base = ["train", "cifarnet", "--data", f"cifar10:{cifar}", "--target", "top1=0.99"]
    rest = ["--max-epochs", "2", "--lr-schedule", "piecewise:0.01@0", "--workers", "0"]
    code, out, err = run_cli(base + rest + ["-b", "32", "--db", db])
    assert code == 0, out + err
    code, out, err = run_cli(base + rest + ["-b", "16", "--devices", "2", "--db", db])
    assert code == 0, out + err
    code, out, err = run_cli(["isoaccuracy", "1", "2", "--db", db, "--json"])
    assert code == 0, err
    document = json.loads(out)
    assert document["verdict"] == "agree", document["reason"]


def test_a_run_across_two_nodes_is_stored_by_the_node_of_rank_0(cifar, tmp_path):
    args = ["train", "cifarnet", "--data", f"cifar10:{cifar}", "--target", "top1=0.99"]
    args += ["--max-epochs", "1", "-b", "16", "--workers", "0", "--nodes", "2"]
    args += ["--rdzv-endpoint", loopback_endpoint(), "--json"]
    outputs = run_on_nodes(args, tmp_path)
    documents = [json.loads(out) for out, _ in outputs]
    assert sorted(len(d["runs"]) for d in documents) == [0, 1]
    (leader,) = [d for d in documents if d["runs"]]
    (follower,) = [d for d in documents if not d["runs"]]
    (run,) = leader["runs"]
    assert run["status"] == "ok" and run["config"]["nodes"] == 2
    assert run["metrics"]["world_size"] == 2 and run["metrics"]["global_batch"] == 32
    assert run["metrics"]["time_split"]["until"] == "end"
    assert follower["followed"] == 1 and follower["config_runs"] == 0
    assert all("start this same command on each of the 2 nodes" in e for _, e in outputs)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--target", "top1"], "--target 'top1' is not valid"),
        (["--target", "acc=0.9"], "--target 'acc=0.9' is not valid"),
        (["--target", "top1=80"], "fractions in (0, 1]"),
        (["--data", "cifar10:/no/such/dir"], "/no/such/dir"),
        (["--data", "synthetic"], "nothing to learn"),
        (["--lr-schedule", "step:0.1"], "allowed"),
        (["--momentum", "1"], "'--momentum': must be a finite number >= 0 and < 1, got '1'"),
        (["--weight-decay", "-1"], "'--weight-decay': must be a finite number >= 0"),
        (["--weight-decay", "nan"], "'--weight-decay': must be a finite number >= 0"),
        (["--optimizer", "adam"], "'adam' is not one of 'sgd', 'adamw', 'lars'"),
        (["--optimizer", "adamw", "--momentum", "0.5"], "adamw, which takes no momentum"),
        (["--nodes", "0"], "'--nodes'"),
        (["--rdzv-endpoint", "nohost"], "must be HOST:PORT"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(cifar, tmp_path, run_cli, args, message):
    given = {"--target": "top1=0.8", "--data": f"cifar10:{cifar}"}
    given.update(dict(zip(args[::2], args[1::2], strict=True)))
    flat = [item for pair in given.items() for item in pair]
    rest = [a for a in args if a not in given and a not in given.values()]
    code, out, err = run_cli(["train", "cifarnet", *flat, *rest, "--db", tmp_path / "t.db"])
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "t.db").exists()


def test_ctrl_c_stores_what_was_reached(cifar, tmp_path):
    db = tmp_path / "t.db"
    args = ["train", "cifarnet", "--data", f"cifar10:{cifar}", "--target", "top1=0.999"]
    args += ["--max-epochs", "200", "-b", "32", "--lr-schedule", "piecewise:0.0005@0"]
    args += ["--workers", "0", "--db", str(db)]
    child = subprocess.Popen(
        [sys.executable, "-m", "trainperf", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=os.environ | {"COLUMNS": "200"},
    )
    deadline = time.monotonic() + 120
    evaluations = 0
    while evaluations < 2 and time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.5)
        if db.exists():
            try:
                with sqlite3.connect(db) as connection:
                    query = "SELECT evaluations_json FROM train_runs"
                    row = connection.execute(query).fetchone()
            except sqlite3.OperationalError:
                continue  # the file exists but its schema is still being created
            evaluations = len(json.loads(row[0])) if row else 0
    assert evaluations >= 2
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 130
    with sqlite3.connect(db) as connection:
        status, stored = connection.execute(
            "SELECT status, evaluations_json FROM train_runs"
        ).fetchone()
    assert status == "aborted" and len(json.loads(stored)) >= 2
    assert b"interrupted by SIGINT" in err


def test_a_users_network_runs_only_in_the_training_job(cifar, tmp_path, run_cli, monkeypatch):
    lib, mark = tmp_path / "lib", tmp_path / "built"
    lib.mkdir()
    (lib / "mynets.py").write_text(
        "import os, pathlib\n"
        f"pathlib.Path({str(mark)!r}).write_text(str(os.getpid()))\n"
        "def broken():\n"
        "    raise RuntimeError('the user network fails')\n"
    )
    monkeypatch.syspath_prepend(str(lib))
    monkeypatch.setenv("PYTHONPATH", str(lib))
    db = tmp_path / "t.db"
    args = ["train", "mynets:broken", "--data", f"cifar10:{cifar}", "--target", "top1=0.9"]
    code, out, err = run_cli(args + ["--max-epochs", "1", "--workers", "0", "--db", db])
    assert code == 1, out + err
    assert mark.exists() and int(mark.read_text()) != os.getpid()  # imported in the job only
    with sqlite3.connect(db) as connection:
        status, error = connection.execute("SELECT status, error_json FROM train_runs").fetchone()
    assert status == "error" and "the user network fails" in error


def test_a_run_that_ends_while_the_database_is_locked_is_saved_aside_and_imports(
    cifar, tmp_path, run_cli, monkeypatch
):
    """Another process takes the database's write lock once the first evaluation is stored
    and keeps it: the run trains on (its later evaluations kept), its end goes to a
    recovery file, and importing that file finishes the row the database holds as running
    (the same uid), not a second row."""
    from trainperf.cli import train as train_cli

    db = tmp_path / "t.db"
    monkeypatch.setenv("TRAINPERF_STORE_WAIT_S", "0.2")
    held = []
    store_progress = train_cli.Progress._store_progress

    def then_lock(progress):
        store_progress(progress)
        if progress.evaluations and not held:
            held.append(sqlite3.connect(db, isolation_level=None, check_same_thread=False))
            held[0].execute("BEGIN IMMEDIATE")

    monkeypatch.setattr(train_cli.Progress, "_store_progress", then_lock)
    args = ["train", "cifarnet", "--data", f"cifar10:{cifar}", "--target", "top1=0.999"]
    args += ["--max-epochs", "3", "-b", "32", "--lr-schedule", "piecewise:0.01@0"]
    code, out, err = run_cli(args + ["--workers", "0", "--runs", "2", "--db", db, "--json"])
    held[0].rollback()
    assert code == 1 and "Traceback" not in err
    assert "could not store the run's progress" in err and err.count("the run goes on") == 1
    (file,) = tmp_path.glob("t.db.recovered-train-*.json")
    assert f"could not store 1 training run in {db} (" in err and str(file) in err
    assert "1 run(s) not started" in err
    (run,) = json.loads(out)["runs"]
    assert run["id"] is None and run["not_stored"]["file"] == str(file)
    assert run["status"] == "ok" and len(run["evaluations"]) == 3
    with sqlite3.connect(db) as connection:
        ((uid, status, stored),) = connection.execute(
            "SELECT uid, status, evaluations_json FROM train_runs"
        ).fetchall()
    assert status == "running" and len(json.loads(stored)) == 1 and run["uid"] == uid

    code, out, err = run_cli(["import", file, "--db", db, "--json"])
    assert code == 0, err
    summary = json.loads(out)
    assert summary["updated"]["train_runs"] == 1 and summary["added"]["train_runs"] == 0
    with sqlite3.connect(db) as connection:
        rows = connection.execute("SELECT uid, status, evaluations_json FROM train_runs")
        ((again, status, stored),) = rows.fetchall()
    assert (again, status, len(json.loads(stored))) == (uid, "ok", 3)
    code, out, _ = run_cli(["import", file, "--db", db])  # a second import changes nothing
    assert code == 0 and "(1 training run, 1 system already present)" in out


def test_progress_that_cannot_be_stored_is_kept_and_stored_with_the_next_evaluation(
    tmp_path, capsys
):
    """Without a child: the progress file is written by hand. The database is locked when
    the first evaluation arrives (on several nodes that is also when the row is made), free
    at the second, locked again at the end: the end is saved aside under the row's uid."""
    from trainperf.case.training import TrainConfig
    from trainperf.cli.train import Progress, store_final
    from trainperf.store.database import Store

    db, path = tmp_path / "t.db", tmp_path / "progress.jsonl"
    config = TrainConfig("cifarnet", "cifar10:/d", "top1", 0.8, 3, 64).to_dict()
    record = {"fingerprint": "f" * 16, "hostname": "box"}

    def evaluation(epoch):
        with path.open("a") as f:
            f.write(json.dumps({"event": "eval", "epoch": epoch, "time_s": 1.0, "top1": 0.1}))
            f.write("\n")

    def lock():
        other = sqlite3.connect(db, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        return other

    with Store(db, wait_s=0.1) as store:
        progress = Progress(store, record, config, path)
        held = lock()
        evaluation(1)
        progress.poll()
        assert progress.run_id is None and len(progress.evaluations) == 1
        held.rollback()
        evaluation(2)
        progress.poll()
        (row,) = store.train_runs()
        assert len(row["evaluations"]) == 2 and row["status"] == "running"
        held = lock()
        run = store_final(db, progress, evaluations=progress.evaluations, status="ok")
        held.rollback()
    err = capsys.readouterr().err
    assert err.count("could not store the run's progress") == 1
    assert run["id"] is None and run["uid"] == row["uid"] and run["status"] == "ok"
    saved = json.loads(Path(run["not_stored"]["file"]).read_text())
    assert [r["uid"] for r in saved["train_runs"]] == [row["uid"]]
