"""The fused attention kernels' speed by sequence length (predict.attention_kernels) and its
place in the FSDP prediction: the catalog's rate is FlashAttention-2's at 2,048 tokens; a
longer sequence runs faster, llm-foundry's Triton kernel at less than half the rate."""

import pytest

from trainperf import models
from trainperf.predict.attention_kernels import (
    ATTENTION_KERNELS,
    FIGURE_TOKENS,
    REFERENCE_TOKENS,
    attention_kernel_named,
)
from trainperf.predict.catalog_file import load_catalog
from trainperf.predict.fsdp import Sharding, predict_fsdp
from trainperf.predict.inputs import Placement, PredictError, Workload

FA2, TRITON = ATTENTION_KERNELS["flash-attention-2"], ATTENTION_KERNELS["flash-attention-triton"]


def test_flash_attention_2_is_the_catalog_rate_at_the_reference_length():
    assert FA2.relative(REFERENCE_TOKENS) == pytest.approx(1.0)


def test_the_figure_values_are_returned_at_the_measured_lengths():
    # Fig. 4(d): FlashAttention-2 173 and Triton 74 TFLOP/s at 4k, against 155 at 2k.
    assert FA2.relative(4096) == pytest.approx(173 / 155)
    assert TRITON.relative(2048) == pytest.approx(68 / 155)
    assert TRITON.relative(4096) == pytest.approx(74 / 155)


def test_interpolation_is_linear_in_log_length_and_held_beyond_the_figure():
    # 2,896 tokens is 2^11.5: half way between the 2k and 4k rates.
    assert FA2.relative(2896) == pytest.approx((155 + 173) / 2 / 155, rel=1e-3)
    assert FA2.relative(64) == FA2.relative(FIGURE_TOKENS[0])
    assert FA2.relative(131072) == FA2.relative(FIGURE_TOKENS[-1])


@pytest.mark.parametrize("tokens", [256, 512, 1000, 2048, 3000, 8192, 16384, 65536])
def test_every_kernel_rises_with_length_and_triton_stays_below_half_of_fa2(tokens):
    for kernel in ATTENTION_KERNELS.values():
        assert kernel.relative(tokens) <= kernel.relative(2 * tokens)
    assert TRITON.relative(tokens) < 0.52 * FA2.relative(tokens)


def test_an_unknown_kernel_is_refused_naming_the_allowed():
    with pytest.raises(PredictError, match="unknown attention kernel 'xformers': allowed "):
        attention_kernel_named("xformers")
    with pytest.raises(PredictError, match="flash-attention-triton"):
        Sharding(attention_kernel="flash-attention-3")


def _llama_on_h100(size, kernel="flash-attention-2"):
    catalog = load_catalog()
    placement = Placement(catalog.device("h100-sxm"), [8], 8, catalog.link("nvlink4"), None)
    workload = Workload(models.get("llama3.2-1b"), 2, "bf16", size=size)
    return predict_fsdp(workload, placement, sharding=Sharding(attention_kernel=kernel))


def test_the_slower_kernel_adds_exactly_its_attention_time():
    """Only the attention's rate changes: the step grows by the attention's time at the Triton
    rate less its time at FlashAttention-2's, the rest of the step unchanged."""
    fast, slow = _llama_on_h100(2048), _llama_on_h100(2048, "flash-attention-triton")
    assert slow["rows"][0]["compute_s"] > fast["rows"][0]["compute_s"]
    assert slow["rows"][0]["tokens_per_s_per_device"] < fast["rows"][0]["tokens_per_s_per_device"]
    assert "FlashAttention in Triton" in slow["assumptions"][0]
    assert slow["inputs"]["attention_kernel"] == "flash-attention-triton"
    # The same model with attention at the Triton rate through the catalog alone.
    catalog = load_catalog()
    device = catalog.device("h100-sxm")
    rate = device.attention_efficiency["bf16"] * TRITON.relative(2048)
    slowed = device.model_copy(
        update={"attention_efficiency": {**device.attention_efficiency, "bf16": rate}}
    )
    placement = Placement(slowed, [8], 8, catalog.link("nvlink4"), None)
    direct = predict_fsdp(Workload(models.get("llama3.2-1b"), 2, "bf16", size=2048), placement)
    assert slow["rows"][0]["step_s"] == pytest.approx(direct["rows"][0]["step_s"], rel=1e-9)


def test_a_longer_sequence_runs_its_attention_faster_per_flop():
    """At 8,192 tokens FlashAttention-2 runs at 182/155 of its 2k rate: the prediction says so,
    and prices the attention at that rate."""
    text = _llama_on_h100(8192)["assumptions"][0]
    assert f"at 8,192 tokens {182 / 155:.2f}×" in text
    rate = load_catalog().device("h100-sxm").attention_efficiency["bf16"] * 182 / 155
    assert f"fused attention at {rate:.1%}" in text
