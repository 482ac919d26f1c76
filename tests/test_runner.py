"""The parent side of isolation: crashes and hangs of a child become results."""

import json

import psutil

from trainperf.case import make_case
from trainperf.runner import run_in_child
from trainperf.store import Store
from trainperf.sweep import SweepEvents, run_cases


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
        make_case(model="flakynets:aborts", batch_size=2, image_size=8, runs=1),
        make_case(model="cifarnet", batch_size=2, image_size=8, steps="fixed:0:2", runs=1),
    ]
    system = {"fingerprint": "f" * 16, "hostname": "h"}
    seen = []
    with Store(tmp_path / "r.db") as store:

        def on_result(index, result):
            # stored (and committed) before the next case starts
            seen.append((result["status"], [r["status"] for r in store.results()]))

        events = SweepEvents(on_result=on_result)
        results = run_cases(cases, store, system, events=events)
    assert [r["status"] for r in results] == ["crashed", "ok"]  # in the order given
    assert [len(stored) for _, stored in seen] == [1, 2]
    assert all(status == stored[-1] for status, stored in seen)
    assert json.dumps(results)  # result documents stay JSON-serializable
