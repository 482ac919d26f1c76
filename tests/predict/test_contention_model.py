"""Compute beside communication (issue 33, item 2): the host model's terms pinned on
synthetic inputs; a model that overlaps communication for free fails them."""

import random
from dataclasses import replace

import pytest
from predict_inputs import FakeDevice, predict_ddp, predict_sharded

from trainperf import models
from trainperf.predict.calibrate import calibrate
from trainperf.predict.overlap import contended_ddp_step, ddp_step
from trainperf.predict.terms import OWN_ENGINE, TIME_SHARED, Contention, reserved_cores
from trainperf.store.database import Store


def store_under_load(path, system, loads, rows=()):
    """A database holding one ``micro collective --under-load`` run per summary in
    ``loads`` (oldest first), each with ``rows``."""
    with Store(path) as store:
        store.start_sweep(system)
        for load in loads:
            store.add_micro(
                system,
                {"kind": "collective", "device": "cpu", "under_load": {"gemm_n": 256}},
                {
                    "status": "ok",
                    "device": {"world_size": 2, "local_world_size": 2},
                    "metrics": {"rows": list(rows), "world_size": 2, "under_load": load},
                },
            )


def test_without_contention_the_step_is_ddp_s():
    rng = random.Random(0)
    for _ in range(50):
        buckets = [rng.uniform(1, 100) for _ in range(rng.randint(1, 6))]
        cost = rng.uniform(1e-4, 1e-2)

        def allreduce(n, cost=cost):
            return cost * n

        t_fwd, t_bwd = rng.uniform(0.01, 1), rng.uniform(0.01, 2)
        free = ddp_step(t_fwd, t_bwd, buckets, allreduce)
        assert contended_ddp_step(t_fwd, t_bwd, buckets, allreduce, OWN_ENGINE) == (
            pytest.approx(free[0]),
            pytest.approx(free[1]),
        )


def test_without_contention_the_copies_out_are_ddp_s():
    rng = random.Random(2)
    for _ in range(50):
        buckets = [rng.uniform(1, 100) for _ in range(rng.randint(1, 6))]
        copy, cost = rng.uniform(0, 0.5), rng.uniform(1e-4, 1e-2)
        t_fwd, t_bwd = rng.uniform(0.01, 1), rng.uniform(0.01, 2)
        free = ddp_step(t_fwd, t_bwd, buckets, lambda n, c=cost: c * n, copy_out=copy)
        contended = contended_ddp_step(
            t_fwd, t_bwd, buckets, lambda n, c=cost: c * n, OWN_ENGINE, copy_out=copy
        )
        assert contended == (pytest.approx(free[0]), pytest.approx(free[1]))


def test_copies_out_beside_the_last_all_reduce_share_its_cores():
    step, _ = contended_ddp_step(0.0, 2.0, [1.0, 1.0], lambda n: 1.0, TIME_SHARED, copy_out=1.0)
    # Bucket 1 is ready at 1 s of backward work; beside the backward both go at half speed,
    # so its 1 s all-reduce and the backward's last 1 s both end at 3 s. Bucket 2 starts
    # then; bucket 1's 0.5 s copy runs beside it (1 s of clock, half of the all-reduce
    # done), the other half alone (4.5 s), then bucket 2's copy: 5 s.
    assert step == pytest.approx(5.0)
    # overlapped for free: bucket 1 reduced at 2 s, bucket 2 at 3 s; copies at 2.5 and 3.5 s
    assert ddp_step(0.0, 2.0, [1.0, 1.0], lambda n: 1.0, copy_out=1.0)[0] == pytest.approx(3.5)


def test_time_shared_cores_cost_what_the_work_costs_in_sequence():
    """Two equal buckets, the first ready halfway through the backward: free overlap hides
    it, time sharing cannot (each of the two runs at half speed while both run)."""
    step, comm = contended_ddp_step(1.0, 2.0, [1.0, 1.0], lambda n: 0.5, TIME_SHARED)
    assert (step, comm) == (pytest.approx(4.0), 1.0)
    assert ddp_step(1.0, 2.0, [1.0, 1.0], lambda n: 0.5)[0] == pytest.approx(3.5)
    rng = random.Random(1)
    for _ in range(30):
        buckets = [rng.uniform(1, 50) for _ in range(rng.randint(1, 5))]
        step, comm = contended_ddp_step(0.3, 0.7, buckets, lambda n: 0.002 * n, TIME_SHARED)
        assert step == pytest.approx(0.3 + 0.7 + comm)


def test_a_slow_all_reduce_beside_compute_is_pushed_after_the_backward():
    # compute barely slowed (1.1x), the all-reduce 10x slower while the backward runs
    contention = Contention(1.1, 10.0, "synthetic")
    step, _ = contended_ddp_step(0.0, 1.0, [1.0, 1.0], lambda n: 0.2, contention)
    # bucket 1 from work 0.5: backward 0.5 s of work at 1/1.1 -> 0.55 s, the all-reduce
    # gets 0.055 of its 0.2 done; then 0.145 alone, then bucket 2's 0.2 alone
    assert step == pytest.approx(0.5 + 0.55 + 0.145 + 0.2)


CPU, GPU = FakeDevice("cpu-x", "cpu", 64e9, 1e12), FakeDevice("gpu-x", "gpu", 64e9, 1e12)


class Link:
    id = "shm"
    scope = "intra"
    bytes_per_s = 2e9
    latency_s = 1e-5

    @classmethod
    def inter(cls):
        link = cls()
        link.scope = "inter"
        return link


def two_ranks(device, **terms):
    return predict_ddp(
        model="alexnet",
        device=device,
        devices=[1, 2],
        per_node=2,
        intra=Link(),
        batch_size=16,
        precision="fp32",
        size=64,
        single_device_throughput=100.0,
        **terms,
    )


def test_cpu_ranks_time_share_unless_measured_gpus_overlap_for_free():
    cpu, gpu = two_ranks(CPU), two_ranks(GPU)
    row_cpu, row_gpu = cpu["rows"][-1], gpu["rows"][-1]
    assert row_cpu["comm_s"] == pytest.approx(row_gpu["comm_s"])
    assert row_cpu["step_s"] == pytest.approx(row_cpu["compute_s"] + row_cpu["comm_s"])
    assert row_gpu["step_s"] < row_cpu["step_s"]
    assert any("time-shared" in a for a in cpu["assumptions"])
    assert not any("compute beside communication" in a for a in gpu["assumptions"])
    measured = two_ranks(CPU, contention=Contention(1.2, 3.0, "synthetic"))
    assert any("1/1.2 of its speed" in a for a in measured["assumptions"])
    assert measured["rows"][-1]["step_s"] != pytest.approx(row_cpu["step_s"])


def test_ddp_copies_its_gradients_at_the_rank_streaming_rate():
    """DDP copies the fp32 gradients into its buckets and back out, each copy read and
    written: 2 x 2 x 4 B x params at the measured streaming rate (else 80% of the device's
    bandwidth); one device has no DDP. A model that prices only the link fails it: at 1 GB/s
    AlexNet's 61 M parameters take ~1 s, and the efficiency falls accordingly."""
    params = two_ranks(GPU)["inputs"]["trainable_params"]
    slow = two_ranks(GPU, contention=OWN_ENGINE, memory_bytes_per_s=1e9)
    fast = two_ranks(GPU, contention=OWN_ENGINE, memory_bytes_per_s=1e12)
    one, two = slow["rows"]
    assert one["bucket_copy_s"] == 0 and one["step_s"] == fast["rows"][0]["step_s"]
    assert two["bucket_copy_s"] == pytest.approx(2 * 2 * 4 * params / 1e9)
    assert fast["rows"][1]["bucket_copy_s"] == pytest.approx(2 * 2 * 4 * params / 1e12)
    # the copy in lengthens the backward, the copies out follow it: the step grows by both
    # where the all-reduce hides behind the backward (1 TB/s: 1 ms in all)
    grown = two["step_s"] - fast["rows"][1]["step_s"]
    assert grown == pytest.approx(two["bucket_copy_s"] - fast["rows"][1]["bucket_copy_s"], rel=0.05)
    assert two["efficiency"] < fast["rows"][1]["efficiency"] - 0.3
    assert any("read and written at 1 GB/s (measured" in a for a in slow["assumptions"])
    # a device without a memory bandwidth and nothing measured: not priced, and said so
    unknown = two_ranks(GPU, contention=OWN_ENGINE)
    assert unknown["rows"][1]["bucket_copy_s"] == 0
    assert any("buckets: not priced" in a for a in unknown["assumptions"])


def test_calibration_reads_the_newest_under_load_run(tmp_path):
    system = {"fingerprint": "load00000001", "hostname": "load", "memory_bytes": 2**34}
    path = tmp_path / "load.db"
    older = {"gemm_slowdown": 1.5, "busbw_slowdown": 4.0}  # before neighbours were measured
    newer = {"gemm_slowdown": 0.9, "busbw_slowdown": 10.45, "neighbour_slowdown": 1.3}
    store_under_load(path, system, [older, newer])
    cal = calibrate(path, models.get("cifarnet"), system=system["fingerprint"])
    assert cal.contention.compute_slowdown == 1.0  # 0.9 measured: noise, not a speed-up
    assert cal.contention.comm_slowdown == pytest.approx(10.45)
    assert cal.contention.neighbour_slowdown == pytest.approx(1.3)
    assert "under-load" in cal.contention.source
    empty = tmp_path / "empty.db"
    with Store(empty) as store:
        store.start_sweep(system)
    cal = calibrate(empty, models.get("cifarnet"), system=system["fingerprint"])
    assert cal.contention is None and "under-load" in cal.absent["contention"]


def test_ranks_sharing_a_host_compute_at_the_measured_neighbour_slowdown():
    """Compute of each of 2 ranks on one host = the single device's x the slowdown beside
    the other rank's compute; a rank alone on its host, or one device, is not slowed. A
    model that prices only the link (compute as measured alone) fails it."""
    alone = Contention(1.0, 1.0, "synthetic")
    beside = Contention(1.0, 1.0, "synthetic", neighbour_slowdown=1.4)
    base, slowed = two_ranks(GPU, contention=alone), two_ranks(GPU, contention=beside)
    assert slowed["rows"][0]["compute_s"] == pytest.approx(base["rows"][0]["compute_s"])
    assert slowed["rows"][-1]["compute_s"] == pytest.approx(1.4 * base["rows"][-1]["compute_s"])
    assert slowed["rows"][-1]["efficiency"] < base["rows"][-1]["efficiency"] / 1.2
    assert any("1.4x slower while the others compute" in a for a in slowed["assumptions"])
    one_per_host = predict_ddp(
        model="alexnet",
        device=GPU,
        devices=[1, 2],
        per_node=1,
        inter=Link.inter(),
        batch_size=16,
        precision="fp32",
        size=64,
        single_device_throughput=100.0,
        contention=beside,
    )
    assert one_per_host["rows"][-1]["compute_s"] == pytest.approx(base["rows"][0]["compute_s"])


def test_the_compute_slowdowns_weigh_gemm_and_stream_by_the_memory_bound_share(tmp_path):
    """A run that measured both kernels: each slowdown is (1 − m)·GEMM's + m·STREAM's, m
    the model's memory-bound share at the rates measured solo; a link-only model (or a
    GEMM-only one) fails it, since STREAM's slowdowns here are far larger."""
    from trainperf.micro.contention import SUMMARY_SLOWDOWNS
    from trainperf.predict.contention_fit import UNDER_LOAD_SLOWDOWNS

    assert SUMMARY_SLOWDOWNS == UNDER_LOAD_SLOWDOWNS  # one list, two layers
    system = {"fingerprint": "load00000002", "hostname": "load", "memory_bytes": 2**34}
    path = tmp_path / "load.db"
    load = {
        "gemm_slowdown": 1.5,
        "busbw_slowdown": 2.0,
        "neighbour_slowdown": 1.2,
        "memory_slowdown": 3.0,
        "memory_neighbour_slowdown": 2.0,
        "gemm_tflops_solo": 0.05,
        "stream_gbps_solo": 5.0,
        "stream_gbps": 4.0,
    }
    store_under_load(path, system, [load])
    cal = calibrate(path, models.get("cifarnet"), system=system["fingerprint"], batch_size=8)
    share = cal.sources["contention"]["memory_bound_share"]
    assert 0 < share < 1
    assert cal.contention.compute_slowdown == pytest.approx((1 - share) * 1.5 + share * 3.0)
    assert cal.contention.neighbour_slowdown == pytest.approx((1 - share) * 1.2 + share * 2.0)
    assert cal.contention.comm_slowdown == 2.0
    assert f"memory-bound share {share:.2f}" in cal.contention.source
    assert cal.memory_bytes_per_s == 4e9  # every rank streaming: DDP's bucket copies


def test_cores_reserved_for_communication_overlap_it_and_cost_the_compute_their_share():
    """k of a CPU rank's C cores for the communication (MLSL's servers, oneCCL's workers):
    the all-reduce overlaps the backward as on a GPU, and on 2 ranks the compute takes
    C/(C - k) of its time on one device, which reserved none. A model that overlaps for
    free with every core computing fails the second; one that time-shares fails the first."""
    reserved = reserved_cores(4, 40, "synthetic")
    assert reserved.free and reserved.compute_factor(1, 1) == 1
    assert reserved.compute_factor(2, 1) == pytest.approx(40 / 36)
    both = replace(reserved, neighbour_slowdown=1.5)
    assert both.compute_factor(2, 2) == pytest.approx(1.5 * 40 / 36)
    assert both.compute_factor(2, 1) == pytest.approx(40 / 36)
    for bad in ((0, 40), (40, 40), (41, 40)):
        with pytest.raises(ValueError, match="reserved cores"):
            Contention(1.0, 1.0, reserved_communication_cores=bad)

    free, shared = two_ranks(CPU, contention=OWN_ENGINE), two_ranks(CPU)
    own = two_ranks(CPU, contention=reserved)
    assert own["rows"][0]["compute_s"] == pytest.approx(free["rows"][0]["compute_s"])
    assert own["rows"][1]["compute_s"] == pytest.approx(free["rows"][1]["compute_s"] * 40 / 36)
    # overlapped as freely as a GPU's: the exposed part is what the longer backward leaves
    assert own["rows"][1]["comm_exposed_s"] <= free["rows"][1]["comm_exposed_s"] + 1e-12
    assert shared["rows"][1]["comm_exposed_s"] > own["rows"][1]["comm_exposed_s"]
    assert any("on 4 of each rank's 40 cores" in a for a in own["assumptions"])
    assert not any("compute beside communication" in a for a in own["assumptions"])


def test_fsdp_ranks_with_reserved_cores_compute_on_the_rest():
    """The sharded prediction stretches every rank's compute alike (terms.compute_factor)."""
    common = dict(
        model="gpt2-small",
        device=CPU,
        per_node=1,
        inter=Link.inter(),
        batch_size=2,
        precision="fp32",
        size=64,
        single_device_throughput=4.0,
    )
    free = predict_sharded(devices=[1, 4], contention=OWN_ENGINE, **common)
    own = predict_sharded(devices=[1, 4], contention=reserved_cores(2, 8, "synthetic"), **common)
    assert own["rows"][0]["compute_s"] == pytest.approx(free["rows"][0]["compute_s"])
    assert own["rows"][1]["compute_s"] == pytest.approx(free["rows"][1]["compute_s"] * 8 / 6)
    assert any("on 2 of each rank's 8 cores" in a for a in own["assumptions"])


def test_slowdowns_by_size_are_read_at_the_size_in_log_bytes_and_held_beyond():
    curve = Contention(1.5, 1.8, "synthetic", by_bytes=((2**20, 1.2, 1.4), (2**26, 1.8, 2.6)))
    assert curve.at(2**20) == (1.2, 1.4) and curve.at(1) == (1.2, 1.4)
    assert curve.at(2**30) == (1.8, 2.6)
    compute, comm = curve.at(2**23)  # halfway in log2 between 1 MiB and 64 MiB
    assert compute == pytest.approx(1.5) and comm == pytest.approx(2.0)
    assert Contention(1.5, 1.8).at(2**23) == (1.5, 1.8)  # nothing per size: the scalars
    assert not curve.free and not Contention(1.0, 1.0, by_bytes=((1.0, 1.0, 2.0),)).free
    for bad in (((2.0, 1, 1), (1.0, 1, 1)), ((1.0, 1, 1), (1.0, 2, 2)), ((0.0, 1, 1),)):
        with pytest.raises(ValueError, match="by_bytes"):
            Contention(1.0, 1.0, by_bytes=bad)


def test_each_bucket_is_slowed_at_its_own_size():
    """A small bucket beside the backward is hardly slowed where a large one is slowed
    twofold (the measured curve): a model with one slowdown for every size fails it, as does
    a link-only one."""
    curve = Contention(1.5, 1.5, "synthetic", by_bytes=((1.0, 1.0, 1.0), (64.0, 2.0, 2.0)))
    for size, constant in ((1.0, Contention(1.0, 1.0)), (64.0, Contention(2.0, 2.0))):
        buckets, t_bwd = [size, size], 2.0

        def allreduce(n):
            return 0.5

        by_size = contended_ddp_step(0.1, t_bwd, buckets, allreduce, curve)
        assert by_size == pytest.approx(
            contended_ddp_step(0.1, t_bwd, buckets, allreduce, constant)
        )
    small = contended_ddp_step(0.0, 2.0, [1.0, 1.0], lambda n: 0.5, curve)[0]
    large = contended_ddp_step(0.0, 2.0, [64.0, 64.0], lambda n: 0.5, curve)[0]
    assert small == pytest.approx(2.5)  # free: the first hidden, the last after the backward
    assert large > small + 0.4
    # Only the first bucket runs beside the backward (the last is ready when it ends): its
    # size alone sets the step.
    assert contended_ddp_step(0.0, 2.0, [64.0, 1.0], lambda n: 0.5, curve)[0] == large
    assert contended_ddp_step(0.0, 2.0, [1.0, 64.0], lambda n: 0.5, curve)[0] == small


def test_calibration_keeps_the_slowdowns_of_every_size(tmp_path):
    system = {"fingerprint": "load00000003", "hostname": "load", "memory_bytes": 2**34}
    path = tmp_path / "load.db"
    sizes = {2**20: (1.3, 1.2), 2**24: (1.9, 2.1), 2**26: (2.0, 2.3)}  # gemm, busbw
    rows = [
        {"size_bytes": size, "gemm_slowdown": gemm, "busbw_slowdown": busbw}
        for size, (gemm, busbw) in sizes.items()
    ]
    rows.append({"size_bytes": 2**22, "gemm_slowdown": None, "busbw_slowdown": 1.5})  # no GEMM
    load = {"gemm_slowdown": 1.9, "busbw_slowdown": 2.1}
    store_under_load(path, system, [load], rows)
    cal = calibrate(path, models.get("cifarnet"), system=system["fingerprint"])
    assert cal.contention.by_bytes == tuple(
        (float(size), gemm, busbw) for size, (gemm, busbw) in sizes.items()
    )
    assert cal.contention.at(2**25) == pytest.approx((1.95, 2.2))
    assert [r["bytes"] for r in cal.sources["contention"]["by_bytes"]] == list(sizes)
