"""Benchmark cases on real data: the data wait split out of the step time."""

import json

import pytest
from rich.console import Console

from trainperf.case.spec import CaseError, DeviceKind, check_case, make_case
from trainperf.case.suite import resolve
from trainperf.measure.timed_steps import per_step
from trainperf.report.tables import results_table
from trainperf.step.benchmark import data_metrics, run_case

CPU = {"cpu": DeviceKind(2)}


@pytest.mark.parametrize("workers", [0, 2])
def test_a_case_on_cifar10_reports_its_data_wait(cifar_dir, workers):
    case = make_case(
        model="cifarnet",
        batch_size=8,
        data=f"cifar10:{cifar_dir}",
        workers=workers,
        steps="fixed:2:10",
    )
    check_case(case, CPU)
    assert case.label() == f"cifarnet b8 fp32 cpu cifar10:{cifar_dir.name} w{workers}"
    m = run_case(case)["metrics"]
    assert m["image_size"] == 32 and m["data_train_samples"] == 64
    assert len(m["data_wait_s"]) == len(m["step_s"]) == 10
    assert all(0 < w < s for w, s in zip(m["data_wait_s"], m["step_s"], strict=True))
    assert 0 < m["data_wait_share"] < 1 and isinstance(m["input_bound"], bool)
    assert m["compute_samples_per_s"] > m["samples_per_s_median"] > 0
    assert m["compute_only_s_median"] + m["data_wait_s_median"] == pytest.approx(
        m["step_s_median"], rel=0.5
    )
    row = {"case": case.model_dump(), "status": "ok", "metrics": m}
    synthetic = {"case": make_case(model="cifarnet", batch_size=8).model_dump(), "status": "ok"}
    console = Console(width=250, record=True)
    console.print(results_table([row, synthetic | {"metrics": {}}], wide=True))
    text = console.export_text()
    assert "data wait" in text and "compute/s" in text and "workers" in text
    assert f"{m['data_wait_share']:.1%}" in text


def test_data_metrics_definitions():
    m = data_metrics([0.2, 0.3, 0.25], [0.05, 0.15, 0.0], global_batch=10)
    assert m["data_wait_share"] == pytest.approx(0.2 / 0.75)
    assert m["compute_only_s_median"] == pytest.approx(0.15)
    assert m["compute_samples_per_s"] == pytest.approx(10 / 0.15)
    assert m["data_wait_s_median"] == 0.05 and m["input_bound"] is True
    assert data_metrics([1.0], [0.05], 1)["input_bound"] is False
    assert per_step([1, 2, 3, 4], 2) == [3, 7]  # two micro-batches per step


def test_cases_check_their_data(cifar_dir, tmp_path):
    with pytest.raises(CaseError, match=f"data cifar10:{tmp_path}/x: directory {tmp_path}/x does"):
        check_case(make_case(model="cifarnet", batch_size=8, data=f"cifar10:{tmp_path}/x"), CPU)
    with pytest.raises(CaseError, match="give image_size 32, not 64"):
        case = make_case(model="resnet18", batch_size=8, image_size=64, data=f"cifar10:{cifar_dir}")
        check_case(case, CPU)
    # ResNet-18 on CIFAR-10 takes the data's 32x32 when no size is given
    check_case(make_case(model="resnet18", batch_size=8, data=f"cifar10:{cifar_dir}"), CPU)
    with pytest.raises(CaseError, match="causal language models"):
        check_case(
            make_case(model="bert-squad", batch_size=8, data=f"tokens:{tmp_path}/t.bin"), CPU
        )
    with pytest.raises(CaseError, match="data: not a data source: allowed synthetic, cifar10:DIR"):
        make_case(model="cifarnet", batch_size=8, data="imagenet")


def test_the_loader_workers_suite_sweeps_workers():
    suite = resolve("loader-workers")
    assert suite.description
    skips = suite.check(CPU)
    here = [p.fields for p in suite.planned if p.key not in skips]
    assert {f["workers"] for f in here} == {0, 1, 2, 4, 8, 16}
    assert {(f["model"], f["data"], f["device"]) for f in here} == {
        ("resnet18", "jpeg-sample", "cpu")
    }
    gpu = [p.fields for p in suite.planned if p.fields["device"] == "cuda"]
    assert {(f["model"], f["image_size"], f["batch_size"]) for f in gpu} == {("resnet50", 224, 32)}
    assert sorted(f["workers"] for f in gpu) == [0, 1, 2, 4, 8, 16]


def test_a_ddp_case_loads_a_shard_per_rank(cifar_dir, tmp_path, run_cli):
    suite = tmp_path / "ddp-data.yaml"
    suite.write_text(
        "name: ddp-data\ncases:\n"
        f"  - {{model: cifarnet, batch_size: 8, devices: 2, device: cpu, workers: 1,"
        f' data: "cifar10:{cifar_dir}", steps: "fixed:1:4", runs: 1}}\n'
    )
    code, out, err = run_cli(["run", suite, "--db", tmp_path / "r.db", "--json"])
    (result,) = json.loads(out)["results"]
    assert code == 0, result.get("error")
    m, (run,) = result["metrics"], result["runs"]
    assert m["world_size"] == 2 and len(run["metrics"]["data_wait_s"]) == 4
    assert all("data_wait_s_median" in rank for rank in run["metrics"]["ranks"])
    assert 0 < m["data_wait_share"] < 1 and m["compute_samples_per_s"] > 0


def test_the_loader_workers_sweep_runs_with_0_and_2_workers(tmp_path, run_cli, monkeypatch):
    """The built-in suite's CPU cases with 0 and 2 workers, made small (cifarnet at 32x32,
    a few steps) and run through the sweep on the generated JPEG sample."""
    import json

    import yaml

    from trainperf.case.suite import builtin_path

    monkeypatch.setenv("TRAINPERF_CACHE", str(tmp_path / "cache"))
    builtin = yaml.safe_load(builtin_path("loader-workers").read_text())
    cases = [c for c in builtin["cases"] if c["device"] == "cpu" and c["workers"] in (0, 2)]
    small = {"model": "cifarnet", "image_size": 32, "steps": "fixed:1:3", "batch_size": 8}
    small["runs"] = 1
    suite = {"name": "loader-workers-small", "defaults": builtin["defaults"]}
    suite["cases"] = [c | small for c in cases]
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(suite))
    code, out, err = run_cli(["run", path, "--db", tmp_path / "r.db", "--json"])
    assert code == 0, err
    results = json.loads(out)["results"]
    assert [r["case"]["workers"] for r in results] == [0, 2]
    for r in results:
        assert r["status"] == "ok" and r["case"]["data"] == "jpeg-sample"
        m = r["metrics"]
        assert 0 <= m["data_wait_share"] < 1
        assert m["compute_samples_per_s"] >= m["samples_per_s_median"] * 0.99
