"""The α–β collective costs: known values, limits, and monotonic behaviour."""

import itertools
import math

import pytest

from trainperf.predict.comm import (
    LinkCost,
    allreduce_s,
    bucket_sizes,
    data_parallel_all_gather_s,
    data_parallel_allreduce_s,
    hierarchical_allreduce_s,
    ring_all_gather_s,
    ring_allreduce_s,
    ring_reduce_scatter_s,
    tree_allreduce_s,
)

LINK = LinkCost(alpha_s=1e-5, beta_bytes_per_s=1e10)


def test_ring_and_tree_on_known_inputs():
    # ring: 2(p-1)α + 2(p-1)/p n/β = 6e-5 + 1.5e9/1e10
    assert ring_allreduce_s(1e9, 4, LINK) == pytest.approx(0.15006, rel=1e-12)
    # tree: 2 ceil(log2 p) α + 2 n/β = 4e-5 + 0.2
    assert tree_allreduce_s(1e9, 4, LINK) == pytest.approx(0.20004, rel=1e-12)
    assert tree_allreduce_s(0, 5, LINK) == pytest.approx(6e-5)  # ceil(log2 5) = 3
    assert ring_reduce_scatter_s(1e9, 4, LINK) == pytest.approx(3e-5 + 0.075)


def test_one_rank_costs_nothing():
    for f in (ring_allreduce_s, tree_allreduce_s, ring_reduce_scatter_s):
        assert f(1e9, 1, LINK) == 0.0
    assert allreduce_s(1e9, 1, LINK) == (0.0, "ring")
    assert data_parallel_allreduce_s(1e9, 1, 8, None, None) == (0.0, "none")


def test_the_faster_algorithm_is_picked():
    assert allreduce_s(1e9, 4, LINK) == (pytest.approx(0.15006), "ring")
    small, algorithm = allreduce_s(1024, 1024, LINK)  # latency-bound: 20 vs 2046 latencies
    assert algorithm == "tree"
    assert small == pytest.approx(tree_allreduce_s(1024, 1024, LINK))


def test_hierarchical_reduces_to_flat_at_one_node_and_one_device_per_node():
    intra, inter = LinkCost(2e-6, 1.3e11), LinkCost(5e-6, 1.2e10)
    for n, g in itertools.product((1e3, 1e6, 1e9), (2, 4, 8)):
        t, _ = hierarchical_allreduce_s(n, g, 1, intra, inter)
        assert t == pytest.approx(ring_allreduce_s(n, g, intra), rel=1e-12)
    for n, nodes in itertools.product((1e3, 1e6, 1e9), (2, 16, 128)):
        assert hierarchical_allreduce_s(n, 1, nodes, intra, inter) == allreduce_s(n, nodes, inter)
        assert data_parallel_allreduce_s(n, nodes, 1, None, inter) == allreduce_s(n, nodes, inter)


def test_hierarchical_formula():
    intra, inter = LinkCost(2e-6, 1e11), LinkCost(5e-6, 1e10)
    n, g, nodes = 1e8, 8, 4
    expected = (
        2 * ((g - 1) * 2e-6 + (g - 1) / g * n / 1e11)  # reduce-scatter + all-gather in node
        + 2 * (nodes - 1) * 5e-6
        + 2 * (nodes - 1) / nodes * (n / g) / (1e10 / g)  # each local rank gets β/G
    )
    t, algorithm = data_parallel_allreduce_s(n, g * nodes, g, intra, inter)
    assert t == pytest.approx(expected, rel=1e-12) and algorithm == "hierarchical/ring"


def test_more_bandwidth_is_never_slower():
    sizes = [2**k for k in range(0, 31, 3)]
    betas = [1e8, 1e9, 1e10, 1e11, 1e12]
    for n, devices, per_node in itertools.product(sizes, (2, 8, 16, 64, 1024), (1, 4, 8)):
        if devices > per_node and devices % per_node:
            continue
        fixed = LinkCost(5e-6, 1e10)
        for vary in ("intra", "inter"):
            times = []
            for beta in betas:
                link = LinkCost(5e-6, beta)
                intra, inter = (link, fixed) if vary == "intra" else (fixed, link)
                times.append(data_parallel_allreduce_s(n, devices, per_node, intra, inter)[0])
            assert all(b <= a * (1 + 1e-12) for a, b in itertools.pairwise(times)), (
                n,
                devices,
                per_node,
                vary,
            )


def test_more_bytes_never_cost_less():
    for devices, per_node in ((4, 8), (64, 8), (32, 1)):
        intra, inter = LinkCost(2e-6, 1e11), LinkCost(5e-6, 1e10)
        times = [
            data_parallel_allreduce_s(2**k, devices, per_node, intra, inter)[0] for k in range(32)
        ]
        assert all(b >= a for a, b in itertools.pairwise(times))


def test_buckets():
    assert bucket_sizes(0, 100) == []
    assert bucket_sizes(250, 100) == [100, 100, 50]
    assert bucket_sizes(200, 100) == [100, 100]
    assert bucket_sizes(30, 100) == [30]
    assert bucket_sizes(250, 100, first_bytes=20) == [20, 100, 100, 30]  # DDP's small first
    assert bucket_sizes(60 * 2**20, 25 * 2**20) == [2**20, 25 * 2**20, 25 * 2**20, 9 * 2**20]
    assert math.fsum(bucket_sizes(1e9 + 7, 25 * 2**20)) == 1e9 + 7


def test_missing_link_is_refused():
    with pytest.raises(ValueError, match="intra"):
        data_parallel_allreduce_s(1e6, 4, 8, None, None)
    with pytest.raises(ValueError, match="inter"):
        data_parallel_allreduce_s(1e6, 16, 8, LINK, None)


def test_a_shared_pcie_uplink_caps_each_gpus_path_to_the_nic():
    intra, inter = LinkCost(5e-6, 1e10), LinkCost(1e-5, 1.2e10)  # NIC: 3e9 each of 4
    plain, _ = data_parallel_allreduce_s(1e8, 16, 4, intra, inter)
    roomy, _ = data_parallel_allreduce_s(1e8, 16, 4, intra, inter, (LinkCost(0, 1.2e10), 2))
    assert roomy == plain  # 6e9 per GPU through the switch: the NIC's 3e9 binds
    shared, _ = data_parallel_allreduce_s(1e8, 16, 4, intra, inter, (LinkCost(0, 1.2e10), 4))
    slow, _ = data_parallel_allreduce_s(1e8, 16, 4, intra, inter, (LinkCost(0, 4e9), 4))
    assert shared == plain  # 3e9 either way
    inside = ring_reduce_scatter_s(1e8, 4, intra) + ring_all_gather_s(1e8, 4, intra)
    across = allreduce_s(1e8 / 4, 4, LinkCost(1e-5, 1e9))[0]  # 4e9 / 4 GPUs = 1e9
    assert slow == pytest.approx(inside + across)


def test_k_nics_divide_the_cross_node_bandwidth_among_fewer_gpus():
    intra, inter = LinkCost(5e-6, 1e10), LinkCost(1e-5, 1.2e10)
    inside = ring_reduce_scatter_s(1e8, 8, intra) + ring_all_gather_s(1e8, 8, intra)
    one, _ = data_parallel_allreduce_s(1e8, 32, 8, intra, inter)
    assert one == data_parallel_allreduce_s(1e8, 32, 8, intra, inter, None, 1)[0]
    for k in (2, 4, 8):  # each GPU gets k NICs' 1.2e10 over its node's 8 GPUs, α unchanged
        t, algorithm = data_parallel_allreduce_s(1e8, 32, 8, intra, inter, None, k)
        across, inner = allreduce_s(1e8 / 8, 4, LinkCost(1e-5, 1.2e10 * k / 8))
        assert t == pytest.approx(inside + across, rel=1e-12)
        assert algorithm == f"hierarchical/{inner}"
    # NICs add bandwidth, not latency: an empty message costs the same α terms
    assert data_parallel_allreduce_s(0, 32, 8, intra, inter, None, 8) == (
        data_parallel_allreduce_s(0, 32, 8, intra, inter)
    )
    # all-gather (FSDP) alike
    gather_1 = data_parallel_all_gather_s(1e8, 32, 8, intra, inter)[0]
    gather_4 = data_parallel_all_gather_s(1e8, 32, 8, intra, inter, None, 4)[0]
    inside_ag = ring_all_gather_s(1e8, 8, intra)
    assert gather_4 - inside_ag == pytest.approx(
        ring_all_gather_s(1e8 / 8, 4, LinkCost(1e-5, 1.2e10 * 4 / 8)), rel=1e-12
    )
    assert gather_4 < gather_1


def test_k_nics_that_do_not_divide_the_gpus_go_at_the_busiest_nics_pace():
    # 8 GPUs' rings on 3 NICs: 3, 3 and 2 rings, and the rings move in lock step, so each
    # GPU gets a third of a NIC (β/⌈8/3⌉), not the mean 3/8 of one (β·3/8)
    intra, inter = LinkCost(5e-6, 1e10), LinkCost(1e-5, 1.2e10)
    inside = ring_reduce_scatter_s(1e8, 8, intra) + ring_all_gather_s(1e8, 8, intra)
    three, _ = data_parallel_allreduce_s(1e8, 32, 8, intra, inter, None, 3)
    busiest = allreduce_s(1e8 / 8, 4, LinkCost(1e-5, 1.2e10 / 3))[0]
    assert three == pytest.approx(inside + busiest, rel=1e-12)
    mean_share = allreduce_s(1e8 / 8, 4, LinkCost(1e-5, 1.2e10 * 3 / 8))[0]
    assert three > inside + mean_share
    # 5 NICs still carry 2 rings on the busiest: no faster than 4
    five, _ = data_parallel_allreduce_s(1e8, 32, 8, intra, inter, None, 5)
    four, _ = data_parallel_allreduce_s(1e8, 32, 8, intra, inter, None, 4)
    assert five == four


def test_k_nics_still_share_each_pcie_switchs_uplink():
    intra, inter = LinkCost(5e-6, 1e10), LinkCost(1e-5, 1.2e10)
    uplink = (LinkCost(0, 8e9), 4)  # 2e9 per GPU through its switch
    free, _ = data_parallel_allreduce_s(1e8, 16, 8, intra, inter, None, 8)  # 1.2e10 each
    capped, _ = data_parallel_allreduce_s(1e8, 16, 8, intra, inter, uplink, 8)
    inside = ring_reduce_scatter_s(1e8, 8, intra) + ring_all_gather_s(1e8, 8, intra)
    assert capped == pytest.approx(inside + allreduce_s(1e8 / 8, 2, LinkCost(1e-5, 2e9))[0])
    assert capped > free
    # with one NIC the NIC's 1.5e9 per GPU binds before the switch's 2e9, as before
    assert (
        data_parallel_allreduce_s(1e8, 16, 8, intra, inter, uplink)[0]
        == (data_parallel_allreduce_s(1e8, 16, 8, intra, inter)[0])
    )
