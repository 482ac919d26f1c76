"""`profile --devices N`: every rank profiled under torchrun, rank 0 gathering them."""

import json
import sqlite3

import pytest

from nodes import loopback_endpoint, run_on_nodes
from trainperf.profile.ranks import combine_ranks, communication_by_difference


def rank(number, step_ms, comm_ms=10.0):
    return {
        "rank": number,
        "host": f"node{number // 2}",
        "step_ms_uninstrumented": step_ms,
        "comm_ms": comm_ms,
        "categories": [{"category": "communication", "ms": comm_ms, "share": 0.1}],
    }


def test_the_slowest_rank_sets_the_pace_and_the_top_level():
    combined = combine_ranks([rank(2, 110.0, comm_ms=30.0), rank(0, 100.0), rank(1, 105.0)])
    assert [r["rank"] for r in combined["ranks"]] == [0, 1, 2]
    assert combined["world_size"] == 3
    assert combined["slowest_rank"] == 2 and combined["fastest_rank"] == 0
    assert combined["rank_spread"] == pytest.approx(0.10)
    assert combined["step_ms_uninstrumented"] == 110.0 and combined["comm_ms"] == 30.0
    assert "host" not in combined and "rank" not in combined
    with pytest.raises(ValueError, match="no rank"):
        combine_ranks([])


def test_communication_by_difference_or_absent_with_its_reason():
    found = communication_by_difference(12.0, {"compute_step_s": [0.009, 0.010, 0.011]})
    assert found["compute_step_ms"] == pytest.approx(10.0)
    assert found["comm_exposed_by_difference_ms"] == pytest.approx(2.0)
    absent = communication_by_difference(12.0, {"compute_step_s": []})
    assert absent["compute_step_ms"] is None and absent["comm_exposed_by_difference_ms"] is None
    assert "no step without communication" in absent["comm_exposed_by_difference_ms_absent_reason"]


def test_two_gloo_ranks_each_store_their_communication(run_cli, tmp_path):
    db = tmp_path / "p.db"
    code, out, err = run_cli(
        ["profile", "cifarnet", "-b", 8, "--image-size", 32, "--steps", "fixed:1:3"]
        + ["--devices", 2, "--device", "cpu", "--db", db, "--json"]
    )
    assert code == 0, err + out  # a failed result says why in its JSON, on stdout
    result = json.loads(out)
    m = result["metrics"]
    assert result["case"]["devices"] == 2 and m["world_size"] == 2
    assert [r["rank"] for r in m["ranks"]] == [0, 1]
    for r in m["ranks"]:
        categories = {c["category"]: c["ms"] for c in r["categories"]}
        assert categories["communication"] > 0  # gloo's all-reduce of the gradients
        assert r["comm_ms"] > 0 and 0 <= r["comm_exposed_ms"] <= r["comm_ms"]
        assert r["compute_step_ms"] > 0 and r["layers"] and r["step_ms_uninstrumented"] > 0
        assert r["cuda_api"] is None and r["cuda_api_absent_reason"]
    slowest = max(m["ranks"], key=lambda r: r["step_ms_uninstrumented"])
    assert m["slowest_rank"] == slowest["rank"]
    assert m["step_ms_uninstrumented"] == slowest["step_ms_uninstrumented"]
    stored = sqlite3.connect(db).execute("select kind, metrics_json from micro").fetchall()
    assert [kind for kind, _ in stored] == ["profile"]
    assert len(json.loads(stored[0][1])["ranks"]) == 2


def test_one_device_count_per_profile(run_cli, tmp_path):
    code, _, err = run_cli(
        ["profile", "cifarnet", "--devices", "1,2", "--device", "cpu", "--db", tmp_path / "x.db"]
    )
    assert code == 2 and "one device count" in err
    assert not (tmp_path / "x.db").exists()


def test_two_nodes_profile_one_job_and_the_node_of_rank_0_stores_it(tmp_path):
    args = ["profile", "cifarnet", "-b", "4", "--image-size", "16", "--steps", "fixed:1:2"]
    args += ["--device", "cpu", "--nodes", "2", "--json"]
    args += ["--rdzv-endpoint", loopback_endpoint()]
    outputs = run_on_nodes(args, tmp_path)
    documents = [json.loads(out) for out, _ in outputs if out.strip()]
    assert len(documents) == 1  # the other node took part and says so on stderr
    m = documents[0]["metrics"]
    assert m["world_size"] == 2 and {r["rank"] for r in m["ranks"]} == {0, 1}
    assert any("took part" in err for _, err in outputs)
    stored = [
        sqlite3.connect(tmp_path / f"node{n}.db").execute("select count(*) from micro").fetchone()
        if (tmp_path / f"node{n}.db").exists()
        else (0,)
        for n in range(2)
    ]
    assert sorted(count for (count,) in stored) == [0, 1]
