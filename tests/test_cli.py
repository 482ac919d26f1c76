"""The command line end to end: one real tiny case, and every bad-input path."""

import json
import os
import sqlite3
import subprocess
import sys

import pytest


def test_one_tiny_case_end_to_end_json(tmp_path, run_cli):
    db = tmp_path / "r.db"
    code, out, err = run_cli(
        "run --model cifarnet --batch-size 4 --image-size 16 --steps fixed:2:6 --runs 3"
        f" --device cpu --db {db} --json"
    )
    assert code == 0, err
    doc = json.loads(out)
    (result,) = doc["results"]
    assert result["status"] == "ok"
    assert result["case"]["model"] == "cifarnet" and result["case"]["image_size"] == 16
    assert result["system"]["fingerprint"] and doc["sweep_id"] and doc["order_seed"] >= 0
    m = result["metrics"]
    for key in (
        "samples_per_s_median",
        "samples_per_s_mean",
        "samples_per_s_ci95",
        "run_samples_per_s",
        "within_run_cv",
        "between_run_cv",
        "runs_needed",
        "cv",
        "jitter",
        "steps_warmup",
        "steps_measured",
        "runs_stop_reason",
        "mem_peak_bytes",
    ):
        assert key in m, key
    # Three fresh processes, each with 2 warm-up steps and its share (2) of the 6 measured.
    runs = result["runs"]
    assert [r["run_number"] for r in runs] == [1, 2, 3]
    assert all(r["case"]["steps"] == "fixed:2:2" and len(r["metrics"]["step_s"]) == 2 for r in runs)
    assert m["steps_warmup"] == 6 and m["steps_measured"] == 6 and m["runs"] == 3
    assert m["runs_stop_reason"] == "fixed_runs" and m["image_size"] == 16
    estimates = [r["metrics"]["samples_per_s_median"] for r in runs]
    assert m["run_samples_per_s"] == estimates
    assert m["samples_per_s_median"] == pytest.approx(sum(estimates) / 3)
    low, high = m["samples_per_s_ci95"]
    assert low <= m["samples_per_s_median"] <= high
    assert m["mem_peak_bytes"] > 0
    assert m["mfu"] is None and m["mfu_absent_reason"]

    # stored, and readable back in each format
    code, out, _ = run_cli(f"results --db {db} --json --per-step")
    assert code == 0
    stored = json.loads(out)["results"]
    assert [r["metrics"]["step_s"] for r in stored[0]["runs"]] == [
        r["metrics"]["step_s"] for r in runs
    ]
    code, out, _ = run_cli(f"results --db {db} --csv")
    header, row = out.strip().splitlines()
    assert header.startswith("id,created_at") and ",cifarnet,4,16," in row


def test_language_model_reports_tokens(tmp_path, run_cli):
    code, out, err = run_cli(
        "run --model gpt2-small --batch-size 1 --seq-len 8 --steps fixed:1:3 --runs 1 --device cpu"
        f" --db {tmp_path / 'r.db'} --json"
    )
    assert code == 0, err
    m = json.loads(out)["results"][0]["metrics"]
    assert m["tokens_per_s_median"] == pytest.approx(m["samples_per_s_median"] * 8)


def test_failed_case_is_stored_and_exit_code_is_1(tmp_path, run_cli, monkeypatch):
    # bf16 on this CPU works, so force a failure: a custom net that raises in forward.
    (tmp_path / "badnet.py").write_text(
        "import torch\n"
        "class Bad(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__(); self.l = torch.nn.Linear(2, 2)\n"
        "    def forward(self, x):\n"
        "        if x.device.type != 'meta': raise RuntimeError('kaboom')\n"
        "        return torch.zeros(x.shape[0], 3, device=x.device)\n"
        "def build():\n"
        "    return Bad()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    db = tmp_path / "r.db"
    code, out, _ = run_cli(
        f"run --model badnet:build --batch-size 2 --steps fixed:0:1 --device cpu --db {db} --json"
    )
    assert code == 1
    (result,) = json.loads(out)["results"]
    assert result["status"] == "error"
    assert result["error"]["type"] == "RuntimeError" and result["error"]["message"] == "kaboom"
    rows = sqlite3.connect(db).execute("SELECT status FROM results").fetchall()
    assert rows == [("error",)]


@pytest.mark.parametrize(
    "args,message",
    [
        (["--model", "resnet5", "--batch-size", "8"], "unknown model 'resnet5'"),
        (["--model", "resnet18", "--batch-size", "0"], "positive integer, got '0'"),
        (["--model", "resnet18", "--batch-size", "-3"], "positive integer, got '-3'"),
        (["--model", "resnet18", "--batch-size", "abc"], "positive integer, got 'abc'"),
        (["--model", "resnet18", "--batch-size", "2.5"], "positive integer, got '2.5'"),
        (
            ["--model", "resnet18", "--batch-size", "8", "--precision", "fp8"],
            "precision 'fp8' is not valid: allowed 'fp32', 'tf32', 'fp16' or 'bf16'",
        ),
        (
            ["--model", "resnet18", "--batch-size", "8", "--precision", "tf32", "--device", "cpu"],
            "tf32 needs a CUDA GPU",
        ),
        (
            ["--model", "resnet18", "--batch-size", "8", "--device", "cuda"],
            "device 'cuda' is not available",
        ),
        (
            ["--model", "resnet18", "--batch-size", "8", "--steps", "fixed:10"],
            "steps 'fixed:10' is not valid",
        ),
        (["--model", "not a module:f", "--batch-size", "8"], "malformed model reference"),
        (["--model", "nosuch_pkg_xyz.mod:build", "--batch-size", "8"], "cannot import module"),
        (
            ["--model", "inception_v3", "--batch-size", "8", "--image-size", "16"],
            "image_size 16 is not accepted by inception_v3",
        ),
        (["--model", "resnet18", "--batch-size", "8", "--bogus"], "No such option"),
        (["--model", "resnet18", "--batch-size", "8", "--runs", "0"], "--runs 0: must be at"),
        (["--runs", "abc"], "--runs abc: not valid: allowed N (a positive integer) or adaptive"),
        (["--runs", "adaptive:0.02:2"], "MAX_RUNS must be at least 3"),
        (["--runs", "2", "--order-seed", "-1"], "--order-seed"),
        ([""], "the suite name is empty: give a YAML file or one of quick"),
        ([" "], "the suite name is empty"),
        (["--rdzv-endpoint", "node1"], "must be HOST:PORT"),
        (["--rdzv-endpoint", "node1:0"], "must be HOST:PORT"),
        (["--rdzv-endpoint", "node1:29400\n--x"], "must be HOST:PORT"),
        (["--rdzv-endpoint", ":29400"], "must be HOST:PORT"),
    ],
)
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, run_cli, args, message):
    db = tmp_path / "r.db"
    code, out, err = run_cli(["run", *args, "--db", str(db)])
    assert code == 2
    assert message in err
    assert err.startswith("trainperf: error: ") and err.count("\n") == 1
    assert out == ""
    assert not db.exists()


@pytest.mark.parametrize("make_db", ["missing_dir", "is_dir", "under_file", "not_sqlite"])
def test_unwritable_db(tmp_path, run_cli, make_db):
    target = {
        "missing_dir": tmp_path / "nope" / "r.db",
        "is_dir": tmp_path,
        "under_file": tmp_path / "f.txt" / "r.db",
        "not_sqlite": tmp_path / "f.txt",
    }[make_db]
    (tmp_path / "f.txt").write_text("plain text")
    code, out, err = run_cli(f"run --model cifarnet --batch-size 2 --db {str(target)}".split())
    assert code == 2 and err.startswith("trainperf: error: --db") and err.count("\n") == 1
    assert (tmp_path / "f.txt").read_text() == "plain text"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]


def test_results_without_database_is_bad_input(tmp_path, run_cli):
    code, _, err = run_cli(f"results --db {tmp_path / 'none.db'}")
    assert code == 2 and "no results database" in err
    assert not (tmp_path / "none.db").exists()


@pytest.mark.parametrize(
    "verb,what", [("results", "results"), ("scaling", "ok results"), ("pareto", "ok results")]
)
def test_a_listing_that_selects_nothing_says_so_on_stderr(report_db, run_cli, verb, what):
    """An empty table alone does not say whether the database is empty or the filters
    match nothing; one line does, and the exit code stays 0 (nothing is wrong)."""
    code, out, err = run_cli([verb, "--db", report_db, "-m", "no-such-model"])
    assert code == 0 and out
    assert err == f"no {what} in {report_db} matching --model no-such-model\n"
    code, _, err = run_cli([verb, "--db", report_db, "-m", "cifarnet"])
    assert code == 0 and f"no {what} in" not in err
    code, out, err = run_cli([verb, "--db", report_db, "-m", "no-such-model", "--json"])
    assert code == 0 and err == "" and json.loads(out) is not None  # JSON stays data


def test_models_json_lists_the_zoo_quickly(tmp_path):
    # A real subprocess: the console script as a user runs it; counted, then from the cache.
    def models_json():
        return subprocess.run(
            [sys.executable, "-m", "trainperf", "models", "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            env=os.environ | {"TRAINPERF_CACHE": str(tmp_path)},
        )

    proc = models_json()
    assert proc.returncode == 0, proc.stderr
    assert models_json().stdout == proc.stdout
    rows = {row["name"]: row for row in json.loads(proc.stdout)}
    assert rows["resnet50"]["params"] == 25_557_032
    assert rows["bert-squad"]["family"] == "bert"
    for row in rows.values():
        for key in (
            "name",
            "family",
            "params",
            "fwd_flops_per_sample",
            "train_flops_per_sample",
            "grad_bytes_fp32",
        ):
            assert key in row
        assert row["train_flops_per_sample"] > row["fwd_flops_per_sample"] > 0


def test_results_of_a_file_that_is_not_a_database(tmp_path, run_cli):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"definitely not sqlite" * 100)
    code, _, err = run_cli(f"results --db {junk}")
    assert code == 2 and "cannot read" in err and err.count("\n") == 1


@pytest.mark.parametrize("endpoint", ["node-1.cluster:29400", "10.0.0.1:1", "[fe80::1]:65535"])
def test_rendezvous_endpoints_that_are_host_and_port_pass(endpoint):
    from trainperf.cli.flag_types import Endpoint

    assert Endpoint().convert(endpoint, None, None) == endpoint
