"""Sweeps of cases in several runs: shuffled interleaving, adaptive runs, failures, resume.

The worker process is replaced by a fake that returns run documents at once (what happens
in real child processes is tested in test_sweep.py and test_runner.py); these tests are
about the order and the bookkeeping of runs."""

import random
import socket
import threading
import time

import pytest

from report_fixture import worker_ok_run
from trainperf.case.spec import make_case
from trainperf.launch import sweep as sweep_module
from trainperf.launch.runner import Interrupted
from trainperf.launch.sweep import SweepEvents, interleave, run_sweep
from trainperf.launch.sweep_items import SweepItem
from trainperf.store import lease
from trainperf.store.database import Store
from trainperf.store.lease import Owner

SYSTEM = {"fingerprint": "s" * 16, "hostname": "box"}
SUITE = ("grid", "v1")


class FakeWorker:
    """Stands in for ``run_in_child``: each call returns the next throughput of the case
    (by model name) as a run document, or a failure; it records the order of the calls."""

    def __init__(self, throughputs, fail=None, interrupt_after=None):
        self.throughputs = {k: list(v) for k, v in throughputs.items()}
        self.fail = fail or {}  # model -> (call number, status)
        self.interrupt_after = interrupt_after
        self.calls = []

    def __call__(self, case, workdir, stop=None, rendezvous=None):
        if self.interrupt_after is not None and len(self.calls) == self.interrupt_after:
            raise Interrupted(2)
        self.calls.append(case.model)
        number = self.calls.count(case.model)
        if self.fail.get(case.model, (None,))[0] == number:
            status = self.fail[case.model][1]
            error = {"type": status, "message": f"{status} in the fake", "stderr_tail": ""}
            return {
                "status": status,
                "case": case.model_dump(),
                "device": None,
                "metrics": {},
                "error": error,
                "result_schema": 1,
            }
        return worker_ok_run(case, self.throughputs[case.model].pop(0))


def item(model, runs, batch=8, key=True):
    case = make_case(model=model, batch_size=batch, image_size=32, runs=runs, steps="fixed:1:9")
    return SweepItem(case, f"{model}-{batch}" if key else None)


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "r.db") as opened:
        yield opened


def sweep(store, items, worker, monkeypatch, seed=1, **kwargs):
    monkeypatch.setattr(sweep_module, "run_in_child", worker)
    return run_sweep(items, store, SYSTEM, suite=SUITE, order_seed=seed, **kwargs)


def test_runs_interleave_in_rounds_in_a_seeded_random_order(store, monkeypatch):
    values = {m: [100.0] * 3 for m in ("cifarnet", "alexnet", "resnet18")}
    items = [item(m, 3) for m in values]
    first = FakeWorker(values)
    outcome = sweep(store, items, first, monkeypatch, seed=5)
    # Each round runs every case once: the cases interleave.
    rounds = [first.calls[i : i + 3] for i in range(0, 9, 3)]
    assert all(sorted(r) == sorted(values) for r in rounds)
    assert len({tuple(r) for r in rounds}) > 1 or rounds[0] != list(values)
    again = FakeWorker(values)
    sweep(store, items, again, monkeypatch, seed=5, fresh=True)
    assert again.calls == first.calls  # the same seed gives the same order
    assert [r["case"]["model"] for r in outcome.results] == list(values)  # plan order
    assert {s["order_seed"] for s in store.sweeps()} == {5}
    assert all(len(r["runs"]) == 3 for r in store.results())


def test_first_round_keeps_ascending_batches_of_one_setting():
    states = [
        sweep_module._CaseRuns(i, item("cifarnet", 1, batch=b), None)
        for i, b in enumerate([64, 8, 32, 16])
    ] + [sweep_module._CaseRuns(4, item("alexnet", 1, batch=4), None)]
    for seed in range(20):
        order = interleave(states, random.Random(seed), keep_batch_order=True)
        batches = [
            s.item.fields["batch_size"] for s in order if s.item.fields["model"] == "cifarnet"
        ]
        assert batches == [8, 16, 32, 64]
    shuffled = {
        tuple(s.index for s in interleave(states, random.Random(seed))) for seed in range(20)
    }
    assert len(shuffled) > 5


def test_adaptive_runs_stop_at_the_target_or_run_on_to_the_maximum(store, monkeypatch):
    worker = FakeWorker(
        {"cifarnet": [100.0, 100.2, 99.9, 500.0], "alexnet": [50.0, 80.0, 40.0, 70.0, 45.0]}
    )
    items = [item("cifarnet", "adaptive:0.02:5:1000"), item("alexnet", "adaptive:0.02:5:1000")]
    outcome = sweep(store, items, worker, monkeypatch)
    tight, loose = outcome.results
    assert tight["metrics"]["runs"] == 3 and tight["metrics"]["runs_stop_reason"] == "ci_target"
    assert loose["metrics"]["runs"] == 5 and loose["metrics"]["runs_stop_reason"] == "max_runs"
    assert loose["metrics"]["unstable"]  # its interval missed the target


def test_a_failed_run_ends_its_case_and_keeps_the_runs_before(store, monkeypatch):
    worker = FakeWorker({"cifarnet": [100.0] * 3}, fail={"cifarnet": (2, "crashed")})
    outcome = sweep(store, [item("cifarnet", 3)], worker, monkeypatch)
    (result,) = outcome.results
    assert result["status"] == "crashed" and worker.calls == ["cifarnet"] * 2
    assert result["error"]["message"] == "crashed in the fake (run 2; 1 earlier run ok)"
    (stored,) = store.results()
    assert [(r["run_number"], r["status"]) for r in stored["runs"]] == [(1, "ok"), (2, "crashed")]
    assert outcome.failed


def test_an_oom_skips_larger_batches_not_yet_run(store, monkeypatch):
    worker = FakeWorker({"cifarnet": [100.0] * 9}, fail={"cifarnet": (2, "oom")})
    items = [item("cifarnet", 1, batch=b) for b in (64, 8, 16)]
    outcome = sweep(store, items, worker, monkeypatch)
    by_batch = {r["case"]["batch_size"]: r["status"] for r in outcome.results}
    assert by_batch == {8: "ok", 16: "oom", 64: "skipped"}


def test_a_rerun_takes_the_stored_skips_instead_of_adding_more(store, monkeypatch):
    absent = "device 'cuda' is not available on this machine: available cpu"
    gpu = item("alexnet", 1)
    items = [item("cifarnet", 1), SweepItem(gpu.case, gpu.key, skip_reason=absent)]
    values = {"cifarnet": [100.0] * 3}
    first = sweep(store, items, FakeWorker(values), monkeypatch)
    again = sweep(store, items, FakeWorker(values), monkeypatch)
    fresh = sweep(store, items, FakeWorker(values), monkeypatch, fresh=True)
    skips = [r for r in store.results() if r["status"] == "skipped"]
    assert len(skips) == 1 and skips[0]["error"]["message"] == absent
    assert sorted(r["status"] for r in store.results()) == ["ok", "ok", "skipped"]  # --fresh: ok
    for outcome in (again, fresh):
        skipped = outcome.results[1]
        assert skipped["reused"] and skipped["id"] == first.results[1]["id"]
    other = [items[0], SweepItem(gpu.case, gpu.key, skip_reason="excluded by exclude[0]")]
    sweep(store, other, FakeWorker(values), monkeypatch)  # another reason: a new skip
    assert sum(r["status"] == "skipped" for r in store.results()) == 2


def test_a_rerun_takes_the_stored_skip_of_a_batch_above_an_oom(store, monkeypatch):
    items = [item("cifarnet", 1, batch=b) for b in (8, 16)]
    for _ in range(2):
        worker = FakeWorker({"cifarnet": []}, fail={"cifarnet": (1, "oom")})
        outcome = sweep(store, items, worker, monkeypatch)
        assert [r["status"] for r in outcome.results] == ["oom", "skipped"]
    statuses = [r["status"] for r in store.results()]
    assert statuses.count("oom") == 2 and statuses.count("skipped") == 1  # oom: tried again


def test_an_interrupted_sweep_resumes_with_the_runs_it_had(store, monkeypatch):
    values = {"cifarnet": [100.0, 101.0, 99.0], "alexnet": [50.0, 51.0, 49.0]}
    items = [item("cifarnet", 3), item("alexnet", 3)]
    cut = FakeWorker(values, interrupt_after=3)  # round 1 and one run of round 2
    outcome = sweep(store, items, cut, monkeypatch)
    assert outcome.interrupted == "SIGINT" and outcome.not_run == 2 and outcome.results == []
    assert len(store.runs()) == 3 and store.results() == []  # stored, waiting for their case
    done = sorted(cut.calls)
    rest = FakeWorker({m: v[done.count(m) :] for m, v in values.items()})
    resumed = sweep(store, items, rest, monkeypatch)
    assert sorted(rest.calls) == sorted(
        ["cifarnet"] * (3 - done.count("cifarnet")) + ["alexnet"] * (3 - done.count("alexnet"))
    )
    assert [r["metrics"]["runs"] for r in resumed.results] == [3, 3]
    for result, model in zip(resumed.results, values, strict=True):
        assert result["metrics"]["run_samples_per_s"] == pytest.approx(values[model])
    # A third sweep measures nothing: both cases are done.
    idle = FakeWorker({})
    third = sweep(store, items, idle, monkeypatch)
    assert idle.calls == [] and all(r["reused"] for r in third.results)


def test_events_tell_each_run_and_the_runs_left(store, monkeypatch):
    starts, runs = [], []
    events = SweepEvents(
        on_start=lambda index, it, number, left: starts.append((index, number, left)),
        on_run=lambda index, run: runs.append((index, run["run_number"])),
    )
    worker = FakeWorker({"cifarnet": [100.0] * 2, "alexnet": [50.0] * 2})
    sweep(store, [item("cifarnet", 2), item("alexnet", 2)], worker, monkeypatch, events=events)
    assert [left for *_, left in starts] == [4, 3, 2, 1]
    assert sorted(runs) == [(0, 1), (0, 2), (1, 1), (1, 2)]


# --- concurrent sweeps of one suite on one database (trainperf.store.lease) ---------------------


def test_two_sweeps_of_one_suite_at_once_measure_each_case_once(tmp_path, monkeypatch):
    monkeypatch.setattr(lease, "POLL_S", 0.01)
    models = ["cifarnet", "alexnet", "resnet18", "vgg11"]
    items = [item(m, 2) for m in models]
    fake, measured, lock = FakeWorker({m: [100.0] * 4 for m in models}), [], threading.Lock()

    def worker(case, workdir, stop=None, rendezvous=None):
        with lock:
            measured.append((threading.current_thread().name, case.model))
            run = fake(case, workdir)
        time.sleep(0.02)  # the other sweep runs meanwhile
        return run

    monkeypatch.setattr(sweep_module, "run_in_child", worker)
    outcomes = {}

    def one_sweep(name, seed):
        with Store(tmp_path / "shared.db") as store:
            outcomes[name] = run_sweep(items, store, SYSTEM, suite=SUITE, order_seed=seed)

    threads = [
        threading.Thread(target=one_sweep, args=(n, s), name=n) for n, s in [("a", 1), ("b", 2)]
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(outcomes) == ["a", "b"]
    by_case = {m: {name for name, model in measured if model == m} for m in models}
    assert all(len(names) == 1 for names in by_case.values()), by_case  # one sweep each
    assert len(measured) == 2 * len(models)  # each case its 2 runs, once
    for outcome in outcomes.values():
        assert [r["case"]["model"] for r in outcome.results] == models
        assert all(r["status"] == "ok" and len(r["runs"]) == 2 for r in outcome.results)
    with Store(tmp_path / "shared.db") as store:
        assert len(store.results()) == len(models)
        assert store.db.execute("SELECT count(*) FROM leases").fetchone()[0] == 0


def test_a_sweep_takes_over_the_case_of_a_sweep_that_died_with_its_runs(store, monkeypatch):
    values = {"cifarnet": [100.0, 101.0, 99.0]}
    first = FakeWorker(values, interrupt_after=1)
    sweep(store, [item("cifarnet", 3)], first, monkeypatch)
    dead = Owner("dead", socket.gethostname(), 2**22 + 17, 0.0)  # no such process
    store.claim((SYSTEM["fingerprint"], SUITE[1], "cifarnet-8"), dead)
    rest = FakeWorker({"cifarnet": values["cifarnet"][1:]})
    outcome = sweep(store, [item("cifarnet", 3)], rest, monkeypatch)
    assert rest.calls == ["cifarnet", "cifarnet"]  # the run stored before is kept
    assert outcome.results[0]["metrics"]["runs"] == 3
