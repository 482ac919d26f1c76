"""The memory budget: what autograd saves, totals, fits, optimizers, the CPU measurement."""

import dataclasses

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from trainperf import models
from trainperf.models.attention import AttentionPlan
from trainperf.predict.memory import (
    GPU_CONTEXT_BYTES,
    WORKSPACE_FRACTION,
    FusedAttention,
    SavedTensors,
    ShapeCounts,
    memory_breakdown,
    saved_for_backward,
    shape_counts,
)
from trainperf.predict.memory_check import check_activations

B = 2  # batch of the hand-counted networks
CPU = AttentionPlan("cpu")
GPU = AttentionPlan("cuda")
H100_BF16 = AttentionPlan("cuda", sixteen_bit=True, capability=(9, 0))

SMALL = ShapeCounts(
    model="invented",
    size=8,
    params=1000,
    trainable_params=800,
    optimizer="sgd",
    activations=SavedTensors(elements=500, other_bytes=0),
    plan=GPU,
)
SMALL_CPU = dataclasses.replace(
    SMALL, activations=SavedTensors(elements=600, other_bytes=8), plan=CPU
)


def _meta(*shape: int, grad: bool = False) -> torch.Tensor:
    return torch.randn(*shape, device="meta", requires_grad=grad)


def test_mlp_saves_its_input_and_the_relu_output_once():
    with torch.device("meta"):
        net = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3))
    x, labels = _meta(B, 5), torch.zeros(B, dtype=torch.long, device="meta")
    # Linear 1 (addmm) saves its input x for the weight's gradient, not its weight (x needs
    # no gradient); ReLU saves its output, which Linear 2 saves too (one storage: once);
    # Linear 2 also saves its transposed weight, a parameter view: not an activation.
    assert saved_for_backward(net, lambda: net(x).sum()) == SavedTensors(B * (5 + 7), 0)
    # Cross-entropy adds log_softmax's output (B·3, saved again by nll_loss: once), the
    # int64 targets (8 B each) and nll_loss's total_weight scalar (1 element).
    loss = saved_for_backward(net, lambda: F.cross_entropy(net(x), labels))
    assert loss == SavedTensors(B * (5 + 7 + 3) + 1, B * 8)


class _Views(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 8)
        self.gain = nn.Parameter(torch.ones(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.linear(x)  # saves x: B·4
        y = h[:, :2] * h[:, 6:]  # saves two views of h: its one storage, whole, B·8
        return (y * self.gain).sum()  # saves y (B·2) and gain, a parameter: excluded


def test_views_of_one_storage_count_once_and_parameters_not_at_all():
    with torch.device("meta"):
        net = _Views()
    # Per tensor it would be 4 + 2 + 2 + 2 (+2 with the parameter); per view's storage twice
    # 4 + 8 + 8 + 2.
    assert saved_for_backward(net, lambda: net(_meta(B, 4))) == SavedTensors(B * (4 + 8 + 2), 0)


def test_fused_attention_saves_no_square_of_the_sequence():
    heads, seq, dim = 2, 32, 4
    q, k, v = (_meta(1, heads, seq, dim, grad=True) for _ in range(3))

    def attention() -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.1)

    with FusedAttention(GPU) as fused:
        gpu = saved_for_backward(nn.Module(), attention)
    # q, k, v, the output, one logsumexp per row (rows padded to 32), two int64 RNG scalars.
    assert gpu == SavedTensors(4 * heads * seq * dim + heads * seq, 16)
    assert fused.calls == 1
    # The math path (what a CPU with dropout runs) saves the probabilities, L² per head.
    with FusedAttention(CPU):
        cpu = saved_for_backward(nn.Module(), attention)
    assert cpu.elements > heads * seq * seq > gpu.elements


@pytest.mark.parametrize(
    ("plan", "kv_saved"),
    [
        (CPU, 2),  # the CPU's flash kernel takes the grouped heads as they are
        (H100_BF16, 2),  # so does FlashAttention on a GPU of compute capability 8.0+
        (AttentionPlan("cuda", sixteen_bit=False, capability=(9, 0)), 4),  # fp32: efficient
        (AttentionPlan("cuda", sixteen_bit=True, capability=(7, 0)), 4),  # V100: efficient
    ],
)
def test_grouped_heads_are_priced_as_the_kernel_that_will_run_takes_them(plan, kv_saved):
    """Llama's grouped-query attention: 4 query heads, 2 key/value heads. A kernel that
    needs equal heads gets them repeated (and saves them so); flash saves them grouped.
    Without dropout no plan runs the math path, whose L×L matrix would dominate."""
    heads, kv_heads, seq, dim = 4, 2, 32, 8
    q = _meta(1, heads, seq, dim, grad=True)
    k, v = (_meta(1, kv_heads, seq, dim, grad=True) for _ in range(2))

    def attention() -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    with FusedAttention(plan):
        saved = saved_for_backward(nn.Module(), attention)
    # q and the output (heads each), k and v (kv_saved heads each), the logsumexp per row
    expected = (2 * heads + 2 * kv_saved) * seq * dim + heads * seq
    assert saved.elements == expected < heads * seq * seq + expected


def test_zoo_counts_cached_and_attention_only_differs_for_transformers():
    cifarnet, gpt2_small = models.get("cifarnet"), models.get("gpt2-small")
    counts = shape_counts(cifarnet, 32)
    assert counts.params == counts.trainable_params == 89_578
    assert counts.optimizer == "sgd"
    assert counts.activations == shape_counts(cifarnet, 32, CPU).activations  # no attention
    assert shape_counts(cifarnet) is counts  # natural size, cached
    gpt2, gpt2_cpu = (
        shape_counts(gpt2_small, 64),
        shape_counts(gpt2_small, 64, CPU),
    )
    assert gpt2.optimizer == "adamw"
    # GPT-2 trains with dropout: a CPU runs the math path, and 12 layers of 12 heads keep
    # at least their 64x64 probabilities there.
    extra = gpt2_cpu.activations.elements - gpt2.activations.elements
    assert extra >= 12 * 12 * 64 * 64


def test_prediction_matches_what_the_cpu_holds_for_backward():
    # Measured and predicted are the same tensors (CifarNet has no batch norm, whose
    # per-channel statistics the count spreads over the batch); what else stays allocated
    # is the 4-byte loss, so 1% is room for a torch that saves one small tensor more.
    check = check_activations(models.get("cifarnet"), batch=4, size=32)
    assert check.measured_bytes == pytest.approx(check.predicted_bytes, rel=0.01)


def test_totals_add_up():
    m = memory_breakdown(SMALL, 16, "fp32", 1e12, devices=1)
    parts = 4 * 1000 + 4 * 800 + 4 * 800 + 0 + 16 * 500 * 4
    assert m.weights_bytes == 4000 and m.gradients_bytes == 3200 and m.optimizer_bytes == 3200
    assert m.ddp_buckets_bytes == 0 and m.activations_bytes == 32_000
    assert m.workspace_bytes == pytest.approx(WORKSPACE_FRACTION * parts)
    assert m.context_bytes == GPU_CONTEXT_BYTES
    assert m.total_bytes == pytest.approx(parts * (1 + WORKSPACE_FRACTION) + GPU_CONTEXT_BYTES)
    d = m.as_dict()
    assert sum(
        v
        for k, v in d.items()
        if k.endswith("_bytes") and k not in ("total_bytes", "available_bytes")
    ) == pytest.approx(m.total_bytes)


def test_ddp_buckets_cpu_activations_and_half_precision():
    m = memory_breakdown(SMALL_CPU, 16, "bf16", None, devices=4)
    assert m.ddp_buckets_bytes == 3200 and m.context_bytes == 0
    assert m.activations_bytes == 16 * (600 * 2 + 8)  # the CPU count; other bytes stay 8
    assert m.fits is None and m.available_bytes is None
    assert memory_breakdown(SMALL, 16, "bf16", None).activations_bytes == 16 * 500 * 2


def test_fits_flips_when_memory_shrinks():
    total = memory_breakdown(SMALL, 16, "fp32", None).total_bytes
    assert memory_breakdown(SMALL, 16, "fp32", total).fits is True
    assert memory_breakdown(SMALL, 16, "fp32", total - 1).fits is False


def test_adamw_needs_more_than_sgd():
    adamw = dataclasses.replace(SMALL, optimizer="adamw")
    sgd_m, adamw_m = (memory_breakdown(c, 16, "fp32", None) for c in (SMALL, adamw))
    assert adamw_m.optimizer_bytes == 8 * 800 == 2 * sgd_m.optimizer_bytes
    assert adamw_m.total_bytes > sgd_m.total_bytes


def test_more_batch_more_memory():
    totals = [memory_breakdown(SMALL, b, "fp16", None).total_bytes for b in (1, 2, 64)]
    assert totals == sorted(totals) and len(set(totals)) == 3


def test_unknown_optimizer_and_precision():
    with pytest.raises(ValueError, match="optimizer"):
        memory_breakdown(dataclasses.replace(SMALL, optimizer="lamb"), 1, "fp32", None)
    with pytest.raises(ValueError, match="precision"):
        memory_breakdown(SMALL, 1, "fp8", None)
