"""Sharded data parallelism (FSDP2) in the predictor: the model split into blocks, the memory
per rank, the traffic and its schedule, activation checkpointing, the smallest device count,
and `trainperf predict --parallel fsdp` end to end; data parallelism (ddp) unchanged."""

import dataclasses
import importlib.util
import json
from pathlib import Path

import pytest
import torch
from predict_inputs import predict_ddp, predict_sharded
from torch import nn
from torch.nn import functional as F

from trainperf import models
from trainperf.case.suite import load as load_suite
from trainperf.models.attention import AttentionPlan
from trainperf.predict.catalog_file import load_catalog
from trainperf.predict.comm import (
    LinkCost,
    data_parallel_all_gather_s,
    data_parallel_reduce_scatter_s,
    ring_all_gather_s,
)
from trainperf.predict.compute import MEMORY_FRACTION
from trainperf.predict.fsdp import (
    Sharding,
    StepParts,
    fsdp_step,
    parameter_work,
    predict_fsdp,
    traffic_bytes,
)
from trainperf.predict.fsdp_search import SEARCH_BOUND, search_counts, smallest_devices
from trainperf.predict.inputs import FORWARD_SHARE, Measured, Placement, PredictError, Workload
from trainperf.predict.memory import (
    FusedAttention,
    SavedTensors,
    block_counts,
    saved_for_backward,
    sharded_memory,
)
from trainperf.predict.terms import BusBandwidthCurve

CATALOG = load_catalog()
H100, NVLINK, IB = CATALOG.device("h100-sxm"), CATALOG.link("nvlink4"), CATALOG.link("ib-ndr")
LINK = LinkCost(alpha_s=1e-5, beta_bytes_per_s=1e10)
DATA = Path(__file__).parent / "data"


DEFAULTS = Sharding()


def fsdp(model="llama-tiny", devices=(1, 8, 16), batch=2, sharding=DEFAULTS, **overrides):
    args = dict(per_node=8, intra=NVLINK, inter=IB, batch_size=batch, precision="bf16")
    return predict_sharded(
        model=model, device=H100, devices=list(devices), **(args | overrides), sharding=sharding
    )


def test_ddp_predictions_are_those_of_before_fsdp():
    # Pinned from the predictor before sharding was added (same catalog); since then, the
    # tied embedding's 154 MB of gradient reduced last in a bucket of its own (issue 33):
    # 591.1 and 4543.2 samples/s at 8 and 64 GPUs before it; then DDP's bucket copies (1.2
    # ms a step here, 0.5 GB of fp32 gradients in and out at 80% of 2,039 GB/s) with the
    # catalog's overhead refitted from 8.5 to 8.25 ms: 585.69 and 4056.69 before them;
    # then AdamW's step split out of the backward (6.1 ms: 80 B × 124 M parameters at 80%
    # of 2,039 GB/s) with the overhead refitted to 8.37 ms and the noise to 0.0254: 582.76
    # and 4039.18 before it; then 582.56 and 4039.08 before the forward's share of the
    # step came from the ops priced (41.6% here, not a third: on the math path the scale,
    # mask, softmax and dropout over the L² attention scores run in the forward, and their
    # gradients take as long; a shorter backward hides a little less).
    rows = predict_ddp(
        model="gpt2-small",
        device=CATALOG.device("a100-sxm4-80gb"),
        devices=[1, 8, 64],
        per_node=8,
        intra=CATALOG.link("nvlink3"),
        inter=CATALOG.link("ib-hdr"),
        batch_size=8,
        precision="bf16",
        noise=CATALOG.data_parallel.noise(),
        overhead=CATALOG.data_parallel.overhead(),
    )["rows"]
    assert [r["samples_per_s"] for r in rows] == pytest.approx(
        [83.34722754233952, 582.5249637328569, 4038.023747513609], rel=1e-9
    )
    # Memory: since the kernel that runs is priced, FlashAttention (A100, bf16) instead of
    # the memory-efficient kernel: its per-row logsumexp and RNG state, 422 bytes apart.
    assert rows[1]["memory"]["total_bytes"] == pytest.approx(7752034658.4, rel=1e-9)


def test_llama_tiny_splits_into_hand_counted_blocks_and_root():
    counts = block_counts(models.get("llama-tiny"), 256)
    # A block: wq, wo 64x64; wk, wv 64x32 (2 of 4 heads); w1, w2, w3 64x192; two norms.
    assert counts.blocks == 2 and counts.block_params == 2 * 4096 + 2 * 2048 + 3 * 12288 + 128
    assert counts.root_params == 2 * 512 * 64 + 64  # embedding, output, final norm
    assert counts.params == counts.root_params + 2 * counts.block_params
    assert 0.5 < counts.block_flops_share < 1
    # Checkpointing keeps less than the blocks save: full only their inputs, selective those
    # and the matmul and attention outputs.
    assert counts.block_inputs.elements < counts.selective_kept.elements
    assert counts.selective_kept.elements < counts.saved_in_blocks.elements
    assert counts.saved_in_largest_block.elements * 2 >= counts.saved_in_blocks.elements


def test_grouped_query_attention_goes_to_the_memory_efficient_kernel_repeated():
    heads, kv_heads, seq, dim = 4, 2, 64, 8
    q = torch.randn(1, heads, seq, dim, device="meta", requires_grad=True)
    k, v = (torch.randn(1, kv_heads, seq, dim, device="meta", requires_grad=True) for _ in "kv")

    def attention():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    with FusedAttention(AttentionPlan("cuda")) as fused:  # a GPU without flash, or fp32
        gpu = saved_for_backward(nn.Module(), attention)
    # q, the repeated k and v, the output (all with 4 heads), one logsumexp per row, and the
    # kernel's two int64 RNG scalars: no L x L term.
    assert fused.calls == 1
    assert gpu == SavedTensors(4 * heads * seq * dim + heads * seq, 16)
    assert saved_for_backward(nn.Module(), attention).elements > heads * seq * seq


def test_sharded_state_falls_as_one_over_the_ranks():
    counts = block_counts(models.get("llama-tiny"), 256)
    one, eight = (
        sharded_memory(counts, 2, "bf16", None, ranks=n, param_bytes=2, reduce_bytes=4)
        for n in (1, 8)
    )
    assert one.sharded_state_bytes == pytest.approx(8 * eight.sharded_state_bytes)
    assert one.sharded_state_bytes == (4 + 4 + 8) * counts.params  # fp32 + AdamW
    for part in ("gathered_params_bytes", "gathered_grads_bytes", "activations_bytes"):
        assert getattr(one, part) == getattr(eight, part), part
    assert one.gathered_params_bytes == 2 * (counts.root_params + 2 * counts.block_params)
    kept = sharded_memory(
        counts, 2, "bf16", None, ranks=8, param_bytes=2, reduce_bytes=4, reshard_after_forward=False
    )
    assert kept.gathered_params_bytes == 2 * counts.params


def test_traffic_is_three_times_the_parameter_bytes_but_the_roots():
    """ZeRO-3 moves 3Ψ (gather, gather again for the backward, reduce-scatter); FSDP2
    leaves the root gathered after its forward, so the root's parameters travel twice."""
    counts = block_counts(models.get("llama-tiny"), 256)
    p, root = counts.params, counts.root_params
    assert sum(traffic_bytes(counts, 2, 2, True).values()) == 3 * 2 * p - 2 * root
    assert sum(traffic_bytes(counts, 2, 2, False).values()) == 2 * 2 * p
    assert sum(traffic_bytes(counts, 2, 4, True).values()) == (2 + 2 + 4) * p - 2 * root
    (eight,) = fsdp(devices=[8], sharding=Sharding(fsdp_reduce="bf16"))["rows"]
    assert eight["comm_bytes_per_rank"] == pytest.approx((3 * 2 * p - 2 * root) * 7 / 8)
    # Below 1.5 times a DDP all-reduce of the same 16-bit gradients (2(N-1)/N x 2 bytes
    # each) by the root's second gather.
    ddp = 2 * 7 / 8 * 2 * p
    assert eight["comm_bytes_per_rank"] / ddp == pytest.approx(1.5 - root / (2 * p))


def test_all_gather_and_reduce_scatter_over_a_placement():
    assert data_parallel_all_gather_s(1e9, 1, 8, None, None) == (0.0, "none")
    assert data_parallel_all_gather_s(1e9, 4, 8, LINK, None) == (
        pytest.approx(ring_all_gather_s(1e9, 4, LINK)),
        "ring",
    )
    slow = LinkCost(alpha_s=2e-5, beta_bytes_per_s=4e10)
    t, algorithm = data_parallel_reduce_scatter_s(1e9, 32, 8, LINK, slow)
    # Across 4 nodes the 8 local ranks share the node's link; then inside the node.
    expected = ring_all_gather_s(1e9 / 8, 4, slow.shared(8)) + ring_all_gather_s(1e9, 8, LINK)
    assert t == pytest.approx(expected) and algorithm == "hierarchical/ring"
    curve = BusBandwidthCurve.from_rows([(4, 1e9, 5e9)])
    measured = LinkCost(1e-5, 1e10, curve)
    # Half the measured all-reduce: one of its two ring phases.
    assert data_parallel_all_gather_s(1e9, 4, 8, measured, None)[0] == pytest.approx(
        curve.allreduce_s(1e9, 4) / 2
    )


PARTS = StepParts(
    blocks=2,
    block_forward_s=1.0,
    block_backward_s=2.0,
    root_forward_s=0.5,
    root_backward_s=1.0,
    block_all_gather_s=0.25,
    root_all_gather_s=0.1,
    block_reduce_scatter_s=0.5,
    root_reduce_scatter_s=0.2,
)


def test_schedule_by_hand():
    # Forward: ag_R, ag_1 before block 1 (0.35 s exposed), ag_2 under block 1. Backward:
    # the root's at once (FSDP2 keeps the root gathered), ag_2 under it, ag_1 under block 2,
    # rs_2 under block 1, then rs_1 and rs_R after the backward (0.7 s).
    assert PARTS.compute_s == 7.5
    synced, comm = fsdp_step(PARTS)
    assert synced == pytest.approx(7.5 + 0.35 + 0.7) and comm == pytest.approx(2.3)
    kept = dataclasses.replace(PARTS, reshard_after_forward=False)
    synced, comm = fsdp_step(kept)
    assert synced == pytest.approx(7.5 + 0.35 + 0.7) and comm == pytest.approx(1.8)
    # A link slower than the compute: every block waits for its parameters.
    slow = dataclasses.replace(PARTS, block_all_gather_s=3.0, block_reduce_scatter_s=0.0)
    assert fsdp_step(slow)[0] > slow.compute_s + 3.0 * 2
    free = dataclasses.replace(
        PARTS,
        block_all_gather_s=0,
        root_all_gather_s=0,
        block_reduce_scatter_s=0,
        root_reduce_scatter_s=0,
    )
    assert fsdp_step(free) == (pytest.approx(7.5), 0.0)


def test_checkpointing_trades_activation_memory_for_compute():
    # 1024 tokens: the causal attention kernel is compute-bound there (at 256 every op of
    # so small a model is memory-bound, and selective recomputation costs what full does).
    rows = {
        mode: fsdp(devices=[1], sharding=Sharding(activation_checkpointing=mode), size=1024)[
            "rows"
        ][0]
        for mode in ("none", "selective", "full")
    }
    activations = {mode: row["memory"]["activations_bytes"] for mode, row in rows.items()}
    assert activations["none"] > activations["selective"] > activations["full"]
    compute = {mode: row["compute_s"] for mode, row in rows.items()}
    assert compute["none"] < compute["selective"] < compute["full"]
    assert rows["none"]["recompute_s"] == 0.0
    # Full: the blocks' forward once more, its share of their forward + backward the
    # priced ops' (not the third of the FLOP rule: the fused attention's backward and the
    # element-wise ops' are priced at their own rates).
    blocks = compute["none"] * block_counts(models.get("llama-tiny"), 1024).block_flops_share
    share = rows["full"]["forward_share"]
    assert share == rows["none"]["forward_share"] and abs(share - FORWARD_SHARE) > 0.01
    assert rows["full"]["recompute_s"] == pytest.approx(share * blocks)
    # MFU counts the model's FLOPs only: recomputation lowers it.
    assert rows["full"]["mfu"] < rows["none"]["mfu"]


def test_rows_scale_and_report_tokens_and_mfu():
    out = fsdp()
    one, eight, sixteen = out["rows"]
    assert one["comm_s"] == 0.0 and one["efficiency"] == 1.0
    assert eight["comm_s"] > 0 and sixteen["algorithm"] == "hierarchical/ring"
    assert one["efficiency"] >= eight["efficiency"] >= sixteen["efficiency"] > 0
    assert eight["tokens_per_s"] == pytest.approx(8 * eight["tokens_per_s_per_device"])
    assert eight["tokens_per_s_per_device"] == pytest.approx(
        256 * eight["samples_per_s_per_device"]
    )
    flops = out["inputs"]["model_flops_per_sample"]
    assert eight["mfu"] == pytest.approx(eight["samples_per_s_per_device"] * flops / 989e12)
    assert eight["memory"]["total_bytes"] < one["memory"]["total_bytes"]
    assert out["inputs"]["parallel"] == "fsdp" and out["inputs"]["param_bytes"] == 2


def test_bad_sharding_is_refused():
    with pytest.raises(PredictError, match="allowed none, full, selective"):
        Sharding(activation_checkpointing="some")
    with pytest.raises(PredictError, match="reduce bf16 needs precision bf16"):
        fsdp(precision="fp32", sharding=Sharding(fsdp_reduce="bf16"))
    with pytest.raises(PredictError, match="resnet50 has no repeated blocks"):
        fsdp(model="resnet50")


def test_search_visits_powers_of_two_then_whole_nodes():
    assert search_counts(8, 40) == [1, 2, 4, 8, 16, 24, 32, 40]
    assert search_counts(6, 18) == [1, 2, 4, 6, 12, 18]
    assert search_counts(1, 3) == [1, 2, 3]


def test_smallest_count_of_h100s_for_llama3_8b_at_8192_tokens():
    options = dict(param_bytes=2, reduce_bytes=4, checkpointing="full")
    llama = models.get("llama3-8b")
    counts = block_counts(llama, 8192, AttentionPlan("cuda", True, H100.capability))
    found = smallest_devices(llama, H100, 8, 1, "bf16", sharding=Sharding("full"))
    # The fp32 states alone (16 B x 8.03e9 parameters) outgrow one 80 GB device.
    assert found.smallest is not None and 1 < found.smallest <= 8
    at = sharded_memory(counts, 1, "bf16", H100.memory_bytes, ranks=found.smallest, **options)
    assert at.fits and found.memory == at
    below = search_counts(8)[search_counts(8).index(found.smallest) - 1]
    assert not sharded_memory(counts, 1, "bf16", H100.memory_bytes, ranks=below, **options).fits
    without = smallest_devices(llama, H100, 8, 1, "bf16")
    assert without.smallest > found.smallest  # no checkpointing: more devices


def test_no_count_fits_when_the_activations_alone_do_not():
    found = smallest_devices(models.get("llama3-8b"), H100, 8, 64, "bf16")
    assert found.smallest is None and found.counts_tried == len(search_counts(8))
    assert found.floor_bytes > H100.memory_bytes and found.bound == SEARCH_BOUND


TINY = "predict -m llama-tiny --device h100-sxm --intra nvlink4 --precision bf16 -b 2"


def test_cli_fsdp_json_and_table(run_cli):
    code, out, err = run_cli(TINY + " --devices 1,8 --parallel fsdp --json")
    assert code == 0, err
    doc = json.loads(out)
    row = doc["rows"][1]
    for key in ("tokens_per_s", "tokens_per_s_per_device", "mfu", "comm_exposed_s", "fits"):
        assert key in row, key
    for key in ("weights_bytes", "gathered_params_bytes", "activations_bytes", "total_bytes"):
        assert key in row["memory"], key
    inputs = doc["inputs"]
    assert inputs["activation_checkpointing"] == "none" and inputs["reshard_after_forward"]
    assert inputs["fsdp_reduce"] == "fp32" and inputs["parallel"] == "fsdp"
    code, out, err = run_cli(
        TINY + " --devices 1,8 --parallel fsdp --activation-checkpointing full"
    )
    assert code == 0, err
    assert "predicted FSDP" in out and "tokens/s" in out and "MFU" in out
    assert "full activation checkpointing" in " ".join(out.split())  # wrapped at 100
    code, out, err = run_cli(TINY + " --devices 1,8 --parallel fsdp --wide")
    assert code == 0, err
    assert "tokens/s/dev" in out and "gathered GiB" in out and "params ms" in out


@pytest.mark.parametrize(
    ("args", "above"),
    [
        # one device's whole optimizer step against 1/8 of it: a sharded rank is faster
        (
            "predict -m llama3.2-1b --device h100-sxm --intra nvlink4 --precision bf16 -b 2 "
            "--devices 1,8 --parallel fsdp --activation-checkpointing full",
            True,
        ),
        # microseconds of compute against the collectives' latency
        (TINY + " --devices 1,8 --parallel fsdp", False),
    ],
)
def test_table_says_why_an_efficiency_is_over_one_only_when_one_is(run_cli, args, above):
    code, out, err = run_cli(args + " --json")
    assert code == 0, err
    assert any(row["efficiency"] > 1 for row in json.loads(out)["rows"]) == above
    code, out, err = run_cli(args)
    assert code == 0, err
    assert ("efficiency over 100%" in " ".join(out.split())) == above


def test_cli_ddp_is_the_default(run_cli):
    _, default, _ = run_cli(TINY + " --devices 1,8 --json")
    code, explicit, err = run_cli(TINY + " --devices 1,8 --parallel ddp --json")
    assert code == 0, err
    assert json.loads(default)["rows"] == json.loads(explicit)["rows"]


def test_cli_devices_min(run_cli):
    code, out, err = run_cli(
        "predict -m llama3-8b --device h100-sxm --intra nvlink4 --precision bf16 -b 1 "
        "--parallel fsdp --activation-checkpointing full --devices min --json"
    )
    assert code == 0, err
    doc = json.loads(out)
    smallest = doc["search"]["smallest_devices"]
    assert [r["devices"] for r in doc["rows"]] == [smallest] and doc["rows"][0]["fits"]
    code, out, err = run_cli(TINY.replace("-b 2", "-b 1") + " --parallel fsdp --devices min")
    assert code == 0, err
    assert "smallest count that holds it: 1" in out
    code, out, err = run_cli(
        "predict -m llama3-8b --device h100-sxm --precision bf16 -b 64 --parallel fsdp "
        "--devices min"
    )
    assert code == 0, err
    assert f"no count of h100-sxm up to {SEARCH_BOUND} holds llama3-8b" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("--devices 8 --parallel fsdp --activation-checkpointing some", "'some' is not one of"),
        ("--devices 8 --activation-checkpointing full", "does not apply to --parallel ddp"),
        ("--devices 8 --no-reshard-after-forward", "does not apply to --parallel ddp"),
        ("--devices 8 --parallel fsdp --bucket-mb 50", "--bucket-mb does not apply to"),
        ("--devices 8 --parallel fsdp --grad-compression bf16", "--grad-compression does not"),
        ("--devices 8 --parallel fsdp --fsdp-reduce bf16 --precision fp32", "needs precision bf16"),
        ("--devices min", "--devices min needs --parallel fsdp"),
        ("--devices min --parallel fsdp --scaling strong", "use --scaling weak"),
        ("--devices 0 --parallel fsdp", "positive integers"),
        ("--devices 8 --parallel fsdp -m resnet50", "resnet50 has no repeated blocks"),
        ("--devices 16 --parallel fsdp", "an inter-node link is needed"),
    ],
)
def test_cli_bad_inputs_exit_2(run_cli, args, message):
    base = "predict -m llama-tiny --device h100-sxm --intra nvlink4 --precision bf16"
    code, out, err = run_cli(f"{base} {args}")
    assert code == 2, (out, err)
    assert message in err and len(err.strip().splitlines()) == 1 and out == ""


def test_cli_devices_min_needs_a_device(run_cli):
    code, out, err = run_cli("predict -m llama-tiny --parallel fsdp --devices min")
    assert code == 2 and out == ""
    assert "--devices min needs --device" in err and len(err.strip().splitlines()) == 1


def test_nics_per_node_carry_fsdp_traffic_across_nodes():
    one, eight = fsdp(devices=(1, 8, 32)), fsdp(devices=(1, 8, 32), nics_per_node=8)
    assert one == fsdp(devices=(1, 8, 32), nics_per_node=1)
    assert "nics_per_node" not in one["inputs"] and eight["inputs"]["nics_per_node"] == 8
    assert one["rows"][:2] == eight["rows"][:2]  # one node: no NIC in the way
    assert eight["rows"][2]["comm_s"] < one["rows"][2]["comm_s"]
    with pytest.raises(PredictError, match="NICs per node must be between 1 and the 8"):
        fsdp(nics_per_node=16)


def test_an_llm_step_from_its_operators_gives_each_gpu_generation_its_own_mfu():
    """Issue 33, item 7: GEMMs, fused attention and memory-bound work each at the device's
    own rate. One fraction of peak for every 16-bit GPU (the model before) gives A100 and
    H100 the same MFU to within the memory-bound share; the operator model gives the A100,
    whose GEMMs reach more of its peak and whose bandwidth is larger against its compute,
    a higher MFU, as the published runs show (docs/predict.md)."""
    from trainperf.predict.catalog_file import load_catalog

    catalog = load_catalog()
    spec = models.get("llama3.2-1b")
    mfu, sources = {}, {}
    for device, link in (("a100-sxm4-80gb", "nvlink3"), ("h100-sxm", "nvlink4")):
        placement = Placement(catalog.device(device), [8], 8, catalog.link(link), None)
        prediction = predict_fsdp(Workload(spec, 2, "bf16", size=2048), placement)
        mfu[device] = prediction["rows"][0]["mfu"]
        sources[device] = prediction["assumptions"][0]
        flat = predict_fsdp(
            Workload(spec, 2, "bf16", size=2048), placement, Measured(achieved_fraction=0.4)
        )
        assert flat["rows"][0]["mfu"] < 0.4  # one fraction: memory-bound work only lowers it
    assert mfu["a100-sxm4-80gb"] > 1.2 * mfu["h100-sxm"]
    for device, text in sources.items():
        rates = catalog.device(device).kernel_fractions("bf16")
        assert f"GEMMs at {rates['gemm']:.1%}" in text and "kernel rates" in text


def test_another_frameworks_selective_policy_recomputes_its_share_of_the_matmuls():
    """torchtitan's selective checkpointing also recomputes every second matmul: a share r
    of the blocks' forward GEMM time more than trainperf's selective mode; refused with
    another checkpointing mode or outside [0, 1]."""
    base = fsdp(devices=[1], sharding=Sharding(activation_checkpointing="selective"), size=1024)
    half = fsdp(
        devices=[1],
        sharding=Sharding(activation_checkpointing="selective", recomputed_matmul_share=0.5),
        size=1024,
    )
    extra = half["rows"][0]["recompute_s"] - base["rows"][0]["recompute_s"]
    assert extra > 0
    assert half["rows"][0]["compute_s"] == pytest.approx(base["rows"][0]["compute_s"] + extra)
    for bad, message in (
        (dict(activation_checkpointing="full", recomputed_matmul_share=0.5), "needs selective"),
        (dict(activation_checkpointing="selective", recomputed_matmul_share=1.5), "from 0 to 1"),
    ):
        with pytest.raises(PredictError, match=message):
            Sharding(**bad)


# -- work on the parameters (module doc 1b) ------------------------------------------------

RATE_ONE = 1 / MEMORY_FRACTION  # a bandwidth at which seconds equal bytes


@pytest.mark.parametrize("reshard", [True, False])
def test_parameter_work_counts_the_bytes_by_hand(reshard):
    counts = block_counts(models.get("llama-tiny"), 64)
    sharding = Sharding(reshard_after_forward=reshard)
    work = parameter_work(counts, 4, sharding, "bf16", RATE_ONE)
    block, root, blocks = counts.block_params, counts.root_params, counts.blocks
    gathers = 2 if reshard else 1
    # bf16 gathered (p = 2), fp32 reduced (r = 4): copy-out 2p = 4, copy-in p + r = 6.
    assert work.block_forward_s == pytest.approx(4 * block)
    assert work.block_backward_s == pytest.approx((4 * (gathers - 1) + 6) * block)
    assert work.root_forward_s == pytest.approx(4 * root)
    assert work.root_backward_s == pytest.approx(6 * root)
    cast = 6 * (blocks * block * gathers + root) / 4  # fp32 shard read, bf16 written
    adamw = 80 * counts.trainable_params / 4
    assert work.after_backward_s == pytest.approx(cast + adamw)
    assert work.optimizer_priced
    # Gradient accumulation: the optimizer once per 4 micro-batches, the casts every one.
    every = dataclasses.replace(sharding, micro_batches_per_step=4)
    accumulated = parameter_work(counts, 4, every, "bf16", RATE_ONE)
    assert accumulated.after_backward_s == pytest.approx(cast + adamw / 4)


def test_parameter_work_in_fp32_has_no_shard_cast():
    counts = block_counts(models.get("llama-tiny"), 64)
    work = parameter_work(counts, 2, Sharding(), "fp32", RATE_ONE)
    assert work.block_forward_s == pytest.approx(8 * counts.block_params)
    assert work.block_backward_s == pytest.approx((8 + 8) * counts.block_params)
    assert work.after_backward_s == pytest.approx(80 * counts.trainable_params / 2)


def test_rows_price_parameter_work_apart_from_the_operators():
    one = fsdp(devices=[1])["rows"][0]
    counts = block_counts(models.get("llama-tiny"), 256)
    work = parameter_work(counts, 1, DEFAULTS, "bf16", H100.memory_bytes_per_s)
    assert one["parameter_work_s"] == pytest.approx(work.total_s(counts.blocks))
    # One rank, nothing to wait for: the step is the operators, the work and the overhead.
    assert one["step_s"] == pytest.approx(
        one["compute_s"] + one["parameter_work_s"] + one["straggler_s"] + one["overhead_s"]
    )
    assert one["comm_exposed_s"] == pytest.approx(0.0, abs=1e-12)
    # A measured throughput already holds its optimizer and copies.
    measured = fsdp(devices=[1], single_device_throughput=50.0)["rows"][0]
    assert measured["parameter_work_s"] == 0.0


@pytest.mark.parametrize(
    ("parallel", "checkpointing", "small", "large", "recorded"),
    [
        ("none", "none", 2, 4, 0.0486),
        ("none", "full", 2, 8, 0.0507),
        ("fsdp", "none", 2, 4, 0.0562),
        ("fsdp", "full", 2, 8, 0.0597),
    ],
)
def test_one_h100s_fixed_step_cost_is_the_parameter_work(
    parallel, checkpointing, small, large, recorded
):
    # trainperf measured on one H100 (tests/predict/data): Llama 3.2 1B at 2048 tokens, the
    # step at two batches, plain and under FSDP2 on one rank. The part of the step that does
    # not grow with the batch (the line's value at batch 0) is what the model prices as work
    # on the parameters (AdamW, the casts, FSDP's copies): 48 ms, against 49-51 ms plain and
    # 56-60 ms under FSDP2, which on one rank also runs its all-gathers and reduce-scatters as
    # memory copies the model leaves to the link. A model of the operators alone has 0.
    runs = json.loads((DATA / "h100_llama32_1b_steps.json").read_text())["runs"]

    def measured(batch):
        steps = [
            r["step_s_median"]
            for r in runs
            if r["parallel"] == parallel
            and r["batch_size"] == batch
            and r["activation_checkpointing"] == checkpointing
        ]
        return sum(steps) / len(steps)

    def predicted(batch):
        return predict_sharded(
            model="llama3.2-1b",
            device=H100,
            devices=[1],
            per_node=8,
            batch_size=batch,
            precision="bf16",
            size=2048,
            sharding=Sharding(activation_checkpointing=checkpointing),
        )["rows"][0]["step_s"]

    def intercept(step):  # the step at batch 0 on the line through the two batches
        return (large * step(small) - small * step(large)) / (large - small)

    seen = intercept(measured)
    assert seen == pytest.approx(recorded, abs=0.0005)  # the data as recorded
    assert 0.75 * seen < intercept(predicted) < 1.05 * seen


def _llama_layers():
    """benchmarks/llama_layers.py, the module the H200 runs named as their model."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "llama_layers.py"
    spec = importlib.util.spec_from_file_location("llama_layers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_one_h200s_llama3_8b_blocks_against_the_model():
    # trainperf measured on one H200 (tests/predict/data): Llama 3 8B cut to 6 and 8 blocks,
    # one sequence of 8192 tokens, FSDP2 on one rank. The line through the two depths gives
    # one block of the 8B model's shapes: 27.5 ms without checkpointing, 35.8 ms with full
    # (+30%). The model, at the GEMM fraction fitted to published runs on many GPUs, prices
    # the block 17% dear and the recomputation at +25%: the fit carries what a step on many
    # GPUs loses (docs/predict.md, "Llama 3 8B's blocks on one H200").
    runs = json.loads((DATA / "h200_llama3_8b_blocks_steps.json").read_text())["runs"]
    assert {r["attention_backend"] for r in runs} == {"cudnn"}
    spec = _llama_layers().spec

    def measured(blocks, checkpointing):
        steps = [
            r["step_s_median"]
            for r in runs
            if r["blocks"] == blocks and r["activation_checkpointing"] == checkpointing
        ]
        assert len(steps) == 2
        return sum(steps) / len(steps)

    def predicted(blocks, checkpointing):
        return predict_sharded(
            model=spec(blocks),
            device=CATALOG.device("h200-sxm"),
            devices=[1],
            per_node=8,
            batch_size=1,
            precision="bf16",
            size=8192,
            sharding=Sharding(activation_checkpointing=checkpointing),
        )["rows"][0]["step_s"]

    def block(step, checkpointing):  # the slope of the line through 6 and 8 blocks
        return (step(8, checkpointing) - step(6, checkpointing)) / 2

    plain, full = block(measured, "none"), block(measured, "full")
    assert plain == pytest.approx(0.0275, abs=0.0005)  # the data as recorded
    assert full / plain == pytest.approx(1.30, abs=0.01)
    model_plain, model_full = block(predicted, "none"), block(predicted, "full")
    assert 1.0 < model_plain / plain < 1.25
    assert model_full / model_plain == pytest.approx(full / plain, abs=0.08)
    for blocks, checkpointing in (
        (6, "none"),
        (8, "none"),
        (6, "full"),
        (8, "full"),
        (8, "selective"),
    ):
        ratio = predicted(blocks, checkpointing) / measured(blocks, checkpointing)
        assert 1.0 < ratio < 1.2, (blocks, checkpointing, ratio)


def test_the_h200_runs_are_the_suite_in_benchmarks():
    # The data's models are the suite's, and each names a function of llama_layers.py that
    # builds the 8B model cut to the blocks the data says (the slope above divides by them).
    root = Path(__file__).resolve().parents[2]
    suite = load_suite(root / "benchmarks" / "llama8b_layers.yaml")
    planned = {p.fields["model"] for p in suite.planned}
    runs = json.loads((DATA / "h200_llama3_8b_blocks_steps.json").read_text())["runs"]
    assert {r["model"] for r in runs} == planned
    module = _llama_layers()
    for run in runs:
        function = getattr(module, run["model"].split(":")[1])
        with torch.device("meta"):
            net = function().factory()
        assert len(net.layers) == run["blocks"]


def test_a_power_limited_part_runs_its_forward_and_backward_that_much_slower():
    # torchtitan's H100s run at 500 W; the same HBM2e part kept 0.915 of its LLaMA 3 8B
    # training throughput there against 700 W (catalog source: Mayr et al. 2026, Table 4).
    limited = CATALOG.device("h100-sxm-96gb")
    assert limited.power_limit_throughput == pytest.approx(0.915)
    assert "2603.16164" in limited.sources["power_limit_throughput"]
    full = limited.model_copy(update={"power_limit_throughput": None})

    def row(device):
        return predict_sharded(
            model="llama3-8b",
            device=device,
            devices=[8],
            per_node=8,
            intra=NVLINK,
            batch_size=2,
            precision="bf16",
            size=8192,
            sharding=Sharding(activation_checkpointing="selective"),
        )

    slow, fast = row(limited), row(full)
    assert slow["rows"][0]["compute_s"] == pytest.approx(fast["rows"][0]["compute_s"] / 0.915)
    # The optimizer's step and FSDP's copies are left at full speed (memory-bound work the
    # measured ratio does not split out).
    assert slow["rows"][0]["parameter_work_s"] == pytest.approx(fast["rows"][0]["parameter_work_s"])
    said = [a for a in slow["assumptions"] if "power limit" in a]
    assert said and "500 W power limit at 91.5%" in said[0]
    assert not [a for a in fast["assumptions"] if "power limit" in a]


def test_a_power_limit_throughput_needs_its_source():
    entry = CATALOG.device("h100-sxm").model_dump()
    entry["power_limit_throughput"] = 0.9
    with pytest.raises(ValueError, match="no source for power_limit_throughput"):
        type(CATALOG.device("h100-sxm")).model_validate(entry)
