import torch

from trainperf.case.outcome import is_out_of_memory
from trainperf.launch.worker import measure


def test_out_of_memory_is_recognised():
    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate"))
    assert is_out_of_memory(MemoryError())
    assert is_out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried"))
    assert not is_out_of_memory(RuntimeError("shape mismatch"))
    assert not is_out_of_memory(ValueError("out of memory"))  # only runtime errors by text


def test_exception_becomes_error_result():
    case = {"model": "inception_v3", "batch_size": 2, "image_size": 16, "device": "cpu"}
    result = measure(case)
    assert result["status"] == "error"
    assert result["case"] == case
    assert result["error"]["type"] == "SizeError" and result["error"]["traceback"]
    assert "image_size 16 is not accepted by inception_v3" in result["error"]["message"]
    assert result["metrics"] == {}


def test_every_document_kind_has_one_job():
    from trainperf.launch.worker import JOBS
    from trainperf.micro import KINDS

    assert set(JOBS) == {*KINDS, "profile", "train", "equivalence"}


def test_a_micro_document_runs_through_the_worker(tmp_path):
    from trainperf.launch.worker import run_document

    document = {"kind": "memory", "device": "cpu", "size_bytes": 1024, "warmup": 0, "iters": 1}
    result = run_document(document, tmp_path)
    assert result["status"] == "ok" and result["case"] == document
    assert result["metrics"]["rows"][0]["size_bytes"] == 1024


def test_an_unknown_document_kind_is_an_error_naming_the_valid_ones(tmp_path):
    from trainperf.launch.worker import run_document

    result = run_document({"kind": "gemv"}, tmp_path)
    assert result["status"] == "error" and result["case"] == {"kind": "gemv"}
    message = result["error"]["message"]
    assert message.startswith("unknown job kind 'gemv': allowed gemm, conv,")
    assert message.endswith("profile, train, equivalence")
