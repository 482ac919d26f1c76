"""Real torchrun jobs on the CPU (gloo): scaling, equivalence, failing ranks, two 'nodes'."""

import json

import psutil
import pytest

from nodes import loopback_endpoint, run_on_nodes

SMALL = ["--image-size", "16", "--steps", "fixed:1:5", "--device", "cpu", "--runs", "1"]


def test_weak_and_strong_scaling_on_two_ranks(tmp_path, run_cli):
    db = tmp_path / "r.db"
    code, out, _ = run_cli(
        ["run", "-m", "cifarnet", "-b", 8, "--devices", "1,2", *SMALL, "--db", db, "--json"]
    )
    assert code == 0
    one, two = json.loads(out)["results"]
    assert one["metrics"]["global_batch"] == 8 and two["metrics"]["global_batch"] == 16
    m, (run,) = two["metrics"], two["runs"]
    assert m["world_size"] == 2 and two["device"]["backend"] == "gloo"
    rank_steps = run["metrics"]["rank_step_s"]
    assert len(rank_steps) == 2 and all(len(s) == 5 for s in rank_steps)
    assert m["samples_per_s_median"] > 0 and m["rank_spread"] >= 0
    assert "comm_exposed_share" in m and m["compute_step_s_median"] > 0
    assert two["device"]["threads"] == max(1, psutil.cpu_count() // 2)  # cores shared

    code, out, _ = run_cli(
        ["run", "-m", "cifarnet", "-b", 8, "--devices", 2, "--scaling", "strong", *SMALL]
        + ["--static-graph", "--db", db, "--json"]
    )
    (strong,) = json.loads(out)["results"]
    assert code == 0 and strong["metrics"]["global_batch"] == 8
    assert strong["metrics"]["device_batch"] == 4

    code, out, _ = run_cli(["scaling", "--db", db, "--json"])
    rows = json.loads(out)["rows"]
    assert {(r["scaling"], r["devices"]) for r in rows} == {
        ("weak", 1),
        ("weak", 2),
        ("strong", 1),
        ("strong", 2),
    }
    for row in rows:
        assert row["model"] == "cifarnet" and row["samples_per_s"] > 0
        expected = row["samples_per_s"] / (row["devices"] * one["metrics"]["samples_per_s_median"])
        assert row["efficiency"] == pytest.approx(expected)
        assert row["speedup"] == pytest.approx(row["efficiency"] * row["devices"])
        assert row["speedup_ci95"] is None  # one run a side: no interval, and it says so
        assert "an interval needs 2 on each" in row["interval_absent_reason"]


def test_ddp_options_run(tmp_path, run_cli):
    code, out, _ = run_cli(
        ["run", "-m", "cifarnet", "-b", 8, "--devices", 2, *SMALL, "--db", tmp_path / "r.db"]
        + ["--grad-compression", "fp16", "--bucket-mb", 1, "--grad-accum", 2]
        + ["--json"]
    )
    (result,) = json.loads(out)["results"]
    assert code == 0, result["error"]
    assert result["case"]["grad_compression"] == "fp16" and result["case"]["bucket_mb"] == 1
    assert result["metrics"]["global_batch"] == 2 * 8 * 2  # ranks x batch x micro-batches


def test_cifarnet_is_sequentially_equivalent_on_two_ranks(run_cli):
    code, out, _ = run_cli(
        ["equivalence", "cifarnet", "--devices", 2, "--steps", "fixed:0:5", "--image-size", 16]
        + ["--device", "cpu", "--json"]
    )
    m = json.loads(out)["metrics"]
    assert code == 0 and m["equivalent"] is True
    assert m["steps"] == 5 and m["devices"] == 2 and m["tolerance"] == 1e-5
    assert m["max_param_diff"] <= 1e-5 and m["max_loss_diff"] <= 1e-5
    assert len(m["parallel_losses"]) == 5


def children_now():
    return {p.pid for p in psutil.Process().children(recursive=True)}


def test_a_rank_that_dies_or_hangs_is_named_and_nothing_is_left(tmp_path, run_cli, user_nets):
    suite = tmp_path / "ranks.yaml"
    suite.write_text(
        "name: ranks\ndefaults: {image_size: 8, steps: 'fixed:1:3', timeout_s: 15, devices: 2}\n"
        "cases:\n"
        "  - {model: 'flakynets:abort_rank1', batch_size: 2}\n"
        "  - {model: 'flakynets:hang_rank1', batch_size: 2}\n"
    )
    before = children_now()
    code, out, _ = run_cli(["run", suite, "--db", tmp_path / "r.db", "--json"])
    crashed, hung = json.loads(out)["results"]
    assert code == 1
    assert crashed["status"] == "crashed"
    assert crashed["error"]["message"] == "rank 1 killed by signal SIGABRT"
    assert hung["status"] == "timeout"
    assert (
        "rank 1 stuck at" in hung["error"]["message"] and "in forward" in hung["error"]["message"]
    )
    assert "rank 0 waiting inside torch" in hung["error"]["message"]
    leftovers = [
        p
        for p in psutil.process_iter(["cmdline"])
        if "trainperf.launch.worker" in (p.info["cmdline"] or [])
    ]
    assert children_now() <= before and leftovers == []


def test_a_case_across_two_nodes_meets_at_a_loopback_rendezvous(tmp_path):
    suite = tmp_path / "nodes.yaml"
    suite.write_text(
        "name: nodes\ndefaults: {image_size: 16, steps: 'fixed:1:4', timeout_s: 120, runs: 2}\n"
        "cases:\n  - {model: cifarnet, batch_size: 4, nodes: 2}\n"
    )
    outputs = run_on_nodes(
        ["run", str(suite), "--json", "--rdzv-endpoint", loopback_endpoint()], tmp_path
    )
    results = [json.loads(out)["results"][0] for out, _ in outputs]
    assert sorted(r["status"] for r in results) == ["ok", "skipped"]
    (leader,) = [r for r in results if r["status"] == "ok"]
    assert leader["metrics"]["world_size"] == 2 and leader["metrics"]["global_batch"] == 8
    assert leader["metrics"]["runs"] == 2  # both nodes ran the same two runs
    assert "start this same command on each of the 2 nodes" in outputs[0][1]
