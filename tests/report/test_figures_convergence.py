"""The time-to-accuracy figures from training runs built by hand: learning curves overlaid
across systems (against epochs and wall-clock time) and the relative time to train."""

from __future__ import annotations

import pytest

from trainperf.report.figures_convergence import (
    convergence_figures,
    recipe_key,
    relative_time_figures,
    relative_times,
)

CONFIG = {"model": "cifarnet", "data": "cifar10:/data/cifar", "target_metric": "top1"}
CONFIG |= {"target_value": 0.8, "max_epochs": 3, "batch_size": 128, "devices": 1}
CONFIG |= {"precision": "fp32", "device": "cpu", "workers": 0, "seed": 0}


def run(run_id, host, epoch_s, seed=0, reached=True, status="ok", **config):
    curve = [(1, 0.55), (2, 0.71), (3, 0.83 if reached else 0.75)]
    return {
        "id": run_id,
        "status": status,
        "system": {"fingerprint": "fp-" + host, "hostname": host},
        "config": CONFIG | {"seed": seed} | config,
        "reached": reached,
        "time_to_target_s": epoch_s * 3 if reached else None,
        "evaluations": [
            {"epoch": e, "samples_seen": 50000 * e, "time_s": epoch_s * e, "top1": top1}
            for e, top1 in curve
        ],
    }


@pytest.fixture(scope="module")
def runs():
    """cpu-a: three seeds (the baseline: most runs reached), one more not reached; gpu-b: two
    seeds, four times faster and on another data path; gpu-c: none reached; a bf16 recipe on
    gpu-b alone."""
    return [
        run(1, "cpu-a", 8.0, seed=0),
        run(2, "cpu-a", 9.0, seed=1),
        run(3, "cpu-a", 10.0, seed=2),
        run(4, "cpu-a", 12.0, seed=3, reached=False),
        run(5, "gpu-b", 2.0, seed=0, data="cifar10:/scratch/c10", device="cuda", workers=8),
        run(6, "gpu-b", 2.5, seed=1, data="cifar10:/scratch/c10", device="cuda", workers=8),
        run(7, "gpu-c", 3.0, reached=False, status="diverged"),
        run(8, "gpu-b", 1.0, precision="bf16"),
    ]


def test_the_recipe_leaves_out_seed_paths_workers_and_device():
    label, key = recipe_key(CONFIG | {"seed": 4, "data": "cifar10:/x", "workers": 3})
    assert key == recipe_key(CONFIG | {"device": "cuda"})[1]
    assert key != recipe_key(CONFIG | {"batch_size": 256})[1]
    assert label == "cifarnet on cifar10 to top1 0.8, b128 x1 fp32"


def test_time_to_target_relative_to_the_system_with_most_runs_reached(runs):
    [(recipe, found)] = relative_times(runs).items()  # bf16 reached on one system only
    assert recipe == "cifarnet on cifar10 to top1 0.8, b128 x1 fp32"
    assert found["baseline"] == "cpu-a"
    a, b = found["systems"]  # gpu-c reached nothing: no row
    assert (a["host"], a["runs"], a["times"]) == ("cpu-a", 4, [24.0, 27.0, 30.0])
    assert a["relative"] == pytest.approx(1.0)
    assert b["relative"] == pytest.approx(6.75 / 27.0)
    assert b["seeds"] == pytest.approx([6 / 27, 7.5 / 27])
    low, high = b["ci95"]
    assert low < b["relative"] < high


def test_the_relative_figure_and_its_table(runs):
    [figure] = relative_time_figures(runs)
    assert figure.key == "time-to-train-relative-cifarnet-on-cifar10-to-top1-0-8-b128-x1-fp32"
    assert "baseline system cpu-a" in figure.caption and figure.system == "cpu-a, gpu-b"
    assert figure.table["rows"][1][:4] == ["gpu-b", "2 of 2", "6.8", "0.25"]
    assert figure.table["rows"][0][1] == "3 of 4"
    assert "baseline cpu-a" in figure.svg


def test_no_relative_figure_with_one_system_reaching_the_target(runs):
    assert relative_time_figures([r for r in runs if r["system"]["hostname"] != "gpu-b"]) == []


def test_learning_curves_against_epochs_and_time_a_colour_per_system(runs):
    figures = convergence_figures(runs)
    [figure] = figures  # one figure, whatever the data path of each machine
    assert figure.key == "convergence-cifarnet-cifar10-top1-0-8"
    curves, metric, target, epoch_size = figures[0].drawing.args
    assert (metric, target, epoch_size) == ("top1", 0.8, 50000)
    colors = {c["label"].split()[2]: c["color"] for c in curves}
    assert colors == {"cpu-a": "C0", "gpu-b": "C1", "gpu-c": "C2"}
    assert len(curves) == 8
    assert [e["epoch"] for e in curves[0]["evaluations"]] == [1, 2, 3]
    svg = figures[0].svg
    assert "epochs" in svg and "samples seen" in svg and "wall-clock time" in svg
    table = figures[0].table
    assert table["rows"][0] == ["1", "cpu-a", "0", "ok", "3", "24.0", "0.83", "24.0"]
    assert table["rows"][3][-1] == "not reached"
