"""Comparing systems and sources: case matching, ratios, geomeans and the run-level decision."""

from itertools import count

import numpy as np
import pytest

from report_fixture import SPEEDUP, build
from trainperf.analysis.compare import (
    UnknownField,
    UnknownSystem,
    case_key,
    compare,
    compare_sources,
    geomean,
    significance,
)
from trainperf.store.database import Store

_ids = count(1)


def result(host, runs, batch=8, status="ok", fingerprint=None, **case):
    """A stored result of ``host`` whose runs measured ``runs`` samples/s."""
    metrics = {}
    if status == "ok":
        metrics = {
            "samples_per_s_median": float(np.mean(runs)),
            "run_samples_per_s": list(runs),
            "global_batch": batch,
        }
    return {
        "id": next(_ids),
        "status": status,
        "case": {"model": "cifarnet", "batch_size": batch, "device": "cpu"} | case,
        "metrics": metrics,
        "system": {"fingerprint": fingerprint or f"{host}-fingerprint", "hostname": host},
    }


def runs(mean, n=4, spread=0.03, seed=1):
    return list(np.random.default_rng(seed).normal(mean, mean * spread, n))


def test_ratio_percent_and_geomean_of_known_values():
    doc = compare(
        [result("a", [80.0] * 3), result("b", [160.0] * 3), result("b", [20.0] * 3, batch=4)],
        baseline="a",
    )
    b = "b-fingerprint"
    (case,) = [c for c in doc["cases"] if c["case"]["batch_size"] == 8]
    entry = case["per_system"][b]
    assert entry["samples_per_s"] == pytest.approx(160) and entry["runs"] == 3
    assert entry["ratio"] == pytest.approx(2) and entry["difference"] == pytest.approx(1)
    assert entry["decision"] == "faster" and entry["ci95"] == pytest.approx([2, 2])
    assert case["per_system"]["a-fingerprint"]["absent_reason"] == "baseline"
    assert geomean([2, 8]) == pytest.approx(4)
    assert geomean([]) is None


def test_clearly_apart_is_significant_and_the_interval_excludes_one():
    faster = significance(runs(100), runs(200, seed=2))
    assert faster.decision == "faster" and faster.ci95[0] > 1
    assert faster.ci95[0] < 2 < faster.ci95[1]
    slower = significance(runs(200), runs(100, seed=2))
    assert slower.decision == "slower" and slower.ci95[1] < 1


def test_same_distribution_or_identical_is_not_significant():
    same = significance(runs(100, 5, 0.05), runs(100, 5, 0.05, seed=2))
    assert same.decision == "no significant difference"
    assert same.ci95[0] <= 1 <= same.ci95[1]
    identical = significance([100.0] * 3, [100.0] * 3)
    assert identical.decision == "no significant difference" and identical.ci95 == (1, 1)


def test_fewer_than_three_runs_gives_no_decision_with_the_reason():
    found = significance([100.0, 101.0], [200.0] * 5)
    assert found.decision is None and found.ci95 is None
    assert found.absent_reason == (
        "not enough runs: 2 on the baseline (a decision needs 3 on each side)"
    )
    # A result of one run (stored before runs existed) has only its own estimate.
    single = result("b", [200.0])
    del single["metrics"]["run_samples_per_s"]
    doc = compare([result("a", [100.0] * 3), single])
    entry = doc["cases"][0]["per_system"]["b-fingerprint"]
    assert entry["ratio"] == pytest.approx(2) and entry["decision"] is None
    assert "not enough runs: 1 on this side" in entry["absent_reason"]


def test_same_case_ignores_seed_policy_threads_timeout_and_resolves_parallel():
    base = {"model": "m", "batch_size": 8}
    same = base | {"seed": 3, "steps": "fixed:1:5", "threads": 4, "timeout_s": 60.0, "runs": 7}
    assert case_key(base) == case_key(same)
    assert case_key(base) == case_key(base | {"parallel": "none", "grad_accum": 1})
    assert case_key(base | {"devices": 2}) == case_key(base | {"devices": 2, "parallel": "ddp"})
    for other in ({"batch_size": 16}, {"precision": "bf16"}, {"devices": 2}, {"mkldnn": False}):
        assert case_key(base) != case_key(base | other)


def test_newest_result_per_case_and_system_wins_and_failures_show_their_status():
    doc = compare(
        [
            result("a", [80.0] * 3),
            result("b", [160.0] * 3),
            result("b", [], status="oom", seed=7),  # newer, same case
            result("b", [160.0] * 3, batch=4),  # only on b
        ],
    )
    by_batch = {c["case"]["batch_size"]: c["per_system"] for c in doc["cases"]}
    assert by_batch[8]["b-fingerprint"]["status"] == "oom"
    assert by_batch[8]["b-fingerprint"]["ratio"] is None
    assert by_batch[8]["b-fingerprint"]["absent_reason"] == "oom on this side"
    assert by_batch[4]["a-fingerprint"]["status"] == "not run"
    assert by_batch[4]["b-fingerprint"]["absent_reason"] == "not run on the baseline"
    (group, overall) = doc["groups"]
    assert group["label"] == "devices=1" and overall["label"] == "all cases"
    assert overall["per_system"]["b-fingerprint"] == {"geomean_ratio": None, "cases": 0}


def test_default_baseline_breaks_ties_by_the_oldest_first_result():
    doc = compare([result("late", [80.0] * 3), result("early", [80.0] * 3)])
    assert doc["baseline"]["hostname"] == "late"
    assert "most ok cases" in doc["baseline"]["chosen"]


def test_baseline_by_hostname_or_fingerprint_and_shared_hostnames():
    results = [
        result("node", [80.0] * 3, fingerprint="aaaaaaaa1"),
        result("node", [160.0] * 3, fingerprint="aaaaaaaa2"),
        result("other", [40.0] * 3, fingerprint="bbbb"),
    ]
    doc = compare(results, baseline="aaaaaaaa2")
    assert doc["baseline"]["fingerprint"] == "aaaaaaaa2" and "given" in doc["baseline"]["chosen"]
    labels = {s["fingerprint"]: s["label"] for s in doc["systems"]}
    assert labels == {"aaaaaaaa1": "node (aaaaaaaa1)", "aaaaaaaa2": "node (aaaaaaaa2)"} | {
        "bbbb": "other"
    }
    assert compare(results, baseline="other")["baseline"]["fingerprint"] == "bbbb"
    assert compare(results, baseline="bb")["baseline"]["fingerprint"] == "bbbb"  # a prefix
    with pytest.raises(UnknownSystem, match="several"):
        compare(results, baseline="node")
    with pytest.raises(UnknownSystem, match=r"known systems node \(aaaaaaaa1\)"):
        compare(results, baseline="nowhere")


def test_geomean_per_group_counts_cases_ok_on_both_sides():
    results = [
        result("a", [80.0] * 3),
        result("b", [160.0] * 3),  # ratio 2
        result("a", [80.0] * 3, devices=2),
        result("b", [640.0] * 3, devices=2),  # ratio 8
        result("a", [40.0] * 3, batch=4),
        result("b", [320.0] * 3, batch=4),  # ratio 8
    ]
    doc = compare(results)
    means = {g["label"]: g["per_system"]["b-fingerprint"] for g in doc["groups"]}
    assert means["devices=1"]["geomean_ratio"] == pytest.approx(4)
    assert means["devices=1"]["cases"] == 2
    assert means["devices=2"]["geomean_ratio"] == pytest.approx(8)
    assert means["all cases"]["geomean_ratio"] == pytest.approx(128 ** (1 / 3))
    assert means["all cases"]["cases"] == 3
    ungrouped = compare(results, group_by=[])
    assert [g["label"] for g in ungrouped["groups"]] == ["all cases"]
    with pytest.raises(UnknownField, match="cannot group by 'seed'"):
        compare(results, group_by=["seed"])


def test_two_sources_are_columns_whatever_systems_they_hold():
    before = [result("box", runs(100, seed=s), batch=b) for s, b in ((1, 8), (2, 16))]
    after = [result("box", runs(150, seed=s), batch=b) for s, b in ((3, 8), (4, 32))]
    doc = compare_sources([("before.db", before), ("after.json", after)])
    assert [(s["id"], s["label"], s["baseline"]) for s in doc["systems"]] == [
        ("A", "A: before.db", True),
        ("B", "B: after.json", False),
    ]
    assert "first source" in doc["baseline"]["chosen"]
    by_batch = {c["case"]["batch_size"]: c["per_system"]["B"] for c in doc["cases"]}
    assert by_batch[8]["decision"] == "faster" and by_batch[8]["ratio"] == pytest.approx(
        np.mean(after[0]["metrics"]["run_samples_per_s"])
        / np.mean(before[0]["metrics"]["run_samples_per_s"])
    )
    assert by_batch[16]["status"] == "not run" and by_batch[32]["absent_reason"] == (
        "not run on the baseline"
    )


def test_fixture_system_b_is_speedup_times_faster_on_one_device(tmp_path):
    known = build(tmp_path / "r.db")
    with Store(tmp_path / "r.db") as store:
        doc = compare(store.results(), baseline=known["systems"]["a"])
    b = known["systems"]["b"]
    one_device = [
        c["per_system"][b]
        for c in doc["cases"]
        if c["case"]["devices"] == 1 and c["per_system"][b]["ratio"] is not None
    ]
    assert len(one_device) == 4
    for entry in one_device:
        assert entry["ratio"] == pytest.approx(SPEEDUP)
        assert entry["ci95"][0] <= SPEEDUP <= entry["ci95"][1]
    # Every run of B is its run of A 4 times faster: the runs' spread leaves 4x clear.
    assert {e["decision"] for e in one_device} == {"faster"}
    statuses = {e["status"] for c in doc["cases"] for e in c["per_system"].values()}
    assert {"oom", "timeout", "crashed", "error", "not run"} <= statuses


def test_across_framework_puts_the_engines_of_one_system_side_by_side():
    """--across framework,compile: one column per engine, cases matched without those
    fields, JAX's mesh meeting PyTorch's ddp; the baseline picked by a column's label."""
    pytorch = result("a", runs(100.0, seed=1), devices=2, parallel="auto")
    compiled = result("a", runs(130.0, seed=2), devices=2, compile=True)
    jax_mesh = result("a", runs(150.0, seed=3), devices=2, framework="jax", parallel="mesh")
    doc = compare(
        [pytorch, compiled, jax_mesh],
        baseline="framework=pytorch, compile=False",
        group_by=(),
        across=("framework", "compile"),
    )
    labels = [row["label"] for row in doc["systems"]]
    assert labels == [
        "framework=pytorch, compile=False",
        "framework=pytorch, compile=True",
        "framework=jax, compile=False",
    ]
    (case,) = doc["cases"]  # one workload, three engines
    assert "framework" not in case["case"] and "compile" not in case["case"]
    by_label = {row["label"]: row["id"] for row in doc["systems"]}
    jax_entry = case["per_system"][by_label["framework=jax, compile=False"]]
    assert jax_entry["ratio"] == pytest.approx(
        np.mean(jax_mesh["metrics"]["run_samples_per_s"])
        / np.mean(pytorch["metrics"]["run_samples_per_s"])
    )
    assert jax_entry["decision"] == "faster"
    assert doc["across"] == ["framework", "compile"]


def test_across_keeps_systems_apart_and_refuses_a_field_also_grouped():
    doc = compare(
        [
            result("a", [10.0] * 3),
            result("a", [12.0] * 3, framework="jax"),
            result("b", [20.0] * 3),
        ],
        across=("framework",),
        group_by=(),
    )
    assert [row["label"] for row in doc["systems"]] == [
        "a framework=pytorch",
        "a framework=jax",
        "b framework=pytorch",
    ]
    with pytest.raises(UnknownField, match="cannot group by and compare across framework"):
        compare([result("a", [1.0] * 3)], group_by=("framework",), across=("framework",))
    with pytest.raises(UnknownField, match="cannot compare across 'colour'"):
        compare([result("a", [1.0] * 3)], across=("colour",))


def test_group_by_framework_between_systems():
    doc = compare(
        [
            result("a", [10.0] * 3),
            result("b", [20.0] * 3),
            result("a", [10.0] * 3, framework="jax"),
            result("b", [40.0] * 3, framework="jax"),
        ],
        baseline="a",
        group_by=("framework",),
    )
    geomeans = {
        row["label"]: row["per_system"]["b-fingerprint"]["geomean_ratio"] for row in doc["groups"]
    }
    assert geomeans["framework=pytorch"] == pytest.approx(2)
    assert geomeans["framework=jax"] == pytest.approx(4)
