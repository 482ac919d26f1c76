"""The zoo's analytics cache: served only under the current key, never an error."""

from __future__ import annotations

import json

import pytest

from trainperf.analysis import zoo_cache

ROWS = [{"name": "tiny", "size": 32, "params": 7, "fwd_flops_per_sample": 1.5}]


@pytest.fixture
def counted(monkeypatch, tmp_path):
    """How many times the rows were computed, with the cache in a temporary folder."""
    monkeypatch.setenv("TRAINPERF_CACHE", str(tmp_path / "cache"))
    calls = []

    def compute():
        calls.append(1)
        return [dict(row) for row in ROWS]

    return calls, compute


def _files(tmp_path):
    return list((tmp_path / "cache" / "zoo-analytics").glob("*"))


def test_the_second_call_reads_the_first_ones_rows(counted, tmp_path):
    calls, compute = counted
    assert zoo_cache.cached(compute) == ROWS
    assert zoo_cache.cached(compute) == ROWS
    assert len(calls) == 1
    [file] = _files(tmp_path)
    assert file.name == f"{zoo_cache.cache_key()}.json"


def test_another_torch_version_is_another_key(counted, monkeypatch):
    calls, compute = counted
    zoo_cache.cached(compute)
    key = zoo_cache.cache_key()
    monkeypatch.setattr(zoo_cache, "version", lambda name: "0.0.1-other")
    assert zoo_cache.cache_key() != key
    assert zoo_cache.cached(compute) == ROWS
    assert len(calls) == 2


def test_the_key_covers_the_source(counted, monkeypatch):
    key = zoo_cache.cache_key()
    monkeypatch.setattr("trainperf.__version__", "9.9.9")
    assert zoo_cache.cache_key() != key


def test_a_file_holding_another_key_or_junk_is_recounted(counted, tmp_path):
    calls, compute = counted
    zoo_cache.cached(compute)
    [file] = _files(tmp_path)
    file.write_text(json.dumps({"key": "stale", "rows": [{"name": "old"}]}))
    assert zoo_cache.cached(compute) == ROWS
    file.write_text("{not json")
    assert zoo_cache.cached(compute) == ROWS
    assert len(calls) == 3


def test_an_unwritable_or_unknown_cache_only_counts(counted, monkeypatch, tmp_path):
    calls, compute = counted
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("TRAINPERF_CACHE", str(blocker))
    assert zoo_cache.cached(compute) == ROWS
    monkeypatch.setenv("TRAINPERF_CACHE", "~no_such_user_trainperf/x")
    assert zoo_cache.cached(compute) == ROWS
    monkeypatch.setattr(zoo_cache, "version", _no_torch)
    assert zoo_cache.cached(compute) == ROWS
    assert len(calls) == 3


def _no_torch(name):
    raise zoo_cache.PackageNotFoundError(name)
