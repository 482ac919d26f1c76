"""GEMM and memory micro-benchmarks: shapes, FLOP and bandwidth arithmetic, tiny real runs."""

import pytest
import torch

from trainperf.micro import gemm, memory, p2p
from trainperf.micro.harness import Timing, time_op
from trainperf.report.micro import gemm_table

CPU = torch.device("cpu")


def test_deepbench_gemm_file_has_its_160_shapes():
    shapes = gemm.deepbench_shapes()
    assert len(shapes) == 160
    assert shapes[0] == gemm.GemmShape(1760, 16, 1760, False, False)
    assert any(s.a_transposed for s in shapes) and any(s.b_transposed for s in shapes)


def test_gemm_flops_and_label():
    shape = gemm.GemmShape(3, 5, 7, True, False)
    assert shape.flops == 2 * 3 * 5 * 7
    assert shape.label() == "M3 N5 K7 TN"


def test_transposed_operands_multiply_like_the_plain_ones():
    torch.manual_seed(0)
    plain = gemm._operands(gemm.GemmShape(4, 3, 5), torch.float64, CPU)
    torch.manual_seed(0)
    flipped = gemm._operands(gemm.GemmShape(4, 3, 5, True, True), torch.float64, CPU)
    assert plain[0].shape == flipped[0].shape == (4, 5)
    assert plain[1].shape == flipped[1].shape == (5, 3)
    assert not flipped[0].is_contiguous() and not flipped[1].is_contiguous()


def test_tiny_gemm_run_reports_consistent_rates():
    result = gemm.run([gemm.GemmShape(64, 64, 64)], CPU, ["fp32", "tf32"], warmup=1, iters=3)
    ok, skipped = result["rows"]
    assert ok["status"] == "ok" and skipped["status"] == "skipped"
    assert "tf32" in skipped["reason"]
    assert ok["tflops_median"] == pytest.approx(64**3 * 2 / (ok["time_us_median"] * 1e-6) / 1e12)
    assert ok["tflops_best"] >= ok["tflops_median"] > 0
    assert result["max_achievable"] == {
        "fp32": {"tflops": ok["tflops_best"], "shape": "M64 N64 K64 NN"}
    }


def test_fp8_needs_a_recent_gpu():
    assert "8.9" in gemm.unsupported(CPU, "fp8")
    assert gemm.unsupported(CPU, "bf16") is None


def test_timing_statistics_and_rates():
    timing = Timing((0.5, 1.0, 2.0))
    assert (timing.best_s, timing.median_s) == (0.5, 1.0)
    assert timing.mean_s == pytest.approx(3.5 / 3)
    assert timing.rates(10.0) == {
        "mean": pytest.approx(10 / (3.5 / 3)),
        "median": 10.0,
        "best": 20.0,
    }
    calls = []
    assert len(time_op(lambda: calls.append(1), CPU, warmup=2, iters=4).times_s) == 4
    assert len(calls) == 6


def test_bandwidth_arithmetic_says_how_bytes_count():
    copy = memory._row(
        "memory_copy", 10**9, {"mean": 1.0, "median": 0.5, "best": 0.25}, "read+write"
    )
    assert copy["bandwidth_gbps"] == pytest.approx(4.0)  # 2 x 1 GB in 0.5 s
    assert copy["copy_gbps"] == pytest.approx(2.0)
    assert copy["bandwidth_gbps_best"] == pytest.approx(8.0)
    link = memory._row(
        "host_to_device_pinned", 10**9, {"mean": 1.0, "median": 0.5, "best": 0.25}, "transferred"
    )
    assert link["bandwidth_gbps"] == pytest.approx(2.0) and "copy_gbps" not in link


def test_cpu_memory_copy_runs():
    (row,) = memory.run(CPU, 2**20, warmup=1, iters=3)["rows"]
    assert row["kind"] == "memory_copy" and row["counts"] == "read+write"
    assert row["bandwidth_gbps"] > 0


def test_a_zero_byte_buffer_is_refused_not_replaced_by_the_default():
    with pytest.raises(ValueError, match="at least 1 byte, got 0"):
        memory.run(CPU, 0, warmup=1, iters=1)


def test_p2p_is_skipped_below_two_gpus():
    assert p2p.skip_reason(1) == "p2p needs two or more CUDA GPUs; this machine has 1"
    assert p2p.skip_reason(2) is None
    if torch.cuda.device_count() < 2:
        assert p2p.run()["status"] == "skipped"


@pytest.fixture
def fp8_gpu(monkeypatch):
    """A CUDA device of compute capability 9.0 as far as gemm can tell."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    return torch.device("cuda")


def test_fp8_skips_deepbench_layouts_it_cannot_take_with_the_reason(fp8_gpu):
    row = gemm.run_gemm(gemm.GemmShape(512, 512, 512, False, False), fp8_gpu, "fp8")
    assert row["status"] == "skipped" and "layout NT" in row["reason"]
    assert "this shape is NN" in row["reason"]
    odd = gemm.run_gemm(gemm.GemmShape(35, 512, 512, False, True), fp8_gpu, "fp8")
    assert odd["status"] == "skipped" and "multiples of 16" in odd["reason"]


def test_fp8_runs_a_shape_in_its_own_layout(fp8_gpu, monkeypatch):
    seen = {}

    def scaled_mm(a, b, scale_a, scale_b, out_dtype, use_fast_accum):
        seen["a"], seen["b"] = a, b
        return torch.zeros(a.shape[0], b.shape[1])

    monkeypatch.setattr(torch, "_scaled_mm", scaled_mm)
    op = gemm._fp8_op(gemm.GemmShape(32, 48, 64, False, True), CPU, fast_accum=False)
    op()
    assert seen["a"].shape == (32, 64) and seen["a"].stride() == (64, 1)  # row-major
    assert seen["b"].shape == (64, 48) and seen["b"].stride() == (1, 64)  # column-major


def test_the_square_sweep_runs_fp8_in_fp8s_layout():
    square = gemm.square_shapes("cuda")[0]
    assert gemm.in_layout_of(square, "fp8").label().endswith("NT")
    assert gemm.in_layout_of(square, "fp16") == square and square.label().endswith("NN")
    assert gemm.shape_unsupported(gemm.in_layout_of(square, "fp8"), "fp8") is None


def test_fp8_is_measured_with_and_without_fast_accumulation_each_row_labelled(fp8_gpu, monkeypatch):
    calls = []

    def scaled_mm(a, b, scale_a, scale_b, out_dtype, use_fast_accum=False):
        calls.append(use_fast_accum)
        return torch.zeros(a.shape[0], b.shape[1], dtype=out_dtype)

    def time_op(op, device, *, warmup, iters, between):
        before = len(calls)
        op()
        return Timing((1e-3 if calls[before] else 2e-3,))  # fast accumulation: twice the rate

    monkeypatch.setattr(torch, "_scaled_mm", scaled_mm)
    monkeypatch.setattr(gemm, "time_op", time_op)
    cpu_operands = gemm._operands
    monkeypatch.setattr(
        gemm, "_operands", lambda shape, dtype, device: cpu_operands(shape, dtype, CPU)
    )
    square = gemm.GemmShape(64, 64, 64, native=True)
    result = gemm.run([square], fp8_gpu, ["fp8"], flush=False)
    promoted, fast = result["rows"]
    assert calls == [False, True]
    assert (promoted["fast_accum"], fast["fast_accum"]) == (False, True)
    assert promoted["status"] == fast["status"] == "ok"
    assert fast["tflops_best"] == pytest.approx(2 * promoted["tflops_best"])
    assert result["max_achievable"]["fp8"] == {
        "tflops": fast["tflops_best"],
        "shape": "M64 N64 K64 NT",
        "fast_accum": True,
    }
    table = gemm_table(result)
    assert list(table.columns[1].cells) == ["fp8 (no fast accum)", "fp8 (fast accum)"]
    assert "(M64 N64 K64 NT, fast accum)" in str(table.caption)


def test_fp8_rows_without_an_fp8_device_are_skipped_and_labelled():
    square = gemm.GemmShape(64, 64, 64, native=True)
    rows = gemm.run([square], CPU, ["fp8", "fp32"], flush=False)["rows"]
    assert [(r["dtype"], r.get("fast_accum"), r["status"]) for r in rows] == [
        ("fp8", False, "skipped"),
        ("fp8", True, "skipped"),
        ("fp32", None, "ok"),
    ]
    assert all("8.9" in r["reason"] for r in rows[:2])
