"""Export -> import -> export is exact for every kind trainperf stores, and every output
is strict JSON (issue "Results that survive the trip", items 1 and 2)."""

import json

import pytest
from hypothesis import HealthCheck, given, settings

import store_kinds
from trainperf.core.strict_json import dumps, loads
from trainperf.store import exchange
from trainperf.store.database import Store


def _export(db) -> dict:
    with Store.copy_of(db) as store:
        document = exchange.export_document(store)
    return loads(dumps(document, indent=2))  # as the file holds it, read strictly


def _without_time(document: dict) -> dict:
    return {k: v for k, v in document.items() if k != "exported_at"}


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(recipe=store_kinds.recipes)
def test_export_import_export_is_exact(tmp_path_factory, recipe):
    folder = tmp_path_factory.mktemp("trip")
    first = _export(store_kinds.build(folder / "source.db", recipe))
    with Store(folder / "copy.db") as target:
        exchange.import_document(target, first)  # never refuses trainperf's own export
        again = exchange.import_document(target, _export(folder / "source.db"))
    assert sum(again.added.values()) == 0  # importing twice adds nothing
    second = _export(folder / "copy.db")
    assert _without_time(second) == _without_time(first)


@pytest.fixture(scope="module")
def full_store(tmp_path_factory):
    return store_kinds.build(tmp_path_factory.mktemp("full") / "kinds.db", store_kinds.FULL)


def test_the_full_store_holds_every_kind(full_store):
    with Store.copy_of(full_store) as store:
        statuses = {r["status"] for r in store.results()}
        modes = {(r["case"]["parallel"], r["case"]["framework"]) for r in store.results()}
        micro = {m["kind"] for m in store.micro()}
        assert statuses == {"ok", "oom", "timeout", "crashed", "error", "diverged", "skipped"}
        assert {("ddp", "pytorch"), ("dp", "pytorch"), ("fsdp", "pytorch")} <= modes
        assert ("auto", "jax") in modes
        assert micro == {"gemm", "conv", "collective", "memory", "profile", "p2p"}
        assert store.max_batches() and store.train_runs()
        short = [r for r in store.results() if r["status"] == "ok" and r["metrics"]["runs"] < 3]
        one_step = [run["metrics"] for r in short for run in r["runs"]]
        one_step = [m for m in one_step if len(m["step_s"]) == 1]
        assert one_step and all(m["samples_per_s_ci95"] is None for m in one_step)
        assert all("only 1 measured step:" in m["ci95_absent_reason"] for m in one_step)


def test_an_old_export_holding_infinity_imports_with_the_reason(full_store, tmp_path):
    """Files of format 3 could hold Infinity (the per-run interval of a 2-step run): they
    import, the number null and its reason beside it."""
    document = _export(full_store)
    document["format_version"] = 3
    run = document["runs"][0]
    run["metrics"]["ci95_relative"] = float("inf")
    file = tmp_path / "old.json"
    file.write_text(json.dumps(document))  # Python writes Infinity
    assert "Infinity" in file.read_text()
    with Store(tmp_path / "new.db") as store:
        exchange.import_document(store, exchange.read_file(file))
        stored = next(r for r in store.runs() if r["uid"] == run["uid"])
    assert stored["metrics"]["ci95_relative"] is None
    assert "not a finite number" in stored["metrics"]["ci95_relative_absent_reason"]
