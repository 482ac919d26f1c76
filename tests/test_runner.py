"""The parent side of isolation: crashes and hangs of a child become results."""

import json

import psutil

from trainperf.case import make_case
from trainperf.runner import run_cases, run_in_child
from trainperf.store import Store


def test_abort_is_recorded_as_crashed(tmp_path, user_nets):
    case = make_case(model="flakynets:aborts", batch_size=2, image_size=8, steps="fixed:0:1")
    result = run_in_child(case, tmp_path)
    assert result["status"] == "crashed"
    assert "SIGABRT" in result["error"]["message"]
    assert result["case"] == case.model_dump()


def test_hang_is_killed_with_its_group(tmp_path, user_nets):
    case = make_case(model="flakynets:hangs", batch_size=2, image_size=8, timeout_s=4.0)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    result = run_in_child(case, tmp_path)
    assert result["status"] == "timeout"
    assert "no result after 4 s" in result["error"]["message"]
    after = {p.pid for p in psutil.Process().children(recursive=True)}
    assert after <= before


def test_every_result_is_stored_as_it_arrives(tmp_path, user_nets):
    cases = [
        make_case(model="flakynets:aborts", batch_size=2, image_size=8),
        make_case(model="cifarnet", batch_size=2, image_size=8, steps="fixed:0:2"),
    ]
    system = {"fingerprint": "f" * 16, "hostname": "h"}
    seen = []
    with Store(tmp_path / "r.db") as store:

        def on_result(index, result):
            # stored (and committed) before the next case starts
            seen.append([r["status"] for r in store.results()])

        results = run_cases(cases, store, system, on_result=on_result)
    assert [r["status"] for r in results] == ["crashed", "ok"]
    assert seen == [["crashed"], ["crashed", "ok"]]
    assert json.dumps(results)  # result documents stay JSON-serializable
