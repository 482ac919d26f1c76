"""The framework-comparison figure from results built by hand: which figures, the engines
named, speed-ups against each engine's own 1-device result, failures marked, the section."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from statistics import mean

import pytest

from report_fixture import hand_result, numbered, stored_and_rendered
from trainperf.report.figures_frameworks import comparisons, framework_figures

ENGINE_CASE = {
    "PyTorch": {"framework": "pytorch", "compile": False},
    "PyTorch + torch.compile": {"framework": "pytorch", "compile": True},
    "JAX": {"framework": "jax", "compile": False},
}
# Runs' samples/s per engine and device count, chosen so that the speed-ups against each
# engine's own 1-device result (1.8, 1.6, 1.9) differ from those against PyTorch's.
RUNS = {
    ("PyTorch", 1): [98.0, 100.0, 102.0],
    ("PyTorch", 2): [176.0, 180.0, 184.0],
    ("PyTorch + torch.compile", 1): [148.0, 150.0, 152.0],
    ("PyTorch + torch.compile", 2): [236.0, 240.0, 244.0],
    ("JAX", 1): [118.0, 120.0, 122.0],
    ("JAX", 2): [224.0, 228.0, 232.0],
}
SPEEDUPS = {"PyTorch": 1.8, "PyTorch + torch.compile": 1.6, "JAX": 1.9}


def result(engine, devices, host="gpu-a", status="ok", model="resnet18", factor=1.0):
    runs = [v * factor for v in RUNS[engine, devices]]
    case = {"model": model, "batch_size": 16, "image_size": 64, "precision": "fp32"}
    case |= {"device": "cuda", "devices": devices, "nodes": 1, "parallel": "auto"}
    case |= {"scaling": "weak", "steps": "adaptive", "runs": 3, "seed": 0}
    metrics = {
        "samples_per_s_median": mean(runs),
        "samples_per_s_ci95": [min(runs), max(runs)],
        "run_samples_per_s": runs,
    }
    return hand_result(case | ENGINE_CASE[engine], metrics, status, "rank 0 died", host)


def study(**kwargs):
    return [result(engine, n, **kwargs) for engine, n in RUNS]


@pytest.fixture(scope="module")
def results():
    """Three engines on gpu-a and on gpu-b (twice as fast); gpt2 under PyTorch only."""
    one_engine = [result("PyTorch", n, model="gpt2-small") for n in (1, 2)]
    return numbered(study() + study(host="gpu-b", factor=2.0) + one_engine)


def text_of(svg: str) -> str:
    return " ".join(ET.fromstring(svg).itertext())


def test_a_figure_per_system_for_workloads_of_two_engines_or_more(results):
    keys = [f.key for f in framework_figures(results)]
    assert keys == [
        "framework-resnet18-b16-64-fp32-cuda-gpu-a",
        "framework-resnet18-b16-64-fp32-cuda-gpu-b",
    ]


def test_engines_are_named_in_the_svg_and_the_caption(results):
    figure = framework_figures(results)[0]
    for engine in SPEEDUPS:
        assert engine in text_of(figure.svg) and engine in figure.caption
    assert figure.system == "gpu-a" and "Parallel mode: PyTorch ddp" in figure.caption
    assert "JAX mesh" in figure.caption


def test_speedups_are_against_each_engines_own_one_device_result(results):
    for comparison, factor in zip(comparisons(results), (1.0, 2.0), strict=True):
        assert [s.engine for s in comparison.series] == list(SPEEDUPS)
        for series in comparison.series:
            row = series.speedups[2]
            assert row["speedup"] == pytest.approx(SPEEDUPS[series.engine])
            low, high = row["speedup_ci95"]
            assert low < row["speedup"] < high
            one = series.results[1]["metrics"]["samples_per_s_median"]
            assert one == pytest.approx(mean(RUNS[series.engine, 1]) * factor)


def test_a_failed_result_is_marked_and_named_but_does_not_hide_an_ok_one():
    crashed = result("JAX", 2, status="crashed")
    late_failure = result("PyTorch", 2, status="oom")  # newer than PyTorch's ok 2-device
    kept = [r for r in study() if (r["case"]["framework"], r["case"]["devices"]) != ("jax", 2)]
    results = numbered([*kept, crashed, late_failure])
    [figure] = framework_figures(results)
    assert "Failed runs, marked x on the axis: JAX at 2 devices: crashed." in figure.caption
    assert "JAX: crashed" in text_of(figure.svg) and "oom" not in figure.caption
    pytorch, _, jax = comparisons(results)[0].series
    assert pytorch.ok().keys() == {1, 2} and pytorch.speedups[2]["speedup"] == pytest.approx(1.8)
    assert jax.failed() == {2: results[-2]} and jax.speedups == {}


def test_report_has_the_frameworks_section(tmp_path):
    summary, section = stored_and_rendered(tmp_path / "frameworks.db", study(), "frameworks")
    assert "framework-resnet18-b16-64-fp32-cuda-gpu-a" in summary.figures
    assert "frameworks" not in summary.empty_sections
    assert "Frameworks compared" in section and 'id="framework-resnet18' in section
