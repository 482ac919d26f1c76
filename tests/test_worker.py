import torch

from trainperf.worker import is_out_of_memory, measure


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
