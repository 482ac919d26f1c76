"""The registry of micro-benchmark kinds: one name per kind, one entry point per module."""

import pytest

from trainperf import micro
from trainperf.cli.micro import micro as micro_group


def test_every_kind_has_a_module_with_the_entry_point_and_a_cli_verb():
    assert list(micro.KINDS) == ["gemm", "conv", "memory", "p2p", "collective"]
    for name in micro.KINDS:
        assert callable(micro.kind_module(name).run_document), name
    assert set(micro_group.commands) == set(micro.KINDS)


def test_an_unknown_kind_is_refused_with_the_valid_ones():
    message = "unknown micro-benchmark 'gemv': allowed gemm, conv, memory, p2p, collective"
    with pytest.raises(ValueError, match=message):
        micro.run_document({"kind": "gemv", "device": "cpu"}, None)


def test_memory_document_runs_with_its_own_timing_fields(tmp_path, monkeypatch):
    from trainperf.micro import memory

    seen = {}
    real = memory.run

    def spy(device, nbytes, *, warmup, iters):
        seen.update(device=device.type, nbytes=nbytes, warmup=warmup, iters=iters)
        return real(device, nbytes, warmup=warmup, iters=iters)

    monkeypatch.setattr(memory, "run", spy)
    document = {"kind": "memory", "device": "cpu", "size_bytes": 4096, "warmup": 0, "iters": 2}
    result = micro.run_document(document, tmp_path)
    assert seen == {"device": "cpu", "nbytes": 4096, "warmup": 0, "iters": 2}
    assert result["device"]["type"] == "cpu"
    (row,) = result["metrics"]["rows"]
    assert row["kind"] == "memory_copy" and row["size_bytes"] == 4096


def test_gemm_document_picks_its_shapes():
    from trainperf.micro import gemm

    square = gemm.document_shapes({"shapes": "square", "limit": 2}, "cpu")
    assert [s.M for s in square] == list(gemm.CPU_SQUARE_SIZES[:2])
    every = gemm.document_shapes({"shapes": "all", "limit": None}, "cpu")
    assert len(every) == 160 + len(gemm.CPU_SQUARE_SIZES)
    assert gemm.document_shapes({"shapes": "deepbench"}, "cuda") == gemm.deepbench_shapes()


def test_gemm_document_runs_end_to_end(tmp_path):
    document = {"kind": "gemm", "device": "cpu", "dtypes": ["fp32"], "shapes": "square"}
    document |= {"limit": 1, "flush": False, "warmup": 0, "iters": 1}
    result = micro.run_document(document, tmp_path)
    (row,) = result["metrics"]["rows"]
    assert row["status"] == "ok" and row["M"] == 128
    # One shape of the square sweep: its best is this run's, not the machine's maximum.
    assert result["metrics"]["best_of_run"]["fp32"]["shape"] == "M128 N128 K128 NN"
    assert result["metrics"]["max_achievable"] is None
    assert result["device"]["type"] == "cpu"


def test_only_a_full_gemm_sweep_gives_the_max_achievable():
    from trainperf.micro import gemm

    full = {"shapes": "square", "limit": None}
    assert gemm.partial_reason(full, "cpu") is None
    assert gemm.partial_reason(full | {"shapes": "all"}, "cuda") is None
    assert gemm.partial_reason(full | {"limit": 4}, "cpu") is None  # all 4 CPU squares
    assert gemm.partial_reason(full | {"limit": 4}, "cuda") == (
        "a partial sweep: --limit 4 measured 4 of 7 shapes"
    )
    assert "measured 162 of 164" in gemm.partial_reason({"shapes": "all", "limit": 162}, "cpu")
    assert "leaves out the square sweep" in gemm.partial_reason({"shapes": "deepbench"}, "cpu")


def test_conv_document_picks_a_model_or_deepbench():
    from trainperf.micro import conv

    (first,) = conv.document_shapes({"model": "resnet18", "batch_size": 2, "limit": 1})
    assert (first.N, first.C, first.K) == (2, 3, 64)
    assert conv.document_shapes({"model": None, "limit": 3}) == conv.deepbench_shapes()[:3]


def test_p2p_document_names_no_single_device(tmp_path, monkeypatch):
    from trainperf.micro import p2p

    monkeypatch.setattr(p2p, "run", lambda nbytes: {"status": "skipped", "asked": nbytes})
    result = micro.run_document({"kind": "p2p", "device": "cuda", "size_bytes": None}, tmp_path)
    assert result == {"device": None, "metrics": {"status": "skipped", "asked": p2p.DEFAULT_BYTES}}
