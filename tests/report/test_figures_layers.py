"""The per-layer figure across systems from profile runs built by hand: which workloads get
a figure, which layers are drawn, the data table, the report section."""

from __future__ import annotations

from trainperf.report.figures_layers import layer_figures, profiled_workloads, top_layers

CASE = {"model": "cifarnet", "batch_size": 16, "precision": "fp32", "device": "cpu"}
CASE |= {"devices": 1, "nodes": 1, "parallel": "auto", "seed": 0, "steps": "adaptive"}


def profile(system, scale, layers=14, status="ok", **case):
    """A profile of ``layers`` layers, layer i taking (i + 1) x ``scale`` ms forward and
    twice that backward."""
    rows = [
        {"name": f"features.{i}", "type": "Conv2d", "fwd_ms": (i + 1) * scale}
        | {"bwd_ms": 2 * (i + 1) * scale}
        for i in range(layers)
    ]
    return {
        "kind": "profile",
        "status": status,
        "system": system,
        "params": {"kind": "profile", "case": CASE | case, "steps": 3, "warmup": 1},
        "metrics": {"layers": rows},
    }


HOSTS = {"fp-a": "cpu-a", "fp-b": "gpu-b"}


def runs():
    return [
        profile("fp-a", 1.0),
        profile("fp-b", 9.0),  # older: replaced by the next one
        profile("fp-b", 0.1, device="cuda"),  # the same workload on a GPU
        profile("fp-a", 1.0, batch_size=64),  # on one system only: no figure
        profile("fp-b", 1.0, batch_size=64, status="error"),
    ]


def test_a_figure_per_workload_profiled_on_two_systems_or_more():
    found = profiled_workloads(runs())
    assert list(found) == ["cifarnet b16 fp32"]
    assert found["cifarnet b16 fp32"]["fp-b"]["params"]["case"]["device"] == "cuda"


def test_the_slowest_layers_on_any_system_are_drawn_the_rest_summed():
    assert top_layers([profile("fp-a", 1.0)], 3) == ["features.13", "features.12", "features.11"]
    [figure] = layer_figures(runs(), HOSTS)
    assert figure.key == "layers-across-systems-cifarnet-b16-fp32"
    assert figure.system == "cpu-a, gpu-b"
    assert "The other 2 layers are left out" in figure.caption
    # layers 0 and 1 take 3 + 6 ms on cpu-a, 0.3 + 0.6 ms on gpu-b
    assert "cpu-a 9 ms; gpu-b 0.9 ms" in figure.caption
    table = figure.table
    assert table["headers"] == ["layer", "type", "cpu-a fwd ms", "cpu-a bwd ms"] + [
        "gpu-b fwd ms",
        "gpu-b bwd ms",
    ]
    assert table["rows"][0] == ["features.13", "Conv2d", "14", "28", "1.4", "2.8"]
    assert table["rows"][-1] == ["other layers", "", "9", "", "0.9", ""]
    assert len(table["rows"]) == 13 and "gpu-b" in figure.svg and "backward" in figure.svg


def test_no_figure_without_a_second_system():
    assert layer_figures([profile("fp-a", 1.0), profile("fp-a", 2.0)], HOSTS) == []
