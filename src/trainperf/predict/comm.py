"""The time of the collectives of data-parallel training, in the α–β (latency–bandwidth) model.

A message of n bytes between two ranks costs α + n/β: α the per-message latency (s), β the
bandwidth (bytes/s per direction). For an all-reduce of n bytes over p ranks:

- **ring** (reduce-scatter then all-gather, each p−1 steps moving n/p bytes; Thakur,
  Rabenseifner & Gropp, "Optimization of collective communication operations in MPICH",
  IJHPCA 2005; Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
  workstations", JPDC 2009, prove 2(p−1)/p · n/β the lowest bandwidth term possible):

      t_ring = 2(p−1)·α + 2(p−1)/p · n/β

- **tree**, NCCL's double binary tree (Sanders, Speck & Träff 2009, in NCCL since 2.4): a
  reduce up and a broadcast down two complementary trees, each carrying half the data in
  pipelined chunks, so every rank sends and receives about n bytes each way. Approximated,
  ignoring the pipeline's fill of ⌈log2 p⌉ chunks, as

      t_tree = 2·⌈log2 p⌉·α + 2·n/β

  Its bandwidth term is never below the ring's; it wins on small messages or many ranks,
  where the ring's 2(p−1) latencies dominate. Like NCCL's tuner, a collective takes the
  faster of the two for each message. p = 1 costs nothing.

- **reduce-scatter** and **all-gather** (ring): (p−1)·α + (p−1)/p · n/β each.

- **hierarchical** (G devices per node, N nodes; the intra link per device, the inter link
  per node): reduce-scatter inside each node, then each of the G local ranks all-reduces
  its n/G shard with its peers on the other nodes (the G of them share the node's inter
  link, so each sees β_inter/G), then all-gather inside the node:

      t = t_rs(n, G; intra) + t_allreduce(n/G, N; α_inter, β_inter/G) + t_ag(n, G; intra)

  With N = 1 it is the intra ring all-reduce; with G = 1 the inter all-reduce.
  Where the GPUs reach the NIC through PCIe switches, K GPUs behind one switch share its
  uplink (β_up): each then sees min(β_inter/G, β_up/K) in the inter-node phase
  (``uplink``: the uplink's cost and K).
  A rail-optimised node has K NICs (``nics``, 1 ≤ K ≤ G): the G local rings of the
  inter-node phase then run over the K NICs in parallel, ⌈G/K⌉ of them on the busiest NIC
  (the rings move in lock step, so that NIC sets the pace: 3 of 8 GPUs' rings on one of 3
  NICs), and each GPU sees β_inter/⌈G/K⌉ (K·β_inter/G where K divides G; α unchanged),
  still capped by its switch's uplink: the S GPUs behind one switch share that switch's
  uplink, min(β_inter/⌈G/K⌉, β_up/S). K = 1 is the single NIC above.

- **sharded data parallelism** (FSDP, ZeRO-3) all-gathers parameters and reduce-scatters
  gradients of n bytes (each rank holding n/(G·N)). Hierarchically, an all-gather is an
  all-gather across nodes of the n/G bytes of each local rank's column (the G columns
  sharing the node's link as above), then an all-gather of n inside the node; a
  reduce-scatter is its mirror (inside the node first), at the same cost:

      t = t_ag(n/G, N; α_inter, β_inter/G) + t_ag(n, G; intra)

  Both are ring collectives (NCCL runs all-gather and reduce-scatter as rings).

- **measured**: a link with a bus-bandwidth curve from `trainperf micro collective`
  (``trainperf.predict.terms.BusBandwidthCurve``) times an all-reduce as
  n · 2(p−1)/p / busbw(n) instead of α–β, and a reduce-scatter or all-gather as half of
  that (each is one of the all-reduce's two ring phases). Shared by ``ways`` users, its
  time is multiplied by ``ways`` (the bandwidth divided).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Any

from trainperf.predict.terms import BusBandwidthCurve

RING, TREE, MEASURED = "ring", "tree", "measured"


@dataclass(frozen=True)
class LinkCost:
    """α (s per message) and β (bytes/s per direction) of one link, or its measured
    bus-bandwidth curve; ``ways`` concurrent users share it."""

    alpha_s: float
    beta_bytes_per_s: float
    curve: BusBandwidthCurve | None = None
    ways: float = 1

    @classmethod
    def of(cls, link: Any) -> LinkCost:
        """From a catalog ``Link`` (or anything with ``latency_s`` and ``bytes_per_s``, and
        optionally a measured ``curve``)."""
        return cls(float(link.latency_s), float(link.bytes_per_s), getattr(link, "curve", None))

    def shared(self, ways: float) -> LinkCost:
        """The same link divided between ``ways`` concurrent users (bandwidth only)."""
        return LinkCost(self.alpha_s, self.beta_bytes_per_s / ways, self.curve, self.ways * ways)


def ring_allreduce_s(n_bytes: float, p: int, link: LinkCost) -> float:
    """2(p−1)·α + 2(p−1)/p · n/β (Thakur et al. 2005; Patarasuk & Yuan 2009)."""
    if p <= 1:
        return 0.0
    if link.curve is not None:
        return link.curve.allreduce_s(n_bytes, p) * link.ways
    return 2 * (p - 1) * link.alpha_s + 2 * (p - 1) / p * n_bytes / link.beta_bytes_per_s


def tree_allreduce_s(n_bytes: float, p: int, link: LinkCost) -> float:
    """2·⌈log2 p⌉·α + 2·n/β: NCCL's pipelined double binary tree, pipeline fill ignored."""
    if p <= 1:
        return 0.0
    return 2 * math.ceil(math.log2(p)) * link.alpha_s + 2 * n_bytes / link.beta_bytes_per_s


def ring_reduce_scatter_s(n_bytes: float, p: int, link: LinkCost) -> float:
    """(p−1)·α + (p−1)/p · n/β; the ring all-gather costs the same."""
    if p <= 1:
        return 0.0
    if link.curve is not None:
        return link.curve.allreduce_s(n_bytes, p) * link.ways / 2
    return (p - 1) * link.alpha_s + (p - 1) / p * n_bytes / link.beta_bytes_per_s


ring_all_gather_s = ring_reduce_scatter_s


def allreduce_s(n_bytes: float, p: int, link: LinkCost) -> tuple[float, str]:
    """(time, "ring" or "tree"): the faster algorithm for this message, as NCCL's tuner picks;
    (time, "measured") on a link with a measured curve."""
    if link.curve is not None:
        return ring_allreduce_s(n_bytes, p, link), MEASURED
    ring, tree = ring_allreduce_s(n_bytes, p, link), tree_allreduce_s(n_bytes, p, link)
    return (tree, TREE) if tree < ring else (ring, RING)


def hierarchical_allreduce_s(
    n_bytes: float,
    per_node: int,
    nodes: int,
    intra: LinkCost,
    inter: LinkCost,
    uplink: tuple[LinkCost, int] | None = None,
    nics: int = 1,
) -> tuple[float, str]:
    """Reduce-scatter in the node, all-reduce of n/G across nodes, all-gather in the node.

    The algorithm named is the one the inter-node all-reduce picks. ``uplink`` (a PCIe
    switch's uplink and the K GPUs sharing it) caps each GPU's inter-node bandwidth;
    ``nics`` NICs per node carry the G local rings in parallel.
    """
    g = per_node
    across, algorithm = allreduce_s(n_bytes / g, nodes, _nic_share(inter, g, uplink, nics))
    inside = ring_reduce_scatter_s(n_bytes, g, intra) + ring_all_gather_s(n_bytes, g, intra)
    return inside + across, algorithm


def _nic_share(
    inter: LinkCost, per_node: int, uplink: tuple[LinkCost, int] | None, nics: int = 1
) -> LinkCost:
    """What one of the node's ``per_node`` GPUs gets of its inter-node link: β_inter/G, or
    β_inter/⌈G/K⌉ with ``nics`` = K NICs (the busiest NIC's share), or less through a PCIe
    switch's uplink shared by the S GPUs behind it (β_up/S)."""
    nic = inter.shared(math.ceil(per_node / min(nics, per_node)))
    if uplink is not None:
        link, sharing = uplink
        through_switch = link.beta_bytes_per_s / sharing
        if through_switch < nic.beta_bytes_per_s:
            nic = LinkCost(nic.alpha_s, through_switch, nic.curve, nic.ways)
    return nic


def data_parallel_s(
    collective: str,
    n_bytes: float,
    devices: int,
    per_node: int,
    intra: LinkCost | None,
    inter: LinkCost | None,
    uplink: tuple[LinkCost, int] | None = None,
    nics: int = 1,
) -> tuple[float, str]:
    """``collective`` ("all_reduce", or "all_gather" of a tensor sharded over the ranks) of
    ``n_bytes`` over ``devices`` placed ``per_node`` to a node. One node: the intra link,
    flat. One device per node: the inter link, flat. Otherwise hierarchical (module doc),
    the node's ``nics`` NICs carrying the inter-node phase in parallel.
    Returns (time, algorithm); one device costs (0, "none"). A reduce-scatter of
    ``n_bytes`` costs what its all-gather does."""
    if devices <= 1:
        return 0.0, "none"
    nodes = devices // per_node
    if collective == "all_reduce":
        if devices <= per_node:
            return allreduce_s(n_bytes, devices, _needed(intra, "intra"))
        if per_node == 1:
            return allreduce_s(n_bytes, nodes, _needed(inter, "inter"))
        t, algorithm = hierarchical_allreduce_s(
            n_bytes,
            per_node,
            nodes,
            _needed(intra, "intra"),
            _needed(inter, "inter"),
            uplink,
            nics,
        )
        return t, f"hierarchical/{algorithm}"
    if devices <= per_node:
        return ring_all_gather_s(n_bytes, devices, _needed(intra, "intra")), RING
    if per_node == 1:
        return ring_all_gather_s(n_bytes, nodes, _needed(inter, "inter")), RING
    nic = _nic_share(_needed(inter, "inter"), per_node, uplink, nics)
    across = ring_all_gather_s(n_bytes / per_node, nodes, nic)
    inside = ring_all_gather_s(n_bytes, per_node, _needed(intra, "intra"))
    return across + inside, f"hierarchical/{RING}"


data_parallel_allreduce_s = partial(data_parallel_s, "all_reduce")
data_parallel_all_gather_s = partial(data_parallel_s, "all_gather")
data_parallel_reduce_scatter_s = data_parallel_all_gather_s


def _needed(link: LinkCost | None, scope: str) -> LinkCost:
    if link is None:
        raise ValueError(f"an {scope}-node link is needed for this placement")
    return link


FIRST_BUCKET_BYTES = 2**20  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES


def bucket_sizes(
    total_bytes: float, bucket_bytes: float, first_bytes: float = FIRST_BUCKET_BYTES
) -> list[float]:
    """DDP's buckets in the order they become ready.

    DDP fills buckets from the last layer back (the order gradients appear) and caps the
    first at 1 MiB so communication starts early; then buckets of ``bucket_bytes``, and
    the remainder (the first layers' gradients) last: that bucket is ready only when the
    backward pass ends, so its all-reduce can never overlap (PyTorch
    ``DistributedDataParallel``, ``bucket_cap_mb`` and ``_DEFAULT_FIRST_BUCKET_BYTES``).
    """
    if total_bytes <= 0:
        return []
    first = min(first_bytes, bucket_bytes, total_bytes)
    full, rest = divmod(total_bytes - first, bucket_bytes)
    return [float(first)] + [float(bucket_bytes)] * int(full) + ([float(rest)] if rest > 0 else [])
