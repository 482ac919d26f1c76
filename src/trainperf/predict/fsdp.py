"""Predict sharded data-parallel training (FSDP2, ZeRO stage 3) of a model on catalog hardware.

The layout is trainperf's own (``trainperf.parallel.fsdp``, torchtitan's): each of the n
repeated blocks is sharded on its own, the root holds the other parameters (embeddings,
final norm, output layer); every parameter is split over the N ranks. Per step and rank,
with B the batch per rank (``trainperf.predict.memory.block_counts`` splits the model):

1. **Compute**: t = B × the roofline of ``trainperf.predict.compute.compute_rate`` (or B / X
   from a measured throughput), with attention priced as the fused kernel a GPU runs
   (``fused_attention_profile``; the data-parallel prediction keeps the math path, so that
   its numbers do not move). A language model's step is priced from its operators at the
   device's kernel rates where the catalog has them (``Device.kernel_fractions``): GEMMs
   at the GEMM fraction of peak, the fused attention kernel at its own (a causal kernel
   doing half the FLOPs of the full square; the run's kernel, ``Sharding.attention_kernel``,
   at its rate for the sequence length, ``attention_kernels``), the element-wise and norm
   work at the memory bandwidth; one whole-step fraction otherwise. Ranks sharing a host
   (CPU ranks) stretch t by the measured neighbour slowdown, and cores reserved for the
   communication by C / (C − k) (``terms.Contention.compute_factor``). It is
   split between the blocks and the root by their forward FLOPs (share s of the blocks), and
   between forward and backward by the forward's share φ of the step's time
   (``Compute.forward_share``: the priced ops' own, a third by FLOPs for a measured step):
   per block f = φt · s/n forward and b = (1 − φ)t · s/n backward; the root f_R = φt ·
   (1 − s), b_R = (1 − φ)t · (1 − s).
   Activation checkpointing adds to each block's backward the recomputation of its forward:
   ``full``, all of it, + f (the blocks' FLOPs are 4/3 of forward + backward, their time
   1 + φ of it: on an H100, Llama 3.2 1B's φ is 0.31, docs/predict.md); ``selective``
   (the outputs of matrix multiplies and attention kept, ``memory.SELECTIVE_SAVED_OPS``),
   only the element-wise ops, no FLOPs: + the forward's share of the step's memory-bound
   time, m · φt · s/n with m the roofline's memory-bound share (nothing when the compute is
   a measured throughput, which has no such split); another framework's selective policy
   that recomputes a share r of the forward matmuls too (``Sharding.recomputed_matmul_share``,
   torchtitan's 0.5) adds r · g · φt · s/n, g the GEMMs' share of the step.
1b. **Work on the parameters** (priced with the operators on a GPU; a measured throughput
   holds its own): memory-bound kernels that scale with the parameters, not the batch, at
   ``MEMORY_FRACTION`` of the bandwidth. FSDP2 copies each all-gather's output into the
   parameters (2p bytes per gathered parameter: read and written) on the compute side, in the
   unit's forward and, resharded, its backward, and copies each gradient into the
   reduce-scatter's input in the reduce dtype (p + r) after the unit's backward; under mixed
   precision each rank casts its fp32 shard before each all-gather ((4 + p)·Ψ/N per gather),
   and the optimizer steps on the shard (``OPTIMIZER_STEP_BYTES``·Ψ/N, once per
   ``Sharding.micro_batches_per_step``), both after the backward. For Llama 3.2 1B on one H100
   (106 B per parameter) that is 49 ms a step, where trainperf measured 49-51 ms of the step
   that does not grow with the batch in plain training and 56-60 ms under FSDP2 on one rank,
   whose collectives are copies there (docs/predict.md, "Work on the parameters").
2. **Traffic** (Rajbhandari et al., "ZeRO: memory optimizations toward training trillion
   parameter models", SC20, §7.2.2): the parameters are all-gathered before the forward,
   the blocks' again before the backward (when resharded after the forward; not with
   ``--no-reshard-after-forward``; never the root's, which FSDP2 keeps gathered), and the
   gradients reduce-scattered: 3Ψ where a DDP all-reduce moves 2Ψ (1.5×), less twice the
   root's bytes. In bytes: p = 2 per parameter gathered under bf16 (FSDP2's
   ``MixedPrecisionPolicy(param_dtype=bf16)``), else 4; r = 4 per gradient reduced (fp32,
   ``reduce_dtype``'s default) or 2 (``fsdp_reduce="bf16"``). Each collective is a ring in the
   α–β model or on a measured bus-bandwidth curve, hierarchical across nodes
   (``trainperf.predict.comm.data_parallel_all_gather_s``), one per block and one for the
   root: ag_B, rs_B of a block's K parameters, ag_R, rs_R of the root's R.
3. **Schedule** (FSDP2's overlap, like DDP's buckets in ``overlap.ddp_step``): collectives run
   one at a time on the link, in the order issued; an issued collective starts when the
   link is free, end = max(issue, link free) + its time. Forward: ag_R and ag_1 issued at
   0; block k starts at max(end of block k−1, end of ag_k) and issues ag_{k+1} as it starts
   (the next block's parameters prefetched during its compute); the root's forward (output
   layer, loss) follows block n. Backward: the root's backward follows at once (the root
   is never resharded after its forward: FSDP2's default for a root); when resharding, ag_n
   is issued as the backward starts; block k (n down to 1) starts at
   max(end of the previous backward, end of ag_k), issues ag_{k−1} as it starts and rs_k as
   it ends (block k's gradients reduce-scattered during block k−1's backward); rs_R is
   issued when the backward ends. So the first all-gather and the last reduce-scatter are
   always exposed, the rest only where the link is slower than the compute.
   t_sync = max(end of the backward, end of rs_R); comm = Σ collective times; then, as for
   DDP, step = t_sync + the shard casts and optimizer (1b) + stragglers(N) + overhead(N);
   exposed communication = t_sync − the compute side's time (operators and copies).
4. **Memory** per rank: ``trainperf.predict.memory.sharded_memory``.
5. **Throughput**: samples/s = global batch / step; tokens/s = samples/s × tokens per
   sample (language models); MFU = samples/s per rank × 3 × forward FLOPs per sample /
   peak (PaLM's model FLOPs: recomputation not counted; for Llama it is 6·N + 12·l·h·q·T).
6. **Smallest number of devices**: ``trainperf.predict.fsdp_search``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

from trainperf.models.attention import AttentionPlan
from trainperf.models.blocks import CHECKPOINTING, NoBlocks
from trainperf.models.custom import CustomModelError
from trainperf.models.spec import ModelSpec, SizeError
from trainperf.predict.attention_kernels import DEFAULT_ATTENTION_KERNEL, attention_kernel_named
from trainperf.predict.comm import data_parallel_all_gather_s, data_parallel_reduce_scatter_s
from trainperf.predict.compute import (
    MEMORY_FRACTION,
    OPTIMIZER_STEP_BYTES,
    Compute,
    baseline_inputs,
    compute_curve,
    compute_rate,
    optimizer_step_s,
)
from trainperf.predict.inputs import (
    NOTHING_MEASURED,
    Measured,
    Placement,
    PredictError,
    Workload,
    finite_prediction,
    layout,
    link_costs,
    node_path_notes,
    placement_inputs,
    prepare,
    scaled_rows,
    uplink_input,
)
from trainperf.predict.memory import (
    ACTIVATION_BYTES,
    WORKSPACE_FRACTION,
    BlockCounts,
    FusedAttention,
    block_counts,
    sharded_memory,
)
from trainperf.predict.overlap import contention_of
from trainperf.predict.roofline import OpProfile, zoo_step_profile
from trainperf.predict.terms import Contention, compute_stretch_words

REDUCE_BYTES = {"fp32": 4, "bf16": 2}


@dataclass(frozen=True)
class Sharding:
    """FSDP's options (``trainperf.parallel.fsdp``), checked when made."""

    activation_checkpointing: str = "none"
    reshard_after_forward: bool = True
    fsdp_reduce: str = "fp32"
    # Another framework's selective policy that also recomputes this share of the blocks'
    # forward matmuls (trainperf's keeps them all: 0). torchtitan's per-op policy saves
    # every second ``aten.mm`` output (``_custom_policy`` of its parallelize_llama.py): 0.5.
    # Not a trainperf option: for predicting published runs of such frameworks.
    recomputed_matmul_share: float = 0.0
    # Another framework's gradient accumulation: this many micro-batches per optimizer step,
    # each with its own all-gathers and reduce-scatters (Composer's FSDP reduce-scatters every
    # micro-batch); a row is one micro-batch, the optimizer's step priced once per this many.
    # Not a trainperf option: for predicting published runs of such frameworks.
    micro_batches_per_step: int = 1
    # The fused attention kernel the framework runs (``predict.attention_kernels``): PyTorch's
    # SDPA's flash kernel is FlashAttention-2 (trainperf's runs; on Hopper PyTorch may pick
    # cuDNN's, priced the same); llm-foundry's MPT runs ran the Triton FlashAttention.
    # Not a trainperf option: for predicting published runs of such frameworks.
    attention_kernel: str = DEFAULT_ATTENTION_KERNEL

    def __post_init__(self) -> None:
        attention_kernel_named(self.attention_kernel)  # PredictError naming the allowed kernels
        if self.activation_checkpointing not in CHECKPOINTING:
            raise PredictError(
                f"unknown activation checkpointing '{self.activation_checkpointing}': "
                f"allowed {', '.join(CHECKPOINTING)}"
            )
        share = self.recomputed_matmul_share
        if not 0 <= share <= 1:
            raise PredictError(f"recomputed matmul share must be from 0 to 1, got {share}")
        if share and self.activation_checkpointing != "selective":
            raise PredictError("a recomputed matmul share needs selective checkpointing")
        if self.micro_batches_per_step < 1:
            raise PredictError(
                f"micro-batches per step must be 1 or more, got {self.micro_batches_per_step}"
            )
        if self.fsdp_reduce not in REDUCE_BYTES:
            raise PredictError(
                f"unknown FSDP reduce dtype '{self.fsdp_reduce}': allowed {', '.join(REDUCE_BYTES)}"
            )

    def param_bytes(self, precision: str) -> int:
        """Bytes per gathered parameter: bf16 under bf16's mixed-precision policy, else fp32."""
        return 2 if precision == "bf16" else 4

    def reduce_bytes(self, precision: str) -> int:
        if self.fsdp_reduce == "bf16" and precision != "bf16":
            raise PredictError("FSDP reduce bf16 needs precision bf16 (the gradients are fp32)")
        return REDUCE_BYTES[self.fsdp_reduce] if precision == "bf16" else 4


@dataclass(frozen=True)
class StepParts:
    """Seconds of the pieces of one sharded step on one rank (module doc, 1-3)."""

    blocks: int
    block_forward_s: float
    block_backward_s: float  # recomputation included
    root_forward_s: float
    root_backward_s: float
    block_all_gather_s: float
    root_all_gather_s: float
    block_reduce_scatter_s: float
    root_reduce_scatter_s: float
    reshard_after_forward: bool = True

    @property
    def compute_s(self) -> float:
        per_block = self.block_forward_s + self.block_backward_s
        return self.blocks * per_block + self.root_forward_s + self.root_backward_s


@dataclass(frozen=True)
class ParameterWork:
    """Seconds of memory-bound work one rank does per step on parameters rather than on
    activations (module doc, 1b): FSDP2's copies around its collectives, in the units'
    compute, and the shard casts and optimizer step, after the backward."""

    block_forward_s: float  # per block
    block_backward_s: float
    root_forward_s: float
    root_backward_s: float
    after_backward_s: float
    optimizer_priced: bool

    def compute_side_s(self, blocks: int) -> float:
        """The copies, which run in the units' forward and backward."""
        per_block = self.block_forward_s + self.block_backward_s
        return blocks * per_block + self.root_forward_s + self.root_backward_s

    def total_s(self, blocks: int) -> float:
        return self.compute_side_s(blocks) + self.after_backward_s


def parameter_work(
    counts: BlockCounts, ranks: int, sharding: Sharding, precision: str, bandwidth: float
) -> ParameterWork:
    """The bytes of module doc 1b at MEMORY_FRACTION of ``bandwidth`` (bytes/s): per gathered
    parameter 2p (the all-gather's output copied into the parameter), per gradient p + r
    (copied into the reduce-scatter's input in the reduce dtype), per shard parameter 4 + p
    before each all-gather under mixed precision (the fp32 shard cast), and the optimizer
    step's ``OPTIMIZER_STEP_BYTES`` per shard parameter (once per
    ``Sharding.micro_batches_per_step``)."""
    p, r = sharding.param_bytes(precision), sharding.reduce_bytes(precision)
    rate = MEMORY_FRACTION * bandwidth
    block_gathers = 2 if sharding.reshard_after_forward else 1
    copy_out, copy_in = 2 * p, p + r
    block, root = counts.block_params, counts.root_params
    gathered = counts.blocks * block * block_gathers + root  # the root is gathered once
    cast = (4 + p) * gathered / ranks if p != 4 else 0.0
    shard = counts.trainable_params / ranks / sharding.micro_batches_per_step
    optimizer = optimizer_step_s(counts.optimizer, shard, rate)
    return ParameterWork(
        block_forward_s=copy_out * block / rate,
        block_backward_s=(copy_out * (block_gathers - 1) + copy_in) * block / rate,
        root_forward_s=copy_out * root / rate,
        root_backward_s=copy_in * root / rate,
        after_backward_s=cast / rate + (optimizer or 0.0),
        optimizer_priced=optimizer is not None,
    )


NO_PARAMETER_WORK = ParameterWork(0.0, 0.0, 0.0, 0.0, 0.0, optimizer_priced=False)


def fsdp_step(parts: StepParts) -> tuple[float, float]:
    """(t_sync, comm_s) of the schedule of the module doc (3)."""
    link_free = comm = 0.0

    def collective(issued: float, seconds: float) -> float:
        nonlocal link_free, comm
        link_free = max(link_free, issued) + seconds
        comm += seconds
        return link_free

    root_ready = collective(0.0, parts.root_all_gather_s)
    ready = collective(0.0, parts.block_all_gather_s)
    t = 0.0
    for k in range(parts.blocks):
        start = max(t, ready)
        if k + 1 < parts.blocks:
            ready = collective(start, parts.block_all_gather_s)
        t = start + parts.block_forward_s
    t = max(t, root_ready) + parts.root_forward_s
    if parts.reshard_after_forward:  # the blocks only: the root stays gathered
        ready = collective(t, parts.block_all_gather_s)
    t += parts.root_backward_s
    for k in range(parts.blocks):
        start = max(t, ready)
        if parts.reshard_after_forward and k + 1 < parts.blocks:
            ready = collective(start, parts.block_all_gather_s)
        t = start + parts.block_backward_s
        collective(t, parts.block_reduce_scatter_s)
    return max(t, collective(t, parts.root_reduce_scatter_s)), comm


def traffic_bytes(
    counts: BlockCounts, param_bytes: int, reduce_bytes: int, reshard_after_forward: bool
) -> dict[str, float]:
    """Bytes of the tensors all-gathered and reduce-scattered per step (module doc, 2); a
    rank sends (N−1)/N of each."""
    gathered = param_bytes * counts.params
    blocks = param_bytes * (counts.params - counts.root_params)  # the root is not resharded
    return {
        "all_gather_forward": float(gathered),
        "all_gather_backward": float(blocks if reshard_after_forward else 0),
        "reduce_scatter": float(reduce_bytes * counts.trainable_params),
    }


@lru_cache(maxsize=16)
def fused_attention_profile(spec: ModelSpec, size: int, plan: AttentionPlan) -> OpProfile:
    """The roofline's ops of a training step with attention as ``plan``'s kernel runs it
    (``memory.FusedAttention``): a fused kernel's O(L) traffic, not the math path's L²
    probabilities."""
    with FusedAttention(plan):
        return zoo_step_profile(spec, size)


def blocks_of(spec: ModelSpec, size: int | None, plan: AttentionPlan) -> BlockCounts:
    """The model's blocks as FSDP shards them (``memory.block_counts``); ``PredictError``
    for a model or size that has none."""
    try:
        return block_counts(spec, size, plan)
    except (SizeError, CustomModelError, NoBlocks) as exc:
        raise PredictError(str(exc)) from None


def _recompute_s(compute: Compute, batch: int, sharding: Sharding) -> float:
    """Seconds the checkpointed blocks' recomputation adds to the whole step, before the
    blocks' share is taken (module doc, 1)."""
    forward = compute.forward_share(batch) * compute.seconds(batch)
    if sharding.activation_checkpointing == "full":
        return forward
    if sharding.activation_checkpointing == "selective":
        matmuls = sharding.recomputed_matmul_share * (compute.class_share(batch, "gemm") or 0.0)
        return forward * ((compute.memory_bound_share(batch) or 0.0) + matmuls)
    return 0.0


def predict_fsdp(
    workload: Workload,
    placement: Placement,
    measured: Measured = NOTHING_MEASURED,
    sharding: Sharding = Sharding(),
    explain: bool = False,
) -> dict[str, Any]:
    """One row per device count of ``workload`` trained with FSDP on ``placement`` (module
    doc), with what was ``measured``, as ``trainperf.predict.model.predict``. Returns
    ``{"rows", "assumptions", "inputs"}``, and with ``explain`` the ``compute_curve``;
    raises ``PredictError``."""
    prepared = prepare(workload, placement)
    spec, precision, device = workload.spec, workload.precision, placement.device
    p_bytes, r_bytes = sharding.param_bytes(precision), sharding.reduce_bytes(precision)
    counts = blocks_of(spec, workload.size, prepared.plan)
    priced = prepared.gpu and measured.single_device_throughput is None
    profile = fused_attention_profile(spec, counts.size, prepared.plan) if priced else None
    tokens = spec.tokens_per_sample(counts.size)
    # A language model's step from its operators at the device's kernel rates (item 1), its
    # attention at the run's kernel's rate for this sequence length.
    compute = compute_rate(
        spec,
        device,
        precision,
        measured,
        counts.size,
        profile=profile,
        kernels=bool(tokens),
        batch_size=workload.batch_size,
        attention_kernel=sharding.attention_kernel,
    )
    per_node = placement.per_node
    links, uplink = link_costs(placement.intra, placement.inter, per_node, placement.pcie_uplink)
    nics = placement.nics_per_node
    peak = device.peak_flops(precision) if hasattr(device, "peak_flops") else None
    share = counts.block_flops_share

    def collective(kind: Any, params: int, bytes_each: int, count: int) -> float:
        return kind(
            params * bytes_each, count, per_node, links["intra"], links["inter"], uplink, nics
        )[0]

    # Ranks sharing a host slow each other's compute (measured), as do cores reserved for
    # the communication (terms.Contention.compute_factor); the
    # overlap of the collectives with compute is taken as free, GPU-style.
    contention = contention_of(device, measured)

    bandwidth = getattr(device, "memory_bytes_per_s", None)

    def row(count: int, device_batch: int) -> dict[str, Any]:
        stretch = contention.compute_factor(count, min(count, per_node))
        t = compute.seconds(device_batch) * stretch
        f = compute.forward_share(device_batch)
        recompute = stretch * share * _recompute_s(compute, device_batch, sharding)
        gather, scatter = data_parallel_all_gather_s, data_parallel_reduce_scatter_s
        block, root = counts.block_params, counts.root_params
        # Priced with the operators; a measured step already holds its optimizer and copies.
        work = NO_PARAMETER_WORK
        if priced and bandwidth:
            work = parameter_work(counts, count, sharding, precision, bandwidth)
        parts = StepParts(
            blocks=counts.blocks,
            block_forward_s=f * t * share / counts.blocks + work.block_forward_s,
            block_backward_s=((1 - f) * t * share + recompute) / counts.blocks
            + work.block_backward_s,
            root_forward_s=f * t * (1 - share) + work.root_forward_s,
            root_backward_s=(1 - f) * t * (1 - share) + work.root_backward_s,
            block_all_gather_s=collective(gather, block, p_bytes, count),
            root_all_gather_s=collective(gather, root, p_bytes, count),
            block_reduce_scatter_s=collective(scatter, block, r_bytes, count),
            root_reduce_scatter_s=collective(scatter, root, r_bytes, count),
            reshard_after_forward=sharding.reshard_after_forward,
        )
        synced, comm = fsdp_step(parts)
        busy = parts.compute_s  # the units' compute and FSDP's copies on the compute side
        synced = max(synced, busy)  # equal without communication, but for rounding
        compute_s = busy - work.compute_side_s(counts.blocks)  # the operators
        straggler = measured.noise.straggler_s(count, compute_s)
        sync_overhead = measured.overhead.seconds(count)
        step = synced + work.after_backward_s + straggler + sync_overhead
        samples_per_s = device_batch * count / step
        memory = sharded_memory(
            counts,
            device_batch,
            precision,
            getattr(device, "memory_bytes", None),
            ranks=count,
            param_bytes=p_bytes,
            reduce_bytes=r_bytes,
            checkpointing=sharding.activation_checkpointing,
            reshard_after_forward=sharding.reshard_after_forward,
        )
        traffic = traffic_bytes(counts, p_bytes, r_bytes, sharding.reshard_after_forward)
        return layout(count, per_node, device_batch) | {
            "compute_s": compute_s,
            "forward_share": f,
            "recompute_s": recompute,
            "parameter_work_s": work.total_s(counts.blocks),
            "comm_s": comm,
            "comm_exposed_s": synced - busy,
            "straggler_s": straggler,
            "overhead_s": sync_overhead,
            "step_s": step,
            "samples_per_s": samples_per_s,
            "samples_per_s_per_device": samples_per_s / count,
            "tokens_per_s": samples_per_s * tokens if tokens else None,
            "tokens_per_s_per_device": samples_per_s * tokens / count if tokens else None,
            "mfu": samples_per_s / count * 3 * counts.forward_flops / peak if peak else None,
            "comm_fraction": (synced - busy) / step,
            "comm_bytes": traffic,
            "comm_bytes_per_rank": sum(traffic.values()) * (count - 1) / count,
            "fits": memory.fits,
            "memory": memory.as_dict(),
            "algorithm": gather(1.0, count, per_node, links["intra"], links["inter"], nics=nics)[1],
        }

    baseline, rows = scaled_rows(prepared, workload.batch_size, row)
    prediction = {
        "rows": rows,
        "assumptions": _assumptions(compute, counts, sharding, workload, measured, contention)
        + [_parameter_work_note(counts, sharding, priced and bool(bandwidth))]
        + node_path_notes(placement),
        "inputs": placement_inputs(workload, placement, counts.size)
        | {"parallel": "fsdp", **asdict(sharding), "pcie_uplink": uplink_input(placement)}
        | {
            "params": counts.params,
            "trainable_params": counts.trainable_params,
            "blocks": counts.blocks,
            "block_params": counts.block_params,
            "root_params": counts.root_params,
            "param_bytes": p_bytes,
            "reduce_bytes": r_bytes,
            "tokens_per_sample": tokens,
            "model_flops_per_sample": 3 * counts.forward_flops,
        }
        | baseline_inputs(compute, workload.batch_size, baseline),
    }
    if explain:
        prediction["compute_curve"] = compute_curve(compute, prepared, workload.batch_size)
    return finite_prediction(prediction)


def _parameter_work_note(counts: BlockCounts, sharding: Sharding, priced: bool) -> str:
    if not priced:
        return (
            "optimizer step and FSDP's parameter copies: not priced apart (inside a measured "
            "throughput, or no memory bandwidth known)"
        )
    step = OPTIMIZER_STEP_BYTES.get(counts.optimizer)
    optimizer = (
        f"{counts.optimizer} step {step} B per shard parameter"
        if step is not None
        else f"no {counts.optimizer} step bytes known: its step not priced"
    )
    every = sharding.micro_batches_per_step
    return (
        "optimizer step and FSDP's parameter copies at "
        f"{MEMORY_FRACTION:.0%} of the memory bandwidth: all-gather output copied into the "
        "parameters (read and written in the gathered dtype), gradients copied into "
        "the reduce-scatter input, the fp32 shard cast before each all-gather, the "
        + optimizer
        + (f" once per {every} micro-batches" if every > 1 else "")
        + " (torch's foreach kernels, counted; checked on one H100, docs/predict.md)"
    )


def _assumptions(
    compute: Compute,
    counts: BlockCounts,
    sharding: Sharding,
    workload: Workload,
    measured: Measured,
    contention: Contention,
) -> list[str]:
    noise, overhead, precision = measured.noise, measured.overhead, workload.precision
    p, r = sharding.param_bytes(precision), sharding.reduce_bytes(precision)
    recompute = {
        "none": "no activation checkpointing",
        "full": "full activation checkpointing: each block's forward recomputed in its "
        "backward (the blocks' forward time once more; their FLOPs × 4/3)",
        "selective": "selective activation checkpointing: matmul and attention outputs kept, "
        "the element-wise ops recomputed (no FLOPs; the forward's share of the memory-bound "
        "time, none with a measured throughput)",
    }[sharding.activation_checkpointing]
    return [
        f"compute: {compute.source}, attention as a fused kernel on GPUs; split between the "
        f"{counts.blocks} blocks and the root by forward FLOPs ({counts.block_flops_share:.1%} "
        f"in the blocks); {compute.forward_words(workload.batch_size)}; " + recompute,
        f"FSDP2 as trainperf.parallel.fsdp applies it: each block sharded on its own, the "
        f"root holding the other {counts.root_params:,} parameters; parameters gathered in "
        f"{8 * p}-bit, gradients reduce-scattered in {8 * r}-bit; "
        + (
            "every unit resharded after its forward and gathered again for its backward "
            "(3× the parameters' bytes per step, ZeRO-3)"
            if sharding.reshard_after_forward
            else "nothing resharded after the forward (2× the parameters' bytes per step)"
        ),
        "schedule: collectives one at a time on the link in the order issued; the next "
        "block's all-gather prefetched during the current block's compute, each block's "
        "reduce-scatter during the previous block's backward; the first all-gather and the "
        "last reduce-scatter exposed",
        "all-gather and reduce-scatter: ring, on a measured bus-bandwidth curve where given, "
        "else α–β; above one node hierarchical (across nodes sharing the node's link, then "
        "inside the node)",
        *compute_stretch_words(contention),
        f"stragglers: E[max of N step times] − E[one step], noise from {noise.source}",
        f"per-step data-parallel overhead o(N) = {overhead.base_s * 1e3:.3g} ms + "
        f"{overhead.per_doubling_s * 1e3:.3g} ms · log2 N ({overhead.source})",
        "memory per rank: fp32 weights, gradients and optimizer state sharded 1/N; the root "
        "and two blocks gathered (all of it without resharding); the root's and two blocks' "
        "gradients whole; activations = tensors autograd saves (counted on the meta device, "
        f"{ACTIVATION_BYTES[precision]} B/element), what checkpointing keeps plus one block "
        f"recomputed; +{WORKSPACE_FRACTION:.0%} workspace, +1 GiB CUDA context on GPUs",
        "MFU: 3 × forward FLOPs per sample (PaLM's model FLOPs, recomputation not counted) / "
        "the catalog's training peak (the one measured MFU uses)",
    ]
