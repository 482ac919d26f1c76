"""The memory budget: activation counting, totals, fits, optimizers."""

import dataclasses

import pytest

from trainperf.predict.memory import (
    GPU_CONTEXT_BYTES,
    WORKSPACE_FRACTION,
    ShapeCounts,
    memory_breakdown,
    shape_counts,
)

# CifarNet at 32x32, leaf outputs per sample: input 3·32², conv1 32·32², maxpool 32·16²
# (its in-place ReLU is the same tensor: counted once), LRN 32·16², conv2 32·16², avgpool
# 32·8², LRN 32·8², conv3 64·8², avgpool 64·4², adaptive pool 64·4², linear 10.
CIFARNET_ELEMENTS = 3072 + 32768 + 8192 * 3 + 2048 * 2 + 4096 + 1024 * 2 + 10

SMALL = ShapeCounts(
    model="invented",
    size=8,
    params=1000,
    trainable_params=800,
    optimizer="sgd",
    activation_elements_per_sample=500.0,
)


def test_cifarnet_counts():
    counts = shape_counts("cifarnet", 32)
    assert counts.params == counts.trainable_params == 89_578
    assert counts.activation_elements_per_sample == CIFARNET_ELEMENTS
    assert counts.optimizer == "sgd"
    assert shape_counts("cifarnet") is counts  # natural size, cached


def test_totals_add_up():
    m = memory_breakdown(SMALL, 16, "fp32", 1e12, devices=1, gpu=True)
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


def test_ddp_buckets_cpu_and_half_precision_activations():
    m = memory_breakdown(SMALL, 16, "bf16", None, devices=4, gpu=False)
    assert m.ddp_buckets_bytes == 3200 and m.context_bytes == 0
    assert m.activations_bytes == 16 * 500 * 2
    assert m.fits is None and m.available_bytes is None


def test_fits_flips_when_memory_shrinks():
    total = memory_breakdown(SMALL, 16, "fp32", None).total_bytes
    assert memory_breakdown(SMALL, 16, "fp32", total).fits is True
    assert memory_breakdown(SMALL, 16, "fp32", total - 1).fits is False


def test_adamw_needs_more_than_sgd():
    adamw = dataclasses.replace(SMALL, optimizer="adamw")
    sgd_m, adamw_m = (memory_breakdown(c, 16, "fp32", None) for c in (SMALL, adamw))
    assert adamw_m.optimizer_bytes == 8 * 800 == 2 * sgd_m.optimizer_bytes
    assert adamw_m.total_bytes > sgd_m.total_bytes
    assert shape_counts("gpt2-small", 16).optimizer == "adamw"


def test_more_batch_more_memory():
    totals = [memory_breakdown(SMALL, b, "fp16", None).total_bytes for b in (1, 2, 64)]
    assert totals == sorted(totals) and len(set(totals)) == 3


def test_unknown_optimizer_and_precision():
    with pytest.raises(ValueError, match="optimizer"):
        memory_breakdown(dataclasses.replace(SMALL, optimizer="lamb"), 1, "fp32", None)
    with pytest.raises(ValueError, match="precision"):
        memory_breakdown(SMALL, 1, "fp8", None)
