"""The speed-up figures from results built by hand: speed-up against devices per engine and
parallel mode over the line's smallest device count, and reduced precision over fp32."""

from __future__ import annotations

from statistics import mean

import pytest

from report_fixture import hand_result, numbered, stored_and_rendered
from trainperf.report.figures_speedup import (
    precision_figures,
    precision_rows,
    speedup_figures,
    speedup_lines,
)


def result(devices, runs, host="gpu-a", status="ok", **case):
    fields = {"model": "resnet18", "batch_size": 16, "image_size": 64, "precision": "fp32"}
    fields |= {"device": "cuda", "devices": devices, "nodes": 1, "parallel": "auto"}
    fields |= {"scaling": "weak", "steps": "adaptive", "runs": len(runs), "seed": 0}
    metrics = {}
    if runs:
        metrics = {
            "samples_per_s_median": mean(runs),
            "samples_per_s_ci95": [min(runs), max(runs)],
            "run_samples_per_s": runs,
        }
    return hand_result(fields | case, metrics, status, "rank 0 died", host)


def spread(value):
    return [value - 2.0, value, value + 2.0]


@pytest.fixture(scope="module")
def scaling():
    """gpu-a: PyTorch ddp and fsdp on 1, 2, 4 devices; JAX on 2 and 4 only (no 1-device
    result: its smallest count is 2); a crashed ddp x8 is no point; gpu-b: ddp x2 alone."""
    return numbered(
        [
            result(1, spread(100.0)),
            result(2, spread(180.0), parallel="ddp"),
            result(4, spread(340.0), parallel="ddp"),
            result(2, spread(170.0), parallel="fsdp"),
            result(4, spread(300.0), parallel="fsdp"),
            result(2, spread(200.0), framework="jax"),
            result(4, spread(380.0), framework="jax"),
            result(8, [], status="crashed", parallel="ddp"),
            result(2, spread(50.0), host="gpu-b", parallel="ddp"),  # no baseline on gpu-b
        ]
    )


def test_a_line_per_engine_and_mode_over_its_smallest_device_count(scaling):
    [(workload, mode)] = speedup_lines(scaling)
    assert workload == "resnet18 b16 @64 fp32 cuda" and mode == "weak"
    lines = {ln.name: ln for ln in speedup_lines(scaling)[workload, mode]}
    assert list(lines) == ["PyTorch ddp", "PyTorch fsdp", "JAX mesh"]
    ddp, fsdp, jax = lines.values()
    assert [p.devices for p in ddp.points] == [1, 2, 4]
    assert [p.speedup for p in ddp.points] == pytest.approx([1.0, 1.8, 3.4])
    assert [p.speedup for p in fsdp.points] == pytest.approx([1.0, 1.7, 3.0])
    assert [p.devices for p in jax.points] == [2, 4]  # JAX's baseline: its 2 devices
    assert jax.points[-1].speedup == pytest.approx(1.9)
    low, high = ddp.points[-1].ci95
    assert low < 3.4 < high


def test_the_speedup_figure_has_its_data_table_and_ideal_line(scaling):
    [figure] = speedup_figures(scaling)
    assert figure.key == "speedup-vs-devices-resnet18-b16-64-fp32-cuda"
    assert figure.system == "gpu-a"  # gpu-b has one device count only: no line
    table = figure.table
    assert table["headers"][:4] == ["line", "devices", "samples/s", "speed-up"]
    assert table["rows"][-1][:4] == ["gpu-a: JAX mesh", "4", "380.0", "1.90"]
    assert table["rows"][-1][5] == "2"  # ideal: 4 / 2
    assert "ideal linear speed-up" in figure.svg and "smallest device count (1, 2)" in (
        figure.caption
    )


def test_no_speedup_figure_without_two_device_counts():
    assert speedup_figures(numbered([result(1, spread(100.0)), result(2, [], status="oom")])) == []


@pytest.fixture(scope="module")
def precisions():
    """gpu-a: fp16 and bf16 of resnet18 on 1 device, bf16 on 2 (ddp) too; gpu-b: bf16 on one
    device and an fp16 result without its fp32 baseline (another batch)."""
    return numbered(
        [
            result(1, spread(100.0)),
            result(1, spread(250.0), precision="fp16"),
            result(1, spread(230.0), precision="bf16"),
            result(2, spread(190.0), parallel="ddp"),
            result(2, spread(380.0), precision="bf16", parallel="ddp"),
            result(1, spread(40.0), host="gpu-b"),
            result(1, spread(60.0), host="gpu-b", precision="bf16"),
            result(1, spread(90.0), host="gpu-b", precision="fp16", batch_size=32),
            result(1, spread(300.0), precision="tf32"),  # not a reduced precision here
        ]
    )


def test_reduced_precision_over_fp32_of_the_same_system_and_case(precisions):
    rows = precision_rows(precisions)
    assert list(rows) == ["fp16", "bf16"]
    assert [(p.label, p.speedup) for p in rows["fp16"]["fp-gpu-a"]] == [
        ("resnet18 b16 @64 cuda", pytest.approx(2.5))
    ]
    assert "fp-gpu-b" not in rows["fp16"]  # its fp16 case has no fp32 twin
    bf16 = {(s, p.label): p.speedup for s, points in rows["bf16"].items() for p in points}
    assert bf16 == {
        ("fp-gpu-a", "resnet18 b16 @64 cuda"): pytest.approx(2.3),
        ("fp-gpu-a", "resnet18 b16 @64 cuda ddp x2"): pytest.approx(2.0),
        ("fp-gpu-b", "resnet18 b16 @64 cuda"): pytest.approx(1.5),
    }


def test_a_precision_figure_per_reduced_precision_with_its_table(precisions):
    fp16, bf16 = precision_figures(precisions)
    assert (fp16.key, bf16.key) == ("precision-speedup-fp16", "precision-speedup-bf16")
    assert bf16.system == "gpu-a, gpu-b"
    rows = bf16.table["rows"]
    assert rows[-1][:4] == ["resnet18 b16 @64 cuda", "gpu-b", "60.0", "1.50"]
    assert len(rows) == 3 and all(row[4] != "-" for row in rows)
    assert "fp32 (no gain)" in bf16.svg


def test_report_shows_the_speedup_figures(tmp_path):
    summary, section = stored_and_rendered(tmp_path / "s.db", [result(1, [100.0])], "precision")
    assert "precision" in summary.empty_sections and "No figure" in section
    results = [
        result(1, spread(100.0)),
        result(2, spread(180.0), parallel="ddp"),
        result(1, spread(250.0), precision="fp16"),
    ]
    summary, section = stored_and_rendered(tmp_path / "p.db", results, "precision")
    assert "precision-speedup-fp16" in summary.figures and "Data of the figure" in section
    assert "speedup-vs-devices-resnet18-b16-64-fp32-cuda" in summary.figures
