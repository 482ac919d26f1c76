"""``micro collective --under-load``: all_reduce beside a GEMM on two gloo ranks, both
slowdowns in the stored document, strict JSON, and the flag refused where it cannot apply."""

import json
import math
import time

import pytest
import torch

from trainperf.micro import contention
from trainperf.micro.collective import Sweep
from trainperf.store.database import Store

UNDER_LOAD = {"gemm_n": 64, "repeats": 2}


def document(**fields):
    doc = {
        "kind": "collective",
        "ops": ["all_reduce"],
        "min_bytes": 1024,
        "max_bytes": 16384,
        "factor": 16,
        "dtype": "fp32",
        "warmup": 1,
        "iters": 2,
        "device": "cpu",
        "timeout_s": 60,
        "under_load": UNDER_LOAD,
    }
    return doc | fields


def test_document_round_trip_and_plain_sweep_unchanged():
    assert Sweep.from_document(document()).to_dict() == document()
    plain = document()
    del plain["under_load"]
    assert "under_load" not in Sweep.from_document(plain).to_dict()


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"ops": ["all_gather"]}, "under load measures all_reduce only"),
        ({"ops": ["all_reduce", "broadcast"]}, "under load measures all_reduce only"),
        ({"under_load": {"gemm_n": 0, "repeats": 2}}, "'under_load.gemm_n' is 0"),
        ({"under_load": {"gemm_n": 64}}, "field 'under_load'"),
        ({"under_load": {"gemm_n": 64, "repeats": True}}, "'under_load.repeats' is True"),
    ],
)
def test_under_load_document_is_checked(fields, message):
    with pytest.raises(ValueError, match=message):
        Sweep.from_document(document(**fields))


def rows_of(samples, gemm_n=64):
    """Two ranks' rows of one size with the given per-repetition seconds."""
    row = {"op": "all_reduce", "size_bytes": 4096, "count": 1024, "dtype": "fp32"}
    row |= {"in_place": True, "redop": "sum", "iters": 2, "gemm_n": gemm_n, "wrong": 0}
    row["stream_elements"] = 2**20
    repeats = len(samples["comm_alone_s"])
    stream = {"stream_alone_s": [2e-3], "stream_solo_s": [1e-3], "stream_loaded_s": [4e-3]}
    samples = {k: v * repeats for k, v in stream.items()} | samples
    return [[row | samples], [row | samples]]


def test_slowdowns_are_alone_over_under_load_medians():
    samples = {
        "comm_alone_s": [1e-3, 1e-3, 5e-3],
        "comm_loaded_s": [2e-3, 3e-3, 2e-3],
        "gemm_alone_s": [1e-4, 1e-4, 1e-4],
        "gemm_solo_s": [8e-5, 5e-5, 1e-4],
        "gemm_loaded_s": [4e-4, 4e-4, 1e-4],
    }
    (row,) = contention.combine(rows_of(samples))
    assert row["busbw_slowdown"] == pytest.approx(2.0)
    assert row["gemm_slowdown"] == pytest.approx(4.0)
    # solo 1.25x as fast as with every rank computing (median of 1.25, 2, 1)
    assert row["neighbour_slowdown"] == pytest.approx(1.25)
    assert row["busbw_gbps"] == pytest.approx(row["busbw_gbps_loaded"] * 2)
    assert row["gemm_tflops"] == pytest.approx(2 * 64**3 / 1e-4 / 1e12)


def test_a_gemm_rate_that_could_not_be_measured_is_null_with_its_reason():
    samples = {
        "comm_alone_s": [1e-3],
        "comm_loaded_s": [2e-3],
        "gemm_alone_s": [1e-4],
        "gemm_solo_s": [1e-4],
        "gemm_loaded_s": [None],
    }
    rows = contention.combine(rows_of(samples))
    assert rows[0]["gemm_slowdown"] is None and rows[0]["gemm_tflops_loaded"] is None
    assert rows[0]["gemm_slowdown_absent_reason"] == contention.NO_GEMM_INSIDE
    load = contention.UnderLoad(**UNDER_LOAD)
    metrics = {"rows": rows, "under_load": contention.summary(rows, load, "fp32")}
    assert metrics["under_load"]["gemm_slowdown"] is None
    assert "no size of the sweep" in metrics["under_load"]["gemm_slowdown_absent_reason"]
    table = contention.format_table(metrics, 2, "gloo")
    assert "--" in table and "GEMM under load absent" in table


def test_under_load_through_the_cli_is_stored_with_both_slowdowns(tmp_path, run_cli):
    db = tmp_path / "r.db"
    code, out, err = run_cli(
        ["micro", "collective", "--under-load", "--gemm-size", 64, "--repeats", 2]
        + ["--min-bytes", "1K", "--max-bytes", "16K", "--factor", 16, "--iters", 2]
        + ["--warmup", 1, "--device", "cpu", "--db", db, "--json"]
    )
    assert code == 0, err
    result = json.loads(out, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    metrics = result["metrics"]
    assert result["device"]["backend"] == "gloo" and result["device"]["world_size"] == 2
    rows = metrics["rows"]
    assert [r["size_bytes"] for r in rows] == [1024, 16384]
    assert {r["op"] for r in rows} == {"all_reduce"} and metrics["wrong_total"] == 0
    for row in rows:
        assert row["gemm_n"] == 64 and row["repeats"] == 2 and row["iters"] >= 2
        assert len(row["samples"]["comm_loaded_s"]) == 2
        keys = ("busbw_slowdown", "gemm_slowdown", "neighbour_slowdown", "busbw_gbps")
        keys += ("memory_slowdown", "memory_neighbour_slowdown", "stream_gbps_solo")
        for key in (*keys, "busbw_gbps_loaded"):
            assert math.isfinite(row[key]) and row[key] > 0, (key, row)
        assert row["busbw_slowdown"] == pytest.approx(row["busbw_gbps"] / row["busbw_gbps_loaded"])
        assert row["gemm_slowdown"] == pytest.approx(row["gemm_tflops"] / row["gemm_tflops_loaded"])
    load = metrics["under_load"]
    assert load["gemm_n"] == 64 and load["gemm_dtype"] == "fp32" and load["repeats"] == 2
    assert load["busbw_slowdown"] > 0 and load["gemm_slowdown"] > 0
    assert load["neighbour_slowdown"] > 0
    with Store(db) as store:
        (stored,) = store.micro("collective")
        assert stored["metrics"] == metrics
        assert stored["params"]["under_load"] == {"gemm_n": 64, "repeats": 2}


def test_under_load_table_fits_100_columns():
    rows = contention.combine(
        rows_of(
            {
                "comm_alone_s": [1e-3],
                "comm_loaded_s": [2e-3],
                "gemm_alone_s": [1e-4],
                "gemm_solo_s": [5e-5],
                "gemm_loaded_s": [3e-4],
            },
            gemm_n=16384,
        )
    )
    load = contention.UnderLoad(gemm_n=16384, repeats=9)
    table = contention.format_table(
        {"rows": rows, "under_load": contention.summary(rows, load, "bf16")}, 1024, "nccl"
    )
    assert all(len(line) <= 100 for line in table.splitlines())
    assert "busbw 2.00  GEMM 3.00  GEMM beside the other ranks' GEMMs 2.00" in table


def test_under_load_is_refused_where_it_cannot_apply(tmp_path, run_cli):
    db = tmp_path / "r.db"
    for args, message in (
        (["--under-load", "--ops", "all_gather"], "--under-load measures all_reduce only"),
        (["--under-load", "--ops", "all_reduce,sendrecv"], "measures all_reduce only"),
        (["--under-load", "--devices", 1], "--under-load needs at least 2 ranks"),
        (["--gemm-size", 128], "--gemm-size applies with --under-load only"),
        (["--repeats", 2], "--repeats applies with --under-load only"),
        (["--under-load", "--gemm-size", 0], "--gemm-size"),
    ):
        code, out, err = run_cli(["micro", "collective", *args, "--db", db])
        assert code == 2 and message in err and err.count("\n") == 1, (args, err)
        assert out == ""
    assert not db.exists()


def test_only_gemms_wholly_inside_the_window_count():
    """Stand-ins that sleep: a 30 ms all_reduce window holds 1 ms GEMMs; a 200 ms GEMM
    never fits inside a 3 ms window, and its rate is absent rather than guessed."""
    peers = contention.Participant(0, 1, torch.device("cpu"), torch.float32)
    clock = contention._Clock(peers.device)
    comm_s, gemm_s = contention._together(
        clock, lambda: time.sleep(0.01), lambda: time.sleep(0.001), 3, peers
    )
    assert comm_s >= 0.01 and gemm_s is not None and 0.001 <= gemm_s < comm_s * 3
    comm_s, gemm_s = contention._together(
        clock, lambda: time.sleep(0.001), lambda: time.sleep(0.2), 3, peers
    )
    assert comm_s >= 0.001 and gemm_s is None


def test_the_solo_gemm_runs_on_one_rank_at_a_time(monkeypatch):
    """Rank 1 of 3 computes on its own turn only, between barriers that every rank passes
    once per turn and once at the end."""
    barriers, calls = [], []
    monkeypatch.setattr(contention, "barrier", lambda peers: barriers.append(len(calls)))
    peers = contention.Participant(1, 3, torch.device("cpu"), torch.float32)
    seconds = contention._solo_s(contention._Clock(peers.device), lambda: calls.append(1), 4, peers)
    assert barriers == [0, 0, 4, 4] and len(calls) == 4 and seconds > 0


def test_the_memory_bound_kernel_gives_its_rates_and_slowdowns():
    """STREAM add moves 3 arrays of 2^20 fp32 (12 MiB) a call: 2 ms alone is 6.29 GB/s;
    solo 1 ms (2x faster without the neighbour), 4 ms beside the all_reduce (2x slower)."""
    samples = {
        "comm_alone_s": [1e-3],
        "comm_loaded_s": [2e-3],
        "gemm_alone_s": [1e-4],
        "gemm_solo_s": [1e-4],
        "gemm_loaded_s": [2e-4],
    }
    (row,) = contention.combine(rows_of(samples))
    assert row["stream_gbps"] == pytest.approx(3 * 4 * 2**20 / 2e-3 / 1e9)
    assert row["memory_neighbour_slowdown"] == pytest.approx(2.0)
    assert row["memory_slowdown"] == pytest.approx(2.0)
    none_inside = rows_of(samples)
    for rank in none_inside:
        rank[0]["stream_loaded_s"] = [None]
    (row,) = contention.combine(none_inside)
    assert row["memory_slowdown"] is None
    assert row["memory_slowdown_absent_reason"] == contention.NO_STREAM_INSIDE
    load = contention.summary([row], contention.UnderLoad(**UNDER_LOAD), "fp32")
    assert load["memory_slowdown"] is None and load["memory_neighbour_slowdown"] == 2.0
    assert load["stream_gbps_solo"] == pytest.approx(2 * row["stream_gbps"])
