"""The performance model with hand-made devices and links: formulas, limits, monotonicity."""

import itertools
from dataclasses import dataclass, field

import pytest
from predict_inputs import predict_ddp

from trainperf import models
from trainperf.predict.comm import LinkCost, data_parallel_allreduce_s
from trainperf.predict.compute import MEMORY_FRACTION
from trainperf.predict.inputs import PredictError
from trainperf.predict.overlap import ddp_step
from trainperf.predict.roofline import op_profile, roofline_seconds_per_sample

GIB = 2**30


@dataclass(frozen=True)
class Device:
    id: str = "gpu-x"
    name: str = "GPU X"
    kind: str = "gpu"
    memory_bytes: float = 16 * GIB
    memory_bytes_per_s: float = 900e9
    peaks: dict = field(default_factory=lambda: {"fp32": 15e12, "fp16": 120e12})
    fractions: dict = field(default_factory=lambda: {"fp32": 0.5, "fp16": 0.3})

    def peak_flops(self, precision):
        return self.peaks.get(precision)

    def efficiency(self, precision):
        return self.fractions.get(precision)


@dataclass(frozen=True)
class Link:
    id: str
    scope: str
    bytes_per_s: float
    latency_s: float


INTRA = Link("fast", "intra", 1.3e11, 5e-6)
INTER = Link("slow", "inter", 1.2e10, 5e-6)
COUNTS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]


def run(**overrides):
    args = dict(
        model="cifarnet",
        device=Device(),
        devices=[1, 2, 8, 16],
        per_node=8,
        intra=INTRA,
        inter=INTER,
        batch_size=32,
        precision="fp32",
    )
    return predict_ddp(**(args | overrides))


def _default_roofline():
    """The roofline ``run()`` prices: cifarnet b32 on ``Device()`` in fp32."""
    return roofline_seconds_per_sample(
        op_profile(models.get("cifarnet"), 32),
        15e12,
        900e9,
        compute_fraction=0.5,
        memory_fraction=MEMORY_FRACTION,
        winograd=True,
        batch=32,
    )  # a GPU in fp32: cuDNN's Winograd for 3x3 convolutions (cifarnet has 5x5: none)


def test_compute_from_the_roofline_of_peak_fraction_and_bandwidth():
    (one,) = run(devices=[1])["rows"]
    expected = _default_roofline()
    assert one["compute_s"] == pytest.approx(32 * expected.seconds_per_sample, rel=1e-12)
    (given,) = run(devices=[1], achieved_fraction=0.25)["rows"]
    # Half the fraction doubles the compute-bound ops only, not the memory-bound ones.
    assert one["compute_s"] < given["compute_s"] < 2 * one["compute_s"]
    assert one["comm_s"] == one["comm_exposed_s"] == one["comm_fraction"] == 0.0
    assert one["efficiency"] == 1.0 and one["algorithm"] == "none"
    assert one["samples_per_s"] == pytest.approx(32 / one["compute_s"])


def test_forward_and_backward_split_by_the_priced_ops_else_by_flops():
    # Priced op by op, the forward's share of forward + backward is its ops' time (cifarnet's
    # first convolution has no input gradient to compute: above a third); a measured step has
    # no split, so the FLOP rule's third, and the assumptions say which.
    priced = run(devices=[1, 4])
    expected = _default_roofline().forward_share
    assert [r["forward_share"] for r in priced["rows"]] == pytest.approx([expected] * 2)
    assert expected > 0.34
    assert f"forward {expected:.1%} of forward + backward" in priced["assumptions"][0]
    measured = run(devices=[1, 4], single_device_throughput=400.0)
    assert [r["forward_share"] for r in measured["rows"]] == [1 / 3, 1 / 3]
    assert "forward:backward = 1:2" in measured["assumptions"][0]


def test_compute_from_single_device_throughput():
    out = run(devices=[1, 4], single_device_throughput=400.0)
    one, four = out["rows"]
    assert one["compute_s"] == pytest.approx(32 / 400) == four["compute_s"]
    assert four["step_s"] >= four["compute_s"] and four["comm_s"] > 0
    assert four["comm_exposed_s"] == pytest.approx(four["step_s"] - four["compute_s"])
    assert four["efficiency"] == pytest.approx(four["compute_s"] / four["step_s"])
    assert "one device trains 400 samples/s" in out["assumptions"][0]


def test_ddp_overlap_schedule():
    # backward 2 s, two equal buckets ready at 1 + 1 and 1 + 2 s
    assert ddp_step(1.0, 2.0, [100, 100], lambda n: 0.5) == (3.5, 1.0)
    assert ddp_step(1.0, 2.0, [100, 100], lambda n: 2.0) == (6.0, 4.0)  # queued
    # unequal buckets: ready by bytes produced (3/4 then all of the backward)
    assert ddp_step(0.0, 4.0, [300, 100], lambda n: 0.1) == (pytest.approx(4.1), 0.2)
    assert ddp_step(1.0, 2.0, [], lambda n: 9.9) == (3.0, 0.0)


def test_bucket_copies_out_follow_each_all_reduce_after_the_backward():
    # buckets reduced by 2.5 and 3.5 s, the backward over at 3 s: 0.2 s of copying each,
    # the first after the backward (3.2), the second after its all-reduce (3.7)
    assert ddp_step(1.0, 2.0, [100, 100], lambda n: 0.5, copy_out=0.4) == (
        pytest.approx(3.7),
        1.0,
    )
    # all-reduces done within the backward: both copies after it
    assert ddp_step(1.0, 2.0, [100, 100], lambda n: 0.1, copy_out=0.4)[0] == pytest.approx(3.4)
    # one device, nothing to copy: a prediction on 1 device has none, 2 devices do
    one, two = run(devices=[1, 2], single_device_throughput=1000.0)["rows"]
    assert one["bucket_copy_s"] == 0 and two["bucket_copy_s"] > 0


def test_step_matches_the_schedule_by_hand():
    out = run(devices=[16], single_device_throughput=1000.0, bucket_mb=0.1)
    (row,) = out["rows"]
    grad = out["inputs"]["grad_bytes"]
    bucket = 0.1 * 2**20
    sizes = [bucket] * int(grad // bucket) + [grad % bucket]
    links = LinkCost.of(INTRA), LinkCost.of(INTER)
    t_c = 32 / 1000
    # DDP's copy of the fp32 gradients into its buckets and one back out: read and write
    params = out["inputs"]["trainable_params"]
    copy = 2 * params * 4 / (900e9 * MEMORY_FRACTION)
    t_opt = 32 * params / (900e9 * MEMORY_FRACTION)  # SGD with momentum, after the sync
    synced, comm = ddp_step(
        (t_c - t_opt) / 3,
        2 * (t_c - t_opt) / 3 + copy,
        sizes,
        lambda n: data_parallel_allreduce_s(n, 16, 8, *links)[0],
        copy_out=copy,
    )
    step = synced + t_opt
    assert row["step_s"] == pytest.approx(step) and row["comm_s"] == pytest.approx(comm)
    assert row["optimizer_s"] == pytest.approx(t_opt)
    assert row["bucket_copy_s"] == pytest.approx(2 * copy)
    assert out["inputs"]["buckets"] == len(sizes) and row["nodes"] == 2
    assert row["algorithm"].startswith("hierarchical/")


def test_the_optimizer_step_waits_for_the_all_reduces():
    # Memory at 1 GB/s: cifarnet's SGD step (32 B × 89,578 parameters) takes 3.6 ms of the
    # 32 ms step. Split out of the backward, it no longer hides all-reduces: on a link slow
    # enough for them to trail the backward (36 ms of them here), the step grows by about
    # half of it (the forward shrinks too, and the buckets are ready earlier), where a model
    # that lets them overlap the optimizer (the schedule before) does not.
    slow, link = Device(memory_bytes_per_s=1e9), Link("thin", "intra", 1e7, 5e-6)
    out = run(
        device=slow, devices=[1, 2], intra=link, single_device_throughput=1000.0, bucket_mb=0.1
    )
    one, two = out["rows"]
    rate = 1e9 * MEMORY_FRACTION
    t_c, t_opt = 0.032, 32 * 89_578 / rate
    copy = 2 * 4 * 89_578 / rate
    assert one["optimizer_s"] == pytest.approx(t_opt) == two["optimizer_s"]
    assert one["compute_s"] == pytest.approx(t_c) == two["compute_s"]
    assert one["step_s"] == pytest.approx(t_c)  # one device: its measured step, as before
    grad, bucket = out["inputs"]["grad_bytes"], 0.1 * 2**20
    sizes = [bucket] * int(grad // bucket) + [grad % bucket]

    def allreduce(n):
        return data_parallel_allreduce_s(n, 2, 8, LinkCost.of(link), None)[0]

    split, _ = ddp_step(
        (t_c - t_opt) / 3, 2 * (t_c - t_opt) / 3 + copy, sizes, allreduce, copy_out=copy
    )
    assert two["step_s"] == pytest.approx(split + t_opt + two["straggler_s"] + two["overhead_s"])
    before, _ = ddp_step(t_c / 3, 2 * t_c / 3 + copy, sizes, allreduce, copy_out=copy)
    assert split + t_opt > before + 0.4 * t_opt
    # An estimate above half of a measured step is held to half of it.
    (capped,) = run(
        device=Device(memory_bytes_per_s=1e6), devices=[2], single_device_throughput=1000.0
    )["rows"]
    assert capped["optimizer_s"] == pytest.approx(0.016)


def test_mixed_precision_keeps_fp32_gradients_unless_a_hook_compresses_them():
    fp32, amp = (run(precision=p)["inputs"]["grad_bytes"] for p in ("fp32", "fp16"))
    hooked = run(precision="fp16", grad_compression="fp16")["inputs"]["grad_bytes"]
    assert fp32 == amp == 4 * 89_578 == 2 * hooked
    with pytest.raises(PredictError, match="allowed none, fp16, bf16"):
        run(grad_compression="int8")


def test_weak_scaling_efficiency_never_exceeds_one():
    for intra_beta, inter_beta, per_node in itertools.product(
        (1e9, 1e11), (1e9, 2.5e10), (1, 4, 8)
    ):
        intra = Link("a", "intra", intra_beta, 3e-6)
        inter = Link("b", "inter", inter_beta, 8e-6)
        out = run(devices=COUNTS, per_node=per_node, intra=intra, inter=inter)
        for row in out["rows"]:
            assert row["efficiency"] <= 1 + 1e-12
            assert row["step_s"] >= row["compute_s"]
            assert 0 <= row["comm_fraction"] < 1
        efficiencies = [row["efficiency"] for row in out["rows"]]
        assert all(b <= a + 1e-12 for a, b in itertools.pairwise(efficiencies))


def test_every_device_count_up_to_1024():
    """Each count from 1 to 1024 that the placement allows, with several buckets."""
    for per_node in (1, 8):
        counts = [c for c in range(1, 1025) if c <= per_node or c % per_node == 0]
        out = run(
            model="resnet18",
            size=64,
            devices=counts,
            per_node=per_node,
            single_device_throughput=3000.0,
            bucket_mb=5,
        )
        # 11.7 M fp32 gradients: DDP's 1 MiB first bucket, 8 of 5 MiB, the remainder
        assert out["inputs"]["buckets"] == 10 and len(out["rows"]) == len(counts)
        for row in out["rows"]:
            assert row["efficiency"] <= 1 + 1e-12 and row["step_s"] >= row["compute_s"]


def test_more_bandwidth_is_never_slower():
    for scope in ("intra", "inter"):
        steps = []
        for beta in (1e9, 5e9, 2e10, 1e11, 1e12):
            links = {"intra": INTRA, "inter": INTER} | {scope: Link("x", scope, beta, 5e-6)}
            out = run(devices=COUNTS, **links)
            steps.append([row["step_s"] for row in out["rows"]])
        for slower, faster in itertools.pairwise(steps):
            assert all(f <= s * (1 + 1e-12) for s, f in zip(slower, faster, strict=True))


def test_more_parameters_never_mean_less_communication():
    comm = []
    for model in ("cifarnet", "resnet18", "resnet50", "vgg16"):
        out = run(model=model, size=64, devices=[64], single_device_throughput=100.0)
        comm.append((out["inputs"]["trainable_params"], out["rows"][0]["comm_s"]))
    comm.sort()
    assert all(b[1] >= a[1] for a, b in itertools.pairwise(comm))


def test_strong_scaling_splits_the_batch():
    out = run(devices=[1, 2, 4, 8], batch_size=64, scaling="strong")
    rows = {r["devices"]: r for r in out["rows"]}
    assert [rows[c]["device_batch"] for c in (1, 2, 4, 8)] == [64, 32, 16, 8]
    assert all(r["global_batch"] == 64 for r in rows.values())
    # An eighth of the batch takes a little more than an eighth of the time: the weights'
    # traffic of each op is paid per step, whatever the batch (the roofline's fixed part).
    assert rows[1]["compute_s"] / 8 < rows[8]["compute_s"] < 1.01 * rows[1]["compute_s"] / 8
    assert all(r["efficiency"] <= 1 + 1e-12 for r in rows.values())
    with pytest.raises(PredictError, match="does not split evenly over 3"):
        run(devices=[3], per_node=4, batch_size=64, scaling="strong")
    with pytest.raises(PredictError, match="fewer than 1 sample"):
        run(devices=[16], batch_size=8, scaling="strong")


def test_strong_baseline_on_one_device_may_not_fit():
    args = dict(model="resnet18", size=64, devices=[8], batch_size=512, scaling="strong")
    free = run(**args)
    need_8 = free["rows"][0]["memory"]["total_bytes"]
    tight = run(**args, device=Device(memory_bytes=need_8))
    assert tight["rows"][0]["fits"] is True
    assert tight["inputs"]["baseline"] == free["inputs"]["baseline"] | {"fits": False}
    assert tight["inputs"]["baseline"]["device_batch"] == 512
    assert tight["rows"][0]["efficiency"] == free["rows"][0]["efficiency"] <= 1


def test_bad_inputs():
    cases = [
        (dict(devices=[12]), "not a whole number of nodes"),
        (dict(devices=[16], inter=None), "inter-node link is needed"),
        (dict(devices=[4], intra=None), "intra-node link is needed"),
        (dict(intra=INTER), "slow is an inter-node link"),
        (dict(inter=INTRA), "fast is an intra-node link"),
        (dict(precision="bf16"), "gpu-x has no bf16 peak: allowed fp32, fp16"),
        (dict(precision="fp8"), "unknown precision"),
        (dict(device=Device(fractions={})), "no default achieved fraction"),
        (dict(achieved_fraction=1.5), "achieved fraction"),
        (dict(scaling="sideways"), "unknown scaling"),
        (dict(devices=[0]), "positive integers"),
        (dict(bucket_mb=0), "bucket size"),
        (dict(nics_per_node=0), "NICs per node must be between 1 and the 8"),
        (dict(nics_per_node=9), "NICs per node must be between 1 and the 8 devices per node"),
        (dict(nics_per_node=2.0), "NICs per node must be a positive integer"),
    ]
    for overrides, message in cases:
        with pytest.raises(PredictError, match=message):
            run(**overrides)


def test_a_pcie_uplink_must_be_a_pcie_link():
    from trainperf.predict.catalog_file import load_catalog

    catalog = load_catalog()
    uplink = (catalog.link("pcie4"), 4)
    assert run(devices=[1, 16], pcie_uplink=uplink)["rows"][1]["comm_s"] > 0
    (note,) = [a for a in run(devices=[1, 16], pcie_uplink=uplink)["assumptions"] if "PCIe" in a]
    assert note.startswith("4 GPUs behind each PCIe switch share its pcie4 uplink")
    assert "dividing" not in note
    uneven = run(devices=[1, 16], pcie_uplink=(catalog.link("pcie4"), 3))["assumptions"]
    assert any("(the fullest switch's, 8 not dividing by it)" in a for a in uneven)
    for wrong in ("nvlink4", "pcie3-staged"):
        with pytest.raises(PredictError, match=f"uplink must be a PCIe link, got {wrong}"):
            run(devices=[1, 16], pcie_uplink=(catalog.link(wrong), 4))


def test_one_node_needs_no_inter_link_and_one_device_no_link():
    assert run(devices=[1, 8], inter=None)["rows"][1]["nodes"] == 1
    assert run(devices=[1], intra=None, inter=None)["rows"][0]["comm_s"] == 0
    out = run(devices=[4, 8], per_node=1, intra=None)
    assert [r["nodes"] for r in out["rows"]] == [4, 8]


def test_nics_per_node_speed_the_cross_node_phase_only():
    one, four = run(devices=[1, 8, 64]), run(devices=[1, 8, 64], nics_per_node=4)
    assert one == run(devices=[1, 8, 64], nics_per_node=1)
    assert "nics_per_node" not in one["inputs"] and four["inputs"]["nics_per_node"] == 4
    assert one["rows"][:2] == four["rows"][:2]
    assert four["rows"][2]["comm_s"] < one["rows"][2]["comm_s"]
    assert four["rows"][2]["samples_per_s"] >= one["rows"][2]["samples_per_s"]
    # 3 NICs for 8 GPUs: the busiest carries 3 rings, and the note says so
    three = run(devices=[1, 8, 64], nics_per_node=3)
    assert four["rows"][2]["comm_s"] < three["rows"][2]["comm_s"] < one["rows"][2]["comm_s"]
    (note,) = [a for a in three["assumptions"] if "NICs per node" in a]
    assert "1/3 of a NIC's bandwidth" in note and "not dividing evenly over 3 NICs" in note
    (even,) = [a for a in four["assumptions"] if "NICs per node" in a]
    assert "1/2 of a NIC's bandwidth" in even and "evenly" not in even


def test_tied_weights_are_reduced_last_in_a_bucket_of_their_own():
    """GPT-2's token embedding is its output layer too: its gradient is complete only when
    the backward ends. The other buckets spread over the whole backward; the tied one waits
    for its end, so more communication is exposed than if every byte were spread."""
    from trainperf.predict.memory import shape_counts
    from trainperf.predict.overlap import ddp_step, ready_fractions

    assert ready_fractions([1.0, 3.0, 4.0]) == [0.125, 0.5, 1.0]
    assert ready_fractions([1.0, 3.0, 4.0], at_end=1) == [0.25, 1.0, 1.0]
    tied = shape_counts(models.get("gpt2-small"))
    assert tied.tied_params == 50257 * 768  # wte, also lm_head
    assert shape_counts(models.get("resnet18")).tied_params == 0

    def allreduce(n):
        return n / 1e3

    spread, _ = ddp_step(0.0, 1.0, [500.0, 500.0], allreduce)
    last, _ = ddp_step(0.0, 1.0, [500.0, 500.0], allreduce, ready_fractions([1.0, 1.0], 1))
    assert (spread, last) == (pytest.approx(1.5), pytest.approx(2.0))
