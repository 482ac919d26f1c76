"""`trainperf micro` end to end: runs in a child, stored, JSON out; bad input refused."""

import json

import pytest

from trainperf.case.spec import DeviceKind
from trainperf.cli import micro as micro_cli
from trainperf.launch import runner
from trainperf.store.database import Store


def test_gemm_is_stored_and_feeds_utilization_of_benchmark_cases(tmp_path, run_cli):
    db = tmp_path / "r.db"
    gemm = ["micro", "gemm", "--shapes", "square", "--iters", 2, "--device", "cpu", "--db", db]
    # A partial sweep (the 2 smallest squares) is not the machine's max achievable.
    code, out, err = run_cli([*gemm, "--limit", 2])
    caption = " ".join(out.split())  # the table's caption, wrapped to its width
    assert code == 0 and "best of this partial run fp32" in caption
    assert "not the machine's max achievable: a partial sweep: --limit 2 measured 2 of 4" in caption
    with Store(db) as store:
        (partial,) = store.micro("gemm")
        assert partial["metrics"]["max_achievable"] is None
        assert partial["metrics"]["best_of_run"]["fp32"]["shape"] == "M256 N256 K256 NN"
        assert store.achievable_tflops(partial["system"], "cpu", "fp32") is None

    code, out, _ = run_cli([*gemm, "--json"])
    result = json.loads(out)
    assert code == 0 and result["status"] == "ok"
    best = result["metrics"]["max_achievable"]["fp32"]["tflops"]
    with Store(db) as store:
        _, run = store.micro("gemm")
        assert run["params"]["shapes"] == "square" and len(run["metrics"]["rows"]) == 4
        assert store.achievable_tflops(run["system"], "cpu", "fp32") == best

    code, out, _ = run_cli(
        ["run", "-m", "cifarnet", "-b", 4, "--image-size", 16, "--steps", "fixed:1:3"]
        + ["--runs", "1", "--device", "cpu", "--db", db, "--json"]
    )
    (case,) = json.loads(out)["results"]
    m = case["metrics"]
    assert m["achievable_tflops"] == best
    assert m["utilization_of_achievable"] == m["achieved_tflops"] / best


def test_conv_of_a_model_and_memory(tmp_path, run_cli):
    db = tmp_path / "r.db"
    code, out, _ = run_cli(
        ["micro", "conv", "--model", "resnet18", "--batch-size", 1, "--limit", 1, "--iters", 1]
        + ["--device", "cpu", "--db", db, "--json"]
    )
    (row,) = json.loads(out)["metrics"]["rows"]
    assert code == 0 and row["C"] == 3 and row["fwd_tflops_median"] > 0
    code, out, _ = run_cli(["micro", "memory", "--bytes", "1M", "--device", "cpu", "--db", db])
    assert code == 0 and "read+write" in out


def test_bad_micro_input_is_refused_with_nothing_written(tmp_path, run_cli):
    db = tmp_path / "r.db"
    for args, message in (
        (["gemm", "--dtype", "fp64"], "--dtype 'fp64' is not valid"),
        (["conv", "--model", "resnet5"], "unknown model 'resnet5'"),
        (["conv", "--dtype", "tf32", "--device", "cpu"], "tf32 is a CUDA tensor-core mode"),
        (["memory", "--bytes", "8X"], "size '8X' is not valid"),
        (["memory", "--bytes", "0"], "--bytes 0: a buffer needs at least 1 byte"),
        (["p2p", "--bytes", "0K"], "--bytes 0K: a buffer needs at least 1 byte"),
        (["collective", "--min-bytes", "0"], "--min-bytes 0: a buffer needs at least 1 byte"),
        (["collective", "--max-bytes", "8E"], "--max-bytes: size '8E' is not valid"),
        (["collective", "--factor", "1"], "--factor 1: each size is the last times at least 2"),
        (
            ["collective", "--min-bytes", "4M", "--max-bytes", "1M"],
            "--max-bytes 1M is smaller than --min-bytes 4M",
        ),
        (["collective", "--rdzv-endpoint", "node1"], "must be HOST:PORT"),
        (["collective", "--rdzv-endpoint", "node1:99999"], "must be HOST:PORT"),
        (["gemm", "--device", "cuda"], "device 'cuda' is not available"),
        (["gemv"], "unknown micro-benchmark 'gemv': allowed gemm, conv, memory, p2p, collective"),
    ):
        code, out, err = run_cli(["micro", *args, "--db", db])
        assert code == 2 and message in err and err.count("\n") == 1, (args, err)
    assert not db.exists()


def test_collectives_through_the_cli_are_checked_and_stored(tmp_path, run_cli):
    db = tmp_path / "r.db"
    code, out, _ = run_cli(
        ["micro", "collective", "--ops", "all_reduce,all_gather", "--devices", 2]
        + ["--min-bytes", "1K", "--max-bytes", "4K", "--factor", 4, "--iters", 2, "--warmup", 1]
        + ["--device", "cpu", "--db", db, "--json"]
    )
    result = json.loads(out)
    assert code == 0 and result["device"]["backend"] == "gloo"
    rows = result["metrics"]["rows"]
    assert {r["op"] for r in rows} == {"all_reduce", "all_gather"}
    assert {r["size_bytes"] for r in rows} == {1024, 4096}
    assert all(r["wrong"] == 0 and r["busbw_gbps"] > 0 for r in rows)
    with Store(db) as store:
        (run,) = store.micro("collective")
        assert run["metrics"]["rows"] == rows
    code, _, err = run_cli(["micro", "collective", "--ops", "all_reduse", "--db", db])
    assert code == 2 and "--ops 'all_reduse' is not valid" in err


@pytest.mark.parametrize(
    "gpus,said",
    [
        ({}, "running micro p2p (this machine has 0 CUDA GPUs: no pair)"),
        (
            {"cuda": DeviceKind(1, (9, 0))},
            "running micro p2p (this machine has 1 CUDA GPU: no pair)",
        ),
        ({"cuda": DeviceKind(4, (9, 0))}, "running micro p2p on 4 CUDA GPUs"),
    ],
)
def test_p2p_says_which_gpus_it_runs_on_and_never_cuda_without_them(
    tmp_path, run_cli, monkeypatch, gpus, said
):
    real = micro_cli.open_machine
    monkeypatch.setattr(
        micro_cli, "open_machine", lambda db: (real(db)[0], {"cpu": DeviceKind(2)} | gpus)
    )
    skipped = {"status": "ok", "device": None, "error": None}
    skipped["metrics"] = {"status": "skipped", "reason": "p2p needs two or more CUDA GPUs"}
    monkeypatch.setattr(runner, "run_job", lambda *args, **kwargs: dict(skipped))
    code, out, err = run_cli(["micro", "p2p", "--db", tmp_path / "r.db"])
    assert code == 0 and "skipped: p2p needs two or more CUDA GPUs" in out
    assert err.splitlines()[0] == said and "on cuda" not in err
