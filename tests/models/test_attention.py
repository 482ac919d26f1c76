"""Which attention kernel runs, a call shaped so that a fused one does, and the record of
the kernel that actually ran (issue "GPU truth, second pass", item 1)."""

import pytest
import torch
from torch.nn import functional as F

from trainperf import models
from trainperf.models import attention
from trainperf.models.attention import AttentionWatch, attend, kernel_for


@pytest.mark.parametrize(
    ("device", "dtype", "dropout", "capability", "kernel"),
    [
        ("cuda", torch.bfloat16, False, (9, 0), "flash"),  # H100
        ("cuda", torch.float16, True, (8, 0), "flash"),  # A100, dropout
        ("cuda", torch.float32, False, (9, 0), "efficient"),  # flash refuses fp32 (and TF32)
        ("cuda", torch.float16, False, (7, 0), "efficient"),  # V100: no flash
        ("cpu", torch.float32, False, None, "flash"),  # the CPU's flash kernel
        ("cpu", torch.bfloat16, True, None, "math"),  # dropout on a CPU
    ],
)
def test_the_kernel_pytorch_picks(device, dtype, dropout, capability, kernel):
    assert kernel_for(device, dtype, dropout=dropout, capability=capability) == kernel


def _qkv(heads=4, kv_heads=2, seq=16, dim=8):
    torch.manual_seed(0)
    q = torch.randn(1, heads, seq, dim)
    return q, torch.randn(1, kv_heads, seq, dim), torch.randn(1, kv_heads, seq, dim)


def test_grouped_heads_are_repeated_for_a_kernel_that_needs_equal_heads(monkeypatch):
    """On a GPU in fp32 the kernel that runs (memory-efficient) takes no grouped heads, and
    PyTorch would fall back to the math path (the whole L×L matrix: ~137 GB for a Llama 3
    8B layer at 8192 tokens). Faked here on the CPU: the plan says efficient, and the call
    that reaches SDPA has equal heads and no enable_gqa; the result is the same numbers."""
    q, k, v = _qkv()
    grouped = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    calls = []
    real = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append((args[1].shape[-3], kwargs.get("enable_gqa", False)))
        return real(*args, **kwargs)

    monkeypatch.setattr(attention, "kernel_for", lambda *a, **k: "efficient")
    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    repeated = attend(q, k, v, is_causal=True)
    assert calls == [(4, False)]
    torch.testing.assert_close(repeated, grouped)
    monkeypatch.setattr(attention, "kernel_for", lambda *a, **k: "flash")
    attend(q, k, v, is_causal=True)
    assert calls[-1] == (2, True)  # flash takes them grouped: nothing materialised


def test_the_watch_records_the_kernel_that_ran():
    q, k, v = _qkv()
    with AttentionWatch() as watch:
        F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)  # a CPU's math path
        torch.matmul(q, q.transpose(-1, -2))  # not attention: not looked into
    assert watch.kernels == ["flash", "math"]
    assert watch.metrics() == {"attention_backend": "flash, math"}
    assert AttentionWatch().metrics() == {}  # no attention call: nothing to record


def test_llama_runs_a_fused_kernel_on_this_cpu_in_every_precision():
    spec = models.get("llama-tiny")
    model = spec.build().train()
    ids, targets = spec.task.example_batch(2, 32, "cpu")
    for dtype in (None, torch.bfloat16):
        autocast = (
            torch.autocast("cpu", dtype=dtype) if dtype else torch.autocast("cpu", enabled=False)
        )
        with AttentionWatch() as watch, autocast:
            spec.loss(model(ids), targets).backward()
        assert watch.kernels == ["flash"] * 2  # one per layer, never the math path
