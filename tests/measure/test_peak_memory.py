"""Peak memory of a case, on every GPU it uses (CUDA memory statistics faked)."""

import torch

from trainperf.measure.memory import read_peak, reset_peak


def fake_stats(monkeypatch, allocated, reserved):
    reset = []
    monkeypatch.setattr(torch.cuda, "init", lambda: reset.append("init"))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda i: reset.append(i))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda i: allocated[i])
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda i: reserved[i])
    return reset


def test_data_parallel_peak_is_the_largest_gpu_with_each_kept(monkeypatch):
    reset = fake_stats(monkeypatch, {0: 500, 1: 300, 2: 200}, {0: 800, 1: 400, 2: 300})
    cuda = torch.device("cuda", 0)
    reset_peak(cuda, [0, 1, 2])
    peak = read_peak(cuda, [0, 1, 2])
    assert reset == ["init", 0, 1, 2]  # CUDA (and its allocator) started before the resets
    assert peak.mem_peak_bytes == 500 and peak.mem_reserved_peak_bytes == 800
    assert peak.mem_peak_bytes_per_device == [500, 300, 200]
    assert "max over devices" in peak.source


def test_one_gpu_reads_its_own_index(monkeypatch):
    fake_stats(monkeypatch, {0: 1, 3: 700}, {0: 1, 3: 900})
    peak = read_peak(torch.device("cuda", 3))
    assert peak.mem_peak_bytes == 700 and peak.mem_peak_bytes_per_device is None
