"""Predictions of `trainperf predict` against published measurements (docs/predict.md).

Run: .venv/bin/python docs/validate_predict.py  (prints the Markdown tables of predict.md)

Each point is a measurement listed, with its source, in docs/predict-sources.md: every row
there whose network is in the zoo, whose device and links are in the catalog and which
gives an efficiency. Two predictions per point:
  - per-GPU throughput from the catalog alone (training peak x the catalog's default
    achieved fraction): tests the compute model;
  - N-GPU scaling efficiency given the measured single-GPU throughput
    (--single-device-throughput): tests the data-parallel model (communication,
    stragglers, overhead).

Three parameters of the data-parallel model cannot come from a data sheet, so they are
fitted to these rows by least squares of the efficiency (``fit``): the relative step-time
noise of a rank (straggler term), the per-step synchronisation overhead, and the
efficiency of TCP Ethernet links. The catalog holds the fit over the GPU-fabric rows
(``CATALOG_FIT``). Every efficiency in the table is predicted out of sample
(``leave_one_out``): the parameters fitted to all the other rows, of every category, then
the held-out row predicted.

Each point has a category (``CATEGORIES``): "gpu-fabric" (NVLink, NVSwitch, PCIe with
peer-to-peer, network fabrics), "pcie-no-p2p" (GeForce GPUs whose all-reduce goes through
host memory) and "cpu" (CPU nodes, one rank per node); the summary gives the error per
category (``category_summary``), and, as a diagnostic, with the three parameters fitted to
each category apart (``leave_one_out_by_category``).

Sharded data parallelism (FSDP2) is checked apart (``FSDP_POINTS``, ``fsdp_table``):
torchtitan's published Llama runs, llm-foundry's MPT tables and IBM's Llama 2 runs,
predicted from the catalog alone as `trainperf predict --parallel fsdp` predicts them
(tokens/s per GPU, memory per GPU, MFU), with the achieved fraction of peak that would
reproduce each measurement.

After the table, a summary puts the model beside two trivial guesses (``summary``):
"scaling is perfect" (efficiency 1, per-GPU throughput at N GPUs = the measured 1-GPU
throughput) and "the mean of the other rows" (leave-one-out: each row is guessed from the
others' measured values alone). Reported: mean absolute error of efficiency (points) and
median absolute relative error of per-GPU throughput at N GPUs (rows with a measured 1-GPU
and N-GPU throughput).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache, partial

from scipy.optimize import least_squares

from trainperf import models
from trainperf.core.limits import BUCKET_MB_MAX
from trainperf.models.gpt2 import GPT2Config, GPT2LMHeadModel
from trainperf.models.llama import Llama, LlamaConfig
from trainperf.models.spec import CausalLM, ModelSpec
from trainperf.predict.catalog import Catalog
from trainperf.predict.catalog_file import load_catalog
from trainperf.predict.fsdp import Sharding, predict_fsdp
from trainperf.predict.inputs import Measured, Placement, Workload
from trainperf.predict.model import predict
from trainperf.predict.terms import (
    OWN_ENGINE,
    Contention,
    Overhead,
    StepNoise,
    reserved_cores,
)


@dataclass(frozen=True)
class Point:
    """One published measurement (docs/predict-sources.md)."""

    id: str
    model: str
    size: int
    device: str
    precision: str
    batch: int  # per GPU
    gpus: int
    per_node: int
    intra: str | None  # None: one device per node (a CPU node is one rank)
    inter: str | None
    one_gpu: float | None  # measured 1-GPU throughput, samples/s
    n_gpu: float | None  # measured N-GPU throughput; None: the source gives an efficiency
    efficiency: float | None = None
    one_gpu_borrowed: bool = False  # 1-GPU throughput from the same cluster's other table
    category: str = "gpu-fabric"  # one of CATEGORIES
    # Bytes per gradient element all-reduced, as the run did it ("none": fp32; "fp16": cast
    # to 16 bits first, as tf_cnn_benchmarks' replicated variables do under --use_fp16).
    grad_compression: str = "none"
    # DDP-style bucket size of the run's all-reduce; XLA_AFTER_BACKWARD: one all-reduce of
    # every gradient after the backward, nothing overlapped (TensorFlow's XLA, below).
    bucket_mb: float = 25.0
    # How the run's communication and compute share a device; None: the device kind's
    # (a CPU's cores time-shared, a GPU's collectives on their own engines).
    contention: Contention | None = None
    # The batch of the one-device baseline the efficiency is against, where it is not the
    # batch per device of the N-device run (None: the same batch, weak scaling). Efficiency
    # is then throughput(N) / (N · throughput(1) at this batch): strong scaling of a CPU
    # node, whose rate falls as its batch shrinks (compute.CPU_FIXED_SAMPLES).
    one_gpu_batch: int | None = None

    @property
    def measured_efficiency(self) -> float:
        if self.efficiency is not None:
            return self.efficiency
        return self.n_gpu / (self.gpus * self.one_gpu)


def _p(*args, **kwargs) -> Point:
    return Point(*args, **kwargs)


RN, V16, R101, I3 = "resnet50", "vgg16", "resnet101", "inception_v3"
P100, V100P = "p100-pcie-16gb", "v100-pcie-16gb"
# Horovod's 128- and 512-GPU charts give efficiencies only; their clusters are described
# as the 16-GPU one ("4 Pascal GPUs" per server, "RoCE-capable 25 Gbit/s"), whose
# single-GPU throughputs are borrowed for the compute time (marked one_gpu_borrowed).
HVD_ONE = {I3: 134.4, R101: 119.4, V16: 130.9}

POINTS = [
    _p("dle-tf-rn50-dgx1-fp32", RN, 224, "v100-sxm2-16gb", "fp32", 128, 8, 8, "nvlink2", None, 412, 3170),
    _p("dle-tf-rn50-dgx1-amp", RN, 224, "v100-sxm2-16gb", "fp16", 256, 8, 8, "nvlink2", None, 1270, 9510),
    _p("dle-tf-rn50-dgx2-fp32", RN, 224, "v100-sxm2-32gb", "fp32", 128, 16, 16, "nvswitch-v100", None, 432, 6500),
    _p("dle-tf-rn50-dgx2-amp", RN, 224, "v100-sxm2-32gb", "fp16", 256, 16, 16, "nvswitch-v100", None, 1300, 17250),
    _p("dle-tf-rn50-dgxa100-tf32", RN, 224, "a100-sxm4-40gb", "tf32", 256, 8, 8, "nvlink3", None, 909, 7000),
    _p("dle-tf-rn50-dgxa100-amp", RN, 224, "a100-sxm4-40gb", "fp16", 256, 8, 8, "nvlink3", None, 2375, 17400),
    _p("dle-pyt-rn50-dgx1-fp32", RN, 224, "v100-sxm2-16gb", "fp32", 112, 8, 8, "nvlink2", None, 367, 2855),
    _p("dle-pyt-rn50-dgx1-amp", RN, 224, "v100-sxm2-16gb", "fp16", 256, 8, 8, "nvlink2", None, 1200, 8322),
    _p("dle-pyt-rn50-dgxa100-tf32", RN, 224, "a100-sxm4-80gb", "tf32", 256, 8, 8, "nvlink3", None, 938, 7248),
    _p("dle-pyt-rn50-dgxa100-amp", RN, 224, "a100-sxm4-80gb", "fp16", 256, 8, 8, "nvlink3", None, 2470, 16621),
    _p("dle-mx-rn50-dgx1-fp32", RN, 224, "v100-sxm2-16gb", "fp32", 96, 8, 8, "nvlink2", None, 384, 3005),
    _p("dle-mx-rn50-dgx1-amp", RN, 224, "v100-sxm2-16gb", "fp16", 192, 8, 8, "nvlink2", None, 1376, 10723),
    _p("dle-mx-rn50-dgx2-fp32", RN, 224, "v100-sxm2-32gb", "fp32", 128, 16, 16, "nvswitch-v100", None, 417, 6338),
    _p("dle-mx-rn50-dgx2-amp", RN, 224, "v100-sxm2-32gb", "fp16", 256, 16, 16, "nvswitch-v100", None, 1492, 21484),
    _p("dle-mx-rn50-dgxa100-tf32", RN, 224, "a100-sxm4-80gb", "tf32", 256, 8, 8, "nvlink3", None, 1022, 8001),
    _p("dle-mx-rn50-dgxa100-amp", RN, 224, "a100-sxm4-80gb", "fp16", 256, 8, 8, "nvlink3", None, 2180, 16925),
    _p("goyal17-rn50-bigbasin", RN, 224, "p100-sxm2-16gb", "fp32", 32, 256, 8, "nvlink1", "ethernet-50g", None, None, 0.90),
    _p("horovod17-16gpu-rdma-inception3", I3, 299, P100, "fp32", 64, 16, 4, "pcie3", "roce-25g", 134.4, 2022.6),
    _p("horovod17-16gpu-rdma-resnet101", R101, 224, P100, "fp32", 64, 16, 4, "pcie3", "roce-25g", 119.4, 1746.2),
    _p("horovod17-16gpu-rdma-vgg16", V16, 224, P100, "fp32", 64, 16, 4, "pcie3", "roce-25g", 130.9, 1787.4),
    _p("horovod17-16gpu-tcp-vgg16", V16, 224, P100, "fp32", 64, 16, 4, "pcie3", "ethernet-25g", 130.9, 1308.7),
    _p("horovod17-64gpu-40g-inception3", I3, 299, P100, "fp32", 64, 64, 4, "pcie3", "ethernet-40g", 148.8, 7932.1),
    _p("horovod17-64gpu-40g-resnet101", R101, 224, P100, "fp32", 64, 64, 4, "pcie3", "ethernet-40g", 136.0, 7741.6),
    _p("horovod17-64gpu-40g-vgg16", V16, 224, P100, "fp32", 64, 64, 4, "pcie3", "ethernet-40g", 149.6, 6084.2),
    *(
        _p(f"horovod-{n}gpu-25g-{short}", model, size, P100, "fp32", 64, n, 4, "pcie3", "roce-25g",
           HVD_ONE[model], None, eff, one_gpu_borrowed=True)
        for n, effs in ((128, (0.90, 0.90, 0.79)), (512, (0.90, 0.90, 0.68)))
        for (short, model, size), eff in zip(
            (("inception3", I3, 299), ("resnet101", R101, 224), ("vgg16", V16, 224)), effs, strict=False
        )
    ),
    _p("dell-readyai-32gpu-tf-fp32", RN, 224, V100P, "fp32", 64, 32, 4, "pcie3", "ib-edr", None, None, 0.688),
    _p("dell-readyai-32gpu-tf-fp16", RN, 224, V100P, "fp16", 64, 32, 4, "pcie3", "ib-edr", None, None, 0.741),
]

# The kinds of rows, each with its own leave-one-out error in the summary: GPUs whose
# collectives have their own engine and peer-to-peer or a network fabric ("gpu-fabric"),
# GeForce GPUs without PCIe peer-to-peer whose all-reduce goes through host memory
# ("pcie-no-p2p"), and CPU nodes whose all-reduce runs on the cores ("cpu").
CATEGORIES = ("gpu-fabric", "pcie-no-p2p", "cpu")

# Lambda's 8 x RTX 2080 Ti server (no peer-to-peer: every entry of TensorFlow's peer-access
# matrix is N), tf_cnn_benchmarks, replicated variables with NCCL all-reduce, synthetic
# data, XLA, TensorFlow 1.15: the run Lambda publishes in tf-train-throughput-{fp32,fp16}.csv.
# Per-GPU batch from the logs' "N per device"; throughputs the logs' "total images/sec".
LAMBDA = {  # (network, size, precision, batch per GPU): 1-, 2-, 4-, 8-GPU images/s
    ("resnet50", 224, "fp32", 64): (321.30, 569.30, 1101.22, 2165.08),
    ("resnet50", 224, "fp16", 128): (770.01, 1442.77, 2804.51, 5540.23),
    ("resnet152", 224, "fp32", 32): (122.38, 194.29, 368.63, 712.58),
    ("resnet152", 224, "fp16", 64): (297.05, 513.66, 971.93, 1891.08),
    ("inception_v3", 299, "fp32", 64): (214.01, 379.44, 741.39, 1475.17),
    ("inception_v3", 299, "fp16", 128): (450.12, 828.62, 1599.15, 3262.60),
    ("inception_v4", 299, "fp32", 16): (84.17, 131.22, 249.61, 490.66),
    ("inception_v4", 299, "fp16", 32): (197.82, 336.19, 632.98, 1222.14),
    ("vgg16", 224, "fp32", 56): (190.46, 275.06, 493.71, 960.65),
    ("vgg16", 224, "fp16", 120): (400.09, 653.23, 1261.94, 2541.55),
    ("alexnet", 224, "fp32", 512): (4184.27, 5986.95, 10368.89, 20045.87),
    ("alexnet", 224, "fp16", 1024): (5297.08, 9223.84, 17878.20, 35393.60),
}
# tf_cnn_benchmarks' replicated variables all-reduce fp16 gradients under --use_fp16:
# VariableMgrLocalReplicated.preprocess_device_grads compacts them when use_fp16 and
# --compact_gradient_transfer (default True) hold (tensorflow/benchmarks, variable_mgr.py).
# XLA: TensorFlow's auto-clustering compiles the step's computation into clusters that the
# NCCL all-reduce ops stay outside of; the gradients leave the clusters when the backward
# ends, so nothing overlaps (NVIDIA/DeepLearningExamples#156, "When XLA is used, bert nvprof
# shows no compute and communication overlap", NVIDIA's answer: "Clustering still has some
# issues due to loss of concurrency"). One bucket of every gradient, after the backward.
XLA_AFTER_BACKWARD = BUCKET_MB_MAX
PCIE_NO_P2P_POINTS = [
    _p(f"lambda-2080ti-x{n}-{model.replace('_', '')}-{precision}", model, size, "rtx-2080-ti",
       precision, batch, n, 8, "pcie3-staged", None, rates[0], rates[i],
       category="pcie-no-p2p", grad_compression="fp16" if precision == "fp16" else "none",
       bucket_mb=XLA_AFTER_BACKWARD)
    for (model, size, precision, batch), rates in LAMBDA.items()
    for i, n in ((1, 2), (2, 4), (3, 8))
]

# Intel Caffe's multi-node runs communicate through MLSL, whose endpoint servers run on cores
# reserved for them: scripts/set_env.sh pins them ("# first cpu reserved for EP server",
# MLSL_SERVER_AFFINITY) and gives the compute the rest ("numthreads_per_proc=$(((total_cores/
# ppn-numservers)*threadspercore))"), the one-node runs of the same script too (MLPerf's
# run_and_time scripts pass --ppn 4 --num_mlsl_servers 1 on 1 and on 8 nodes). The all-reduce
# then takes no time from the backward's cores: the host model's "own engine" on a CPU.
MLSL_SERVERS = replace(
    OWN_ENGINE, source="MLSL's endpoint servers on cores reserved for them (set_env.sh)"
)

# CPU nodes, one rank per node (the device is the node). Dell EMC's Zenith: Intel Caffe +
# MLSL, ResNet-50, Omni-Path, "total batch kept <= 8k" (assumption: 8,192 / nodes per node,
# rounded down); efficiencies only. tensorflow/benchmarks#397: TensorFlow + Horovod,
# tf_cnn_benchmarks, fabric and batch not stated (assumptions: ethernet-10g; the batch
# tf_cnn_benchmarks runs without --batch_size, its model's default: 64 for ResNet-50 and 512
# for AlexNet, predict-sources.md [TFB-DEFAULTS]).
G6148, G6126 = "xeon-gold-6148-2s", "xeon-gold-6126-2s"
TFB397 = {  # (framework, network, batch): 1-, 2-, 4-, 8-node images/s
    ("mkl", "resnet50", 64): (33, 73, 118, 222),
    ("mkl", "alexnet", 512): (192, 241, 260, 377),
    ("eigen", "resnet50", 64): (11, 23, 46, 91),
    ("eigen", "alexnet", 512): (112, 207, 343, 597),
}
# Dell's Zenith runs used Intel Caffe 1.0.4, whose scripts/run_intelcaffe.sh starts no MLSL
# server on one node and 2 on each of several Xeon nodes, pinned to cores of their own, the
# compute on the rest ("numthreads=$(((maxcores-numservers)*threadspercore))"): 38 of a 6148
# node's 40 cores above one node, all 40 on one.
MLSL_104_SERVERS = reserved_cores(
    2, load_catalog().device(G6148).cores,
    "Intel Caffe 1.0.4's run_intelcaffe.sh: 2 MLSL servers per node above one node, none on one",
)
# Dell's efficiencies are against one node at its best batch, which the runs above 128 nodes
# lowered: "the first being decreasing node batch size. Individual nodes tend to offer the best
# performance with larger batch sizes, but to keep the overall batch below 8k, the node batch
# size is decreased. Each node is then running a suboptimal batch size" ([DELL18] p. 4). The
# one-node batch is not stated; taken: the largest per-node batch of the series (128 nodes'),
# the smallest the sentence allows (docs/predict-sources.md, "CPU nodes").
ZENITH_ONE_NODE_BATCH = 8192 // 128
CPU_POINTS = [
    *(
        _p(f"dell-zenith-skl6148-rn50-n{n}", RN, 224, G6148, "fp32", 8192 // n, n, 1, None,
           "omnipath", None, None, eff, category="cpu", contention=MLSL_104_SERVERS,
           one_gpu_batch=ZENITH_ONE_NODE_BATCH)
        for n, eff in ((128, 0.90), (256, 0.83), (314, 0.76))
    ),
    *(
        _p(f"tfb397-{framework}-{model}-skl6126-n{n}", model, 224, G6126, "fp32", batch, n, 1,
           None, "ethernet-10g", rates[0], rates[i], category="cpu")
        for (framework, model, batch), rates in TFB397.items()
        for i, n in ((1, 2), (2, 4), (3, 8))
    ),
    # Intel's MLPerf Training v0.5 ResNet-50 (Intel Caffe + MLSL, 4 processes x 32 images
    # per node, fp32, real ImageNet data): 1 and 8 nodes of 2 x Platinum 8180 over "10Gb
    # Ethernet" (entry.json). Throughputs: an epoch's images over the median seconds from
    # each train_epoch to the next eval_start in the MLPerf logs (predict-sources.md).
    _p("mlperf05-intel-skx8180-rn50-n8", RN, 224, "xeon-platinum-8180-2s", "fp32", 128, 8,
       1, None, "ethernet-10g", 134.2, 1043.3, category="cpu", contention=MLSL_SERVERS),
]

POINTS += PCIE_NO_P2P_POINTS + CPU_POINTS

# The rows of docs/predict-sources.md not predicted, and why (a test checks that every row
# there is either a point or here).
EXCLUDED = {
    **{
        key: "BERT-large pre-training: the zoo has BERT-base (bert-squad), and the gradient "
        "accumulation of the throughput runs is not stated (V100) or changes with the node "
        "count (A100)"
        for key in (
            "dle-bert-dgx1-16n-seq128", "dle-bert-dgx1-16n-seq512",
            "dle-bert-dgx2h-64n-seq128", "dle-bert-dgx2h-64n-seq512",
            "dle-bert-dgxa100-32n-seq128-amp", "dle-bert-dgxa100-32n-seq512-amp",
            "dle-bert-dgxa100-32n-seq512-tf32",
        )
    },
    "horovod-512gpu-25g": "split into one point per network (horovod-512gpu-25g-*)",
    "horovod-128gpu-25g": "split into one point per network (horovod-128gpu-25g-*)",
    "dell-c4140m-scaleout": "GPU count not confirmed (probably 8) and precision not stated",
    "mlperf30-h100-rn50-ttt": "time to train, not a throughput: batch and epochs differ",
}

# CPU rows of docs/predict-sources.md not predicted.
EXCLUDED |= {
    **{
        f"paddle-{version}-vgg16-bdw-t{n}": "parameter-server training (asynchronous pushes "
        "to 20 parameter servers), not a data-parallel all-reduce; single-thread trainers "
        "(MKL_NUM_THREADS=1) on an E5-2620 v4 not in the catalog"
        for version in ("fluid", "v2")
        for n in (20, 40, 80, 100)
    },
    "mlperf10-cpx-rn50-n2-vs-n1": "the 1-node run is another SKU (8-socket Platinum 8380H, "
    "2.9 GHz) than the 2-node one (8376H, 2.6 GHz); Cooper Lake bf16 peak and fabric not "
    "in the sources",
    "mlperf10-cpx-rn50-n8-vs-n2": "8 nodes against 2 changes both the global batch (3,264 "
    "to 4,096) and the per-worker batch (204 to 64); bf16 peak and fabric not in the sources",
}

# Rows of docs/predict-sources.md about sharded data parallelism that are not predicted.
EXCLUDED |= {
    "tt-a100-llama3-8b-64gpu-layer-ac": "selective checkpointing per layer (every other "
    "block checkpointed whole): not a checkpointing mode of trainperf",
}

# MosaicML's MPT models of llm-foundry's benchmark tables (docs/predict-sources.md, [LLMF]):
# GPT-2's layout (pre-LayerNorm blocks with biases, learned positions, GELU MLP of 4 d, the
# output layer tied to the embedding) at (d_model, heads, layers), vocabulary 50,368; the
# parameter counts equal the tables' NumParams (tests/predict/test_validate_summary.py).
MPT_SHAPES = {
    "mpt-760m": (1536, 12, 24),
    "mpt-1b": (2048, 16, 24),
    "mpt-3b": (2560, 20, 32),
    "mpt-7b": (4096, 32, 32),
    "mpt-13b": (5120, 40, 40),
    "mpt-30b": (7168, 56, 48),
    "mpt-70b": (8192, 64, 80),
}
MPT_VOCAB = 50368


def _mpt_model(name: str, seq: int) -> GPT2LMHeadModel:
    d, heads, layers = MPT_SHAPES[name]
    config = GPT2Config(MPT_VOCAB, seq, layers, heads, d, dropout=0.0)
    return GPT2LMHeadModel(config)


# The Llama 2 shapes IBM's fms-fsdp trained (docs/predict-sources.md, [IBM-FSDP]):
# fms_fsdp/utils/config_utils.py at f1460f2 (2024-02-21, the commit of its throughput table),
# as "aligned with FMS config" that day: 7B and 13B with one key-value head per query head,
# 34B and 70B with 8 (kvheads=8); vocabulary 32,000, untied output, RoPE base 10,000. The
# zoo's Llama at these shapes counts Llama 2's published parameters exactly (7B
# 6,738,415,616; 13B 13,015,864,320; 70B 68,976,648,192: tests/predict/test_validate_summary.py).
LLAMA2_SHAPES = {
    "llama2-7b": LlamaConfig(dim=4096, layers=32, heads=32, kv_heads=32, ffn_dim=11008,
                             vocab_size=32000, max_seq_len=4096, rope_theta=10000.0),
    "llama2-13b": LlamaConfig(dim=5120, layers=40, heads=40, kv_heads=40, ffn_dim=13824,
                              vocab_size=32000, max_seq_len=4096, rope_theta=10000.0),
    "llama2-34b": LlamaConfig(dim=8192, layers=48, heads=64, kv_heads=8, ffn_dim=22016,
                              vocab_size=32000, max_seq_len=4096, rope_theta=10000.0),
    "llama2-70b": LlamaConfig(dim=8192, layers=80, heads=64, kv_heads=8, ffn_dim=28672,
                              vocab_size=32000, max_seq_len=4096, rope_theta=10000.0),
}


@cache
def model_spec(name: str, seq: int) -> ModelSpec:
    """The zoo's model, an MPT model of llm-foundry at sequence length ``seq``, or a Llama 2
    shape of IBM's fms-fsdp."""
    if name in LLAMA2_SHAPES:
        config = LLAMA2_SHAPES[name]
        return ModelSpec(
            name=name, family="llama", task=CausalLM(vocab_size=config.vocab_size),
            factory=partial(Llama, config), natural_size=seq, min_size=1,
            max_size=config.max_seq_len, optimizer="adamw",
            description=f"Llama 2 {name.removeprefix('llama2-')} as fms-fsdp trains it",
        )
    if name not in MPT_SHAPES:
        return models.get(name)
    return ModelSpec(
        name=name, family="gpt2", task=CausalLM(vocab_size=MPT_VOCAB),
        factory=partial(_mpt_model, name, seq), natural_size=seq, min_size=1, max_size=seq,
        optimizer="adamw", description=f"MosaicML {name}, llm-foundry's benchmark shape",
    )


@dataclass(frozen=True)
class FsdpPoint:
    """One published FSDP (FULL_SHARD, ZeRO-3) run (docs/predict-sources.md, sharded)."""

    id: str
    model: str
    device: str
    gpus: int
    intra: str
    inter: str | None
    batch: int  # per GPU (micro-batch), sequences of ``size`` tokens
    checkpointing: str
    tokens_per_gpu: float  # measured, tokens/s
    memory_gib: float | None  # measured peak per GPU
    size: int = 8192
    # NICs of the inter-node link per node in the measured system (--nics-per-node).
    nics: int = 1
    # torchtitan's selective policy also recomputes every second matmul of a block
    # (predict-sources.md, "Selective checkpointing differs"): Sharding's 0.5.
    recomputed_matmul_share: float = 0.0
    # Micro-batches per optimizer step (the tables' gradient accumulation): each one a row's
    # step with its FSDP traffic, the optimizer once per this many.
    grad_accum: int = 1
    # Composer's PURE mixed precision reduces the gradients in bf16 (predict-sources.md).
    fsdp_reduce: str = "fp32"
    per_node: int = 8
    precision: str = "bf16"
    # The fused attention kernel of the run (trainperf.predict.attention_kernels): torchtitan
    # runs PyTorch's SDPA (FlashAttention-2); llm-foundry's tables ran attn_impl triton.
    attention_kernel: str = "flash-attention-2"

    @property
    def generation(self) -> str:
        """The GPU generation whose kernel rates the point shares (its die)."""
        return self.device.split("-")[0]


LF, TT = "llm-foundry", "torchtitan"
FSDP_POINTS = [
    # Grand Teton's 96 GB, 500 W H100s; "400 Gb/s per GPU", 8 GPUs per host: 8 NDR ports
    # per node.
    FsdpPoint("tt-h100-llama31-8b-8gpu", "llama3-8b", "h100-sxm-96gb", 8, "nvlink4", None, 2,
              "selective", 5762, 82.4, recomputed_matmul_share=0.5),
    FsdpPoint("tt-h100-llama31-8b-128gpu", "llama3-8b", "h100-sxm-96gb", 128, "nvlink4",
              "ib-ndr", 2, "selective", 5605, 67.0, nics=8, recomputed_matmul_share=0.5),
    # The A100 cluster's links are not published: 8 HDR ports per node assumed, as
    # llm-foundry's A100 clusters ("1600 Gbps node-node interconnect").
    FsdpPoint("tt-a100-llama3-8b-64gpu", "llama3-8b", "a100-sxm4-80gb", 64, "nvlink3",
              "ib-hdr", 1, "selective", 2973, None, nics=8, recomputed_matmul_share=0.5),
    FsdpPoint("tt-a100-llama3-70b-64gpu", "llama3-70b", "a100-sxm4-80gb", 64, "nvlink3",
              "ib-hdr", 1, "full", 331, None, nics=8),
]


def _lf(model: str, seq: int, device: str, gpus: int, batch: int, checkpointing: bool,
        tokens: float, accum: int, pure: bool = False) -> FsdpPoint:
    """A row of llm-foundry's tables: A100 clusters "with 1600 Gbps node-node interconnect
    (RoCE)", 8 x 200 Gb/s per node (ib-hdr x 8); the H100 tables state no network, taken as
    one 400 Gb/s NDR port per GPU (an assumption, marked in predict-sources.md)."""
    a100 = device.startswith("a100")
    size = device.split("-")[-1] if a100 else "80gb"
    return FsdpPoint(
        f"lf-{model}-s{seq}-{gpus}x{device.split('-')[0]}-{size}", model, device, gpus,
        "nvlink3" if a100 else "nvlink4", ("ib-hdr" if a100 else "ib-ndr") if gpus > 8 else None,
        batch, "full" if checkpointing else "none", tokens, None, size=seq, nics=8,
        grad_accum=accum, fsdp_reduce="bf16" if pure else "fp32",
        attention_kernel="flash-attention-triton",
    )


A40, A80, H80 = "a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm"
FSDP_POINTS += [
    _lf("mpt-70b", 2048, H80, 512, 8, True, 1007, 1),
    _lf("mpt-70b", 2048, H80, 128, 8, True, 1058, 1),
    _lf("mpt-70b", 2048, H80, 64, 8, True, 1039, 4),
    _lf("mpt-30b", 2048, H80, 128, 8, True, 2199, 1),
    _lf("mpt-30b", 2048, H80, 8, 3, True, 2002, 21),
    _lf("mpt-13b", 2048, H80, 128, 16, True, 5080, 1),
    _lf("mpt-13b", 2048, H80, 8, 2, False, 4792, 1),
    _lf("mpt-7b", 2048, H80, 128, 6, False, 10475, 1),
    _lf("mpt-7b", 2048, H80, 512, 6, False, 9670, 1),
    _lf("mpt-7b", 2048, H80, 8, 6, False, 10643, 1),
    _lf("mpt-7b", 4096, H80, 8, 16, True, 8611, 2),
    _lf("mpt-3b", 2048, H80, 64, 6, False, 22525, 3),
    _lf("mpt-3b", 2048, H80, 16, 10, False, 24142, 3),
    _lf("mpt-1b", 2048, H80, 64, 20, False, 44402, 1),
    _lf("mpt-1b", 2048, H80, 8, 14, False, 45455, 1),
    _lf("mpt-70b", 2048, A80, 64, 8, True, 410, 4, pure=True),
    _lf("mpt-70b", 2048, A80, 32, 2, True, 373, 16, pure=True),
    _lf("mpt-30b", 2048, A80, 8, 3, True, 916, 21),
    _lf("mpt-13b", 2048, A80, 8, 2, False, 2262, 3),
    _lf("mpt-7b", 2048, A80, 8, 6, False, 4641, 2),
    _lf("mpt-7b", 4096, A80, 8, 16, True, 3684, 2),
    _lf("mpt-3b", 2048, A80, 8, 10, False, 10811, 2),
    _lf("mpt-1b", 2048, A80, 8, 14, False, 20513, 4),
    _lf("mpt-70b", 2048, A40, 128, 4, True, 376, 1, pure=True),
    _lf("mpt-70b", 2048, A40, 64, 2, True, 276, 1, pure=True),
    _lf("mpt-30b", 2048, A40, 128, 6, True, 865, 1, pure=True),
    _lf("mpt-13b", 2048, A40, 128, 16, True, 1972, 1, pure=True),
    _lf("mpt-13b", 2048, A40, 8, 4, True, 1668, 16, pure=True),
    _lf("mpt-7b", 2048, A40, 128, 18, True, 3623, 1, pure=True),
    _lf("mpt-7b", 2048, A40, 8, 12, True, 3679, 4, pure=True),
    _lf("mpt-3b", 2048, A40, 128, 6, False, 9538, 1, pure=True),
    _lf("mpt-1b", 2048, A40, 128, 10, False, 18647, 1, pure=True),
]


def _ibm(model: str, device: str, gpus: int, checkpointing: str, tokens: float) -> FsdpPoint:
    """A row of IBM's Table 1 (PyTorch blog, "Maximizing training throughput using PyTorch
    FSDP", 2024): FSDP1 FULL_SHARD (fms-fsdp: "FSDP will be a necessity" for 34b and 70b), 2
    sequences of 4,096 tokens per GPU, bf16 with fms-fsdp's bfSixteen policy (gradients
    reduced in bf16), SDPA's FlashAttention-2, every block checkpointed ("Yes"). The blog
    gives each cluster's inter-node rate per node, "400Gbps" (A100) and "800Gbps" (H100),
    with GPUDirect RDMA: taken as 2 RDMA ports of 200 and 400 Gb/s (the split an assumption;
    the node's rate, which the hierarchical model uses, is the blog's)."""
    a100 = device.startswith("a100")
    return FsdpPoint(
        f"ibm-{model}-s4096-{gpus}x{device.split('-')[0]}", model, device, gpus,
        "nvlink3" if a100 else "nvlink4", "ib-hdr" if a100 else "ib-ndr", 2, checkpointing,
        tokens, None, size=4096, nics=2, fsdp_reduce="bf16",
    )


# IBM's 7B row ran hybrid sharding (fms-fsdp's README: "HSDP" for 7b and 13b; its config's
# default), which the predictor does not model, and its 13B row checkpointed every n-th
# block for an n the blog does not give: both left out (predict-sources.md, [IBM-FSDP]).
FSDP_POINTS += [
    _ibm("llama2-34b", A80, 128, "full", 700),
    _ibm("llama2-70b", A80, 128, "full", 370),
    _ibm("llama2-34b", H80, 96, "full", 1550),
    _ibm("llama2-70b", H80, 96, "full", 800),
]


def predict_fsdp_point(point: FsdpPoint, catalog: Catalog, gemm: float | None = None) -> dict:
    """The row `trainperf predict --parallel fsdp` prints for ``point`` (catalog noise and
    overhead, the point's NICs per node), its GEMMs at ``gemm`` of peak if given."""
    device = catalog.device(point.device)
    if gemm is not None:
        device = device.model_copy(
            update={"gemm_efficiency": {**device.gemm_efficiency, point.precision: gemm}})
    return predict_fsdp(
        Workload(model_spec(point.model, point.size), point.batch, point.precision,
                 size=point.size),
        Placement(device, [point.gpus], point.per_node, catalog.link(point.intra),
                  catalog.link(point.inter) if point.inter else None, nics_per_node=point.nics),
        Measured(noise=catalog.data_parallel.noise(), overhead=catalog.data_parallel.overhead()),
        Sharding(point.checkpointing, recomputed_matmul_share=point.recomputed_matmul_share,
                 micro_batches_per_step=point.grad_accum, fsdp_reduce=point.fsdp_reduce,
                 attention_kernel=point.attention_kernel),
    )["rows"][0]


# The GEMM fractions of peak each point is predicted at, for the fits: a prediction costs
# ~0.2 s, so each point's log ratio is computed once per grid value and interpolated.
GEMM_GRID = tuple(round(0.30 + 0.025 * i, 3) for i in range(27))  # 0.30 ... 0.95


def log_ratios(point: FsdpPoint, catalog: Catalog) -> list[float]:
    """log(predicted / measured tokens/s per GPU) of ``point`` at each GEMM_GRID value."""
    return [
        math.log(predict_fsdp_point(point, catalog, g)["tokens_per_s_per_device"]
                 / point.tokens_per_gpu)
        for g in GEMM_GRID
    ]


def fit_gemm(curves: Sequence[Sequence[float]]) -> float:
    """The one GEMM fraction at which the mean log ratio over the points whose ``curves``
    (``log_ratios``) are given is zero: linear interpolation between grid values (the
    mean rises with the fraction); the grid's end where it has no zero."""
    means = [statistics.fmean(c[i] for c in curves) for i in range(len(GEMM_GRID))]
    for i in range(1, len(means)):
        if means[i - 1] <= 0 <= means[i]:
            low, high = means[i - 1], means[i]
            share = -low / (high - low) if high != low else 0.0
            return GEMM_GRID[i - 1] + share * (GEMM_GRID[i] - GEMM_GRID[i - 1])
    return GEMM_GRID[0] if means[0] > 0 else GEMM_GRID[-1]


def fsdp_generations(points: Sequence[FsdpPoint]) -> dict[str, list[FsdpPoint]]:
    groups: dict[str, list[FsdpPoint]] = {}
    for point in points:
        groups.setdefault(point.generation, []).append(point)
    return groups


@dataclass(frozen=True)
class FsdpFit:
    """Per generation, the GEMM fraction fitted to all its points; per point, tokens/s per
    GPU predicted out of sample (the fraction fitted to the other points of its generation)."""

    gemm: dict[str, float]
    held_out: dict[str, float]


def fsdp_fit(points: Sequence[FsdpPoint], catalog: Catalog) -> FsdpFit:
    gemm, held_out = {}, {}
    for generation, group in fsdp_generations(points).items():
        curves = [log_ratios(p, catalog) for p in group]
        gemm[generation] = fit_gemm(curves)
        for i, point in enumerate(group):
            fraction = fit_gemm([*curves[:i], *curves[i + 1:]])
            held_out[point.id] = predict_fsdp_point(point, catalog, fraction)[
                "tokens_per_s_per_device"]
    return FsdpFit(gemm, held_out)


FSDP_TOKENS_WITHIN, FSDP_MEMORY_WITHIN = 0.12, 0.10  # issue 33's targets


# llm-foundry's sequence-length sweeps (the same tables, [LLMF] README L95-L300 at 5e85bd62d):
# one model on 8 GPUs without checkpointing at 512 to 16,384 tokens, (tokens, micro-batch,
# gradient accumulation, measured tokens/s per GPU). Only attention's FLOPs per token grow
# with the length, so each row's throughput relative to the sweep's 2,048-token row tests
# the attention kernel's rate by length, apart from the GEMM fraction (which cancels).
# Models with llm-foundry's 128-wide heads, the figure's (attention_kernels).
@dataclass(frozen=True)
class Sweep:
    model: str
    device: str
    pure: bool
    rows: tuple[tuple[int, int, int, float], ...]
    checkpointing: str = "none"


SWEEPS = (
    Sweep("mpt-1b", H80, False, ((512, 56, 4, 52275), (1024, 18, 4, 48910),
          (2048, 14, 1, 45455), (4096, 7, 4, 38535), (8192, 3, 4, 29157),
          (16384, 2, 4, 19649))),
    Sweep("mpt-760m", A80, False, ((512, 96, 2, 29446), (1024, 48, 2, 29765),
          (2048, 24, 2, 32434), (4096, 12, 2, 27351), (8192, 6, 2, 20933),
          (16384, 3, 2, 14274))),
    Sweep("mpt-1b", A80, False, ((512, 56, 4, 23148), (1024, 18, 4, 22112),
          (2048, 14, 4, 20513), (4096, 7, 4, 17807), (8192, 3, 4, 13814),
          (16384, 2, 4, 9956))),
    Sweep("mpt-3b", A80, False, ((512, 40, 6, 12127), (1024, 20, 6, 11580),
          (2048, 10, 2, 10811), (4096, 5, 6, 9457), (8192, 3, 6, 7695),
          (16384, 1, 6, 5529))),
    Sweep("mpt-760m", A40, True, ((512, 48, 4, 34938), (1024, 24, 4, 33422),
          (2048, 12, 4, 30173), (4096, 6, 4, 25863), (8192, 3, 4, 20106),
          (16384, 1, 4, 13914))),
    Sweep("mpt-1b", A40, True, ((512, 32, 8, 21782), (1024, 16, 8, 20959),
          (2048, 8, 8, 19271), (4096, 4, 8, 16856), (8192, 2, 8, 13474),
          (16384, 1, 8, 9715))),
    Sweep("mpt-3b", A40, True, ((512, 20, 8, 11324), (1024, 10, 8, 10731),
          (2048, 5, 8, 10065), (4096, 2, 8, 8777), (8192, 1, 8, 7149))),
)
SWEEP_KERNELS = ("flash-attention-2", "flash-attention-triton")


def sweep_relative(sweep: Sweep, catalog: Catalog, kernel: str) -> list[tuple[int, float, float]]:
    """(tokens, measured, predicted) throughput of each row of ``sweep`` over its 2,048-token
    row's, predicted with the catalog's rates and attention by ``kernel``."""
    def point(tokens: int, batch: int, accum: int, measured: float) -> FsdpPoint:
        return FsdpPoint(f"sweep-{sweep.model}-{tokens}", sweep.model, sweep.device, 8,
                         "nvlink4" if sweep.device == H80 else "nvlink3", None, batch,
                         sweep.checkpointing, measured, None, size=tokens, nics=8, grad_accum=accum,
                         fsdp_reduce="bf16" if sweep.pure else "fp32",
                         attention_kernel=kernel)

    points = [point(*row) for row in sweep.rows]
    predicted = [predict_fsdp_point(p, catalog)["tokens_per_s_per_device"] for p in points]
    reference = next(i for i, p in enumerate(points) if p.size == 2048)
    return [
        (p.size, p.tokens_per_gpu / points[reference].tokens_per_gpu,
         tokens / predicted[reference])
        for p, tokens in zip(points, predicted, strict=True)
    ]


def sweep_table(catalog: Catalog) -> dict[str, float]:
    """The sweeps of llm-foundry's tables as Markdown: each row's throughput over its
    sweep's 2,048-token row, measured and predicted with each kernel; returns the median
    absolute error of that ratio per kernel over the rows other than the reference."""
    print("| model, system | tokens | measured / 2k | " + " | ".join(
        f"predicted, {k}" for k in SWEEP_KERNELS) + " |")
    print("| --- | ---: | ---: |" + " ---: |" * len(SWEEP_KERNELS))
    errors: dict[str, list[float]] = {k: [] for k in SWEEP_KERNELS}
    for sweep in SWEEPS:
        columns = {k: sweep_relative(sweep, catalog, k) for k in SWEEP_KERNELS}
        for i, (tokens, measured, _) in enumerate(columns[SWEEP_KERNELS[0]]):
            cells = []
            for kernel in SWEEP_KERNELS:
                predicted = columns[kernel][i][2]
                cells.append(f"{predicted:.3f} ({predicted / measured - 1:+.0%})")
                if tokens != 2048:
                    errors[kernel].append(abs(predicted / measured - 1))
            print(f"| {sweep.model}, 8 x {sweep.device} | {tokens:,} | {measured:.3f} | "
                  + " | ".join(cells) + " |")
    medians = {k: statistics.median(v) for k, v in errors.items()}
    print()
    print("Median |error| of the throughput relative to 2,048 tokens, "
          f"{len(errors[SWEEP_KERNELS[0]])} rows: "
          + ", ".join(f"{k} {m:.1%}" for k, m in medians.items()) + ".")
    return medians


def fsdp_table(catalog: Catalog) -> None:
    """The FSDP comparison of docs/predict.md, as Markdown: the catalog's kernel rates (in
    sample) and out of sample (the GEMM fraction fitted without the point)."""
    fitted = fsdp_fit(FSDP_POINTS, catalog)
    held_out = fitted.held_out
    print("| id | model, seq, batch, checkpointing | system | measured tokens/s/GPU | "
          "predicted (catalog) | out of sample | ratio | measured GiB/GPU | predicted | "
          "measured MFU (D) | predicted | exposed comm |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    errors: dict[str, list[float]] = {}
    memory_errors = []
    for point in FSDP_POINTS:
        row = predict_fsdp_point(point, catalog)
        predicted = row["tokens_per_s_per_device"]
        loo = held_out[point.id]
        errors.setdefault(point.generation, []).append(loo / point.tokens_per_gpu - 1)
        measured_mfu = row["mfu"] * point.tokens_per_gpu / predicted  # MFU ∝ tokens/s
        system = f"{point.gpus} x {point.device}, {point.intra}" + (
            f" + {point.nics} x {point.inter}" if point.inter else "")
        measured_memory = "-"
        if point.memory_gib is not None:
            measured_memory = f"{point.memory_gib:.1f}"
            memory_errors.append(row["memory"]["total_bytes"] / 2**30 / point.memory_gib - 1)
        print(f"| `{point.id}` | {point.model} s{point.size} b{point.batch} "
              f"{point.checkpointing} | {system} | {point.tokens_per_gpu:,.0f} | "
              f"{predicted:,.0f} | {loo:,.0f} | {loo / point.tokens_per_gpu:.2f} | "
              f"{measured_memory} | {row['memory']['total_bytes'] / 2**30:.1f} | "
              f"{measured_mfu:.1%} | {row['mfu']:.1%} | {row['comm_fraction']:.1%} |")
    print()
    print("| GPU generation | points | GEMM fraction fitted to all | in the catalog | "
          f"out of sample: median abs. error | max | within {FSDP_TOKENS_WITHIN:.0%} |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for generation, group in fsdp_generations(FSDP_POINTS).items():
        errs = [abs(e) for e in errors[generation]]
        held = catalog.device(group[0].device).gemm_efficiency.get(group[0].precision)
        print(f"| {generation} | {len(group)} | {fitted.gemm[generation]:.3f} | "
              f"{'-' if held is None else f'{held:.3f}'} | {statistics.median(errs):.1%} | "
              f"{max(errs):.1%} | {sum(e <= FSDP_TOKENS_WITHIN for e in errs)} of {len(errs)} |")
    if memory_errors:
        print()
        print(f"Memory per GPU, {len(memory_errors)} points with a published figure: errors "
              + ", ".join(f"{e:+.1%}" for e in memory_errors)
              + f" (target within {FSDP_MEMORY_WITHIN:.0%}).")


# The catalog's TCP Ethernet links whose efficiency is fitted here (RDMA and NVLink keep
# their data-sheet-derived figures).
TCP_LINKS = ("ethernet-10g", "ethernet-25g", "ethernet-40g", "ethernet-50g")


@dataclass(frozen=True)
class Params:
    """The fitted parameters: relative step noise, overhead (s), TCP link efficiency."""

    step_noise_cv: float
    sync_overhead_s: float
    tcp_efficiency: float

    @classmethod
    def from_catalog(cls, catalog: Catalog) -> Params:
        tcp = {catalog.link(i).efficiency for i in TCP_LINKS}
        if len(tcp) != 1:
            raise ValueError(f"the TCP links {TCP_LINKS} disagree on their efficiency: {tcp}")
        dp = catalog.data_parallel
        return cls(dp.step_noise_cv, dp.sync_overhead_ms * 1e-3, tcp.pop())


@dataclass(frozen=True)
class Prediction:
    efficiency: float
    comm_share: float  # exposed communication / step at N GPUs
    one_gpu: float  # 1-GPU throughput from the catalog alone


def predict_point(point: Point, params: Params, catalog: Catalog) -> Prediction:
    device = catalog.device(point.device)
    intra = catalog.link(point.intra) if point.intra else None
    inter = catalog.link(point.inter) if point.inter else None
    if inter is not None and inter.id in TCP_LINKS:
        inter = inter.model_copy(update={"efficiency": params.tcp_efficiency})
    workload = Workload(models.get(point.model), point.batch, point.precision, size=point.size)
    def placed(devices: list[int]) -> Placement:
        return Placement(device, devices, point.per_node, intra, inter)
    alone = predict(workload, placed([1]))["rows"][0]["samples_per_s"]
    baseline_batch = point.one_gpu_batch or point.batch
    measured = Measured(
        single_device_throughput=point.one_gpu or alone,
        # the catalog's own throughput (one_gpu None) holds at the batch it is asked at
        throughput_batch=baseline_batch if point.one_gpu else point.batch,
        noise=StepNoise(cv=params.step_noise_cv, source="fitted"),
        overhead=Overhead(params.sync_overhead_s, 0.0, "fitted"),
        contention=point.contention,
    )
    options = {"grad_compression": point.grad_compression, "bucket_mb": point.bucket_mb}
    scaled = predict(workload, placed([1, point.gpus]), measured, **options)["rows"][-1]
    efficiency = scaled["efficiency"]
    if baseline_batch != point.batch:
        # one device at the baseline's batch, priced with the same inputs
        baseline = predict(replace(workload, batch_size=baseline_batch), placed([1]),
                           measured, **options)["rows"][0]
        efficiency = scaled["samples_per_s"] / (point.gpus * baseline["samples_per_s"])
    return Prediction(efficiency, scaled["comm_fraction"], alone)


def fit(points: Sequence[Point], catalog: Catalog) -> Params:
    """Least squares of predicted − measured efficiency over ``points``."""

    def residuals(x: Sequence[float]) -> list[float]:
        params = Params(*x)
        return [predict_point(p, params, catalog).efficiency - p.measured_efficiency
                for p in points]

    start = Params.from_catalog(catalog)
    found = least_squares(
        residuals,
        [start.step_noise_cv, start.sync_overhead_s, start.tcp_efficiency],
        bounds=([0.0, 0.0, 0.05], [0.5, 1.0, 1.0]),
    )
    return Params(*(float(v) for v in found.x))


def leave_one_out(points: Sequence[Point], catalog: Catalog) -> list[Prediction]:
    """Each point predicted with the parameters fitted to all the others."""
    return [
        predict_point(p, fit([*points[:i], *points[i + 1:]], catalog), catalog)
        for i, p in enumerate(points)
    ]


def leave_one_out_by_category(points: Sequence[Point], catalog: Catalog) -> list[Prediction]:
    """A diagnostic: each point predicted with the parameters fitted to the other points of
    its own category only (as if each kind of system had its own three parameters)."""
    found: dict[str, Prediction] = {}
    for category in CATEGORIES:
        group = [p for p in points if p.category == category]
        found |= {p.id: pred for p, pred in zip(group, leave_one_out(group, catalog),
                                                 strict=True)}
    return [found[p.id] for p in points]


# The rows whose fit the catalog holds (data_parallel and the TCP links' efficiency): the
# GPU-fabric rows, as before issue 33. Fitted to all rows, the three shared parameters move
# to fit the host-staged and CPU rows (docs/predict.md) and the GPU-fabric rows lose.
CATALOG_FIT = "gpu-fabric"


@dataclass(frozen=True)
class Row:
    """One point: measured and predicted efficiency, and per-GPU throughput at N GPUs
    (measured, and predicted by the model; None where the source gives no throughput)."""

    efficiency: float
    predicted_efficiency: float
    per_gpu: float | None = None
    one_gpu: float | None = None  # measured 1-GPU throughput
    predicted_per_gpu: float | None = None
    category: str = "gpu-fabric"


def leave_one_out_means(values: Sequence[float]) -> list[float]:
    """For each value, the mean of all the others."""
    total, n = sum(values), len(values)
    return [(total - v) / (n - 1) for v in values]


def mean_absolute(errors: Sequence[float]) -> float:
    return statistics.fmean(abs(e) for e in errors)


def median_absolute(errors: Sequence[float]) -> float:
    return statistics.median(abs(e) for e in errors)


def summary(rows: Sequence[Row]) -> dict[str, dict[str, float]]:
    """Efficiency MAE (points) and per-GPU throughput median |relative error| of the model
    and of the two trivial guesses (module docstring)."""
    measured = [r.efficiency for r in rows]
    others = leave_one_out_means(measured)
    efficiency = {
        "model": mean_absolute([(r.predicted_efficiency - r.efficiency) * 100 for r in rows]),
        "perfect scaling": mean_absolute([(1 - e) * 100 for e in measured]),
        "mean of the other rows": mean_absolute(
            [(o - e) * 100 for o, e in zip(others, measured, strict=True)]
        ),
    }
    rated = [r for r in rows if r.per_gpu is not None and r.one_gpu is not None]
    per_gpu = [r.per_gpu for r in rated]
    throughput = {
        "model": median_absolute([r.predicted_per_gpu / r.per_gpu - 1 for r in rated]),
        "perfect scaling": median_absolute([r.one_gpu / r.per_gpu - 1 for r in rated]),
        "mean of the other rows": median_absolute(
            [o / m - 1 for o, m in zip(leave_one_out_means(per_gpu), per_gpu, strict=True)]
        ),
    }
    return {"efficiency MAE (points)": efficiency,
            "per-GPU throughput at N, median abs. error": throughput}


def category_summary(rows: Sequence[Row]) -> dict[str, dict[str, float]]:
    """Efficiency MAE (points) of the model and of the two trivial guesses, per category
    (in the order of CATEGORIES, those with rows) and over all rows. The model's error is
    each row's out-of-sample prediction (fitted to all the other rows, whatever their
    category); "the mean of the other rows" is the mean of the other rows *of the same
    category* (over all rows for "all")."""
    groups = {c: [r for r in rows if r.category == c] for c in CATEGORIES}
    groups = {c: g for c, g in groups.items() if g} | {"all": list(rows)}
    out = {}
    for name, group in groups.items():
        measured = [r.efficiency for r in group]
        others = leave_one_out_means(measured) if len(group) > 1 else [float("nan")]
        out[name] = {
            "rows": float(len(group)),
            "model": mean_absolute([(r.predicted_efficiency - r.efficiency) * 100
                                    for r in group]),
            "perfect scaling": mean_absolute([(1 - e) * 100 for e in measured]),
            "mean of the other rows": mean_absolute(
                [(o - e) * 100 for o, e in zip(others, measured, strict=True)]
            ),
        }
    return out


def main() -> None:
    catalog = load_catalog()
    out_of_sample = leave_one_out(POINTS, catalog)
    rows, compute_errors = [], []
    print("| id | model | system | measured 1-GPU | predicted 1-GPU | error | measured "
          "efficiency | predicted efficiency (out of sample) | error (points) | "
          "predicted exposed comm |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for point, pred in zip(POINTS, out_of_sample, strict=True):
        measured = point.measured_efficiency
        links = " + ".join(link for link in (point.intra, point.inter) if link)
        system = f"{point.gpus} x {point.device}, {point.per_node}/node, {links}"
        one = point.one_gpu
        one_text = "-" if one is None else f"{one:,.0f}" + ("*" if point.one_gpu_borrowed else "")
        error = "-"
        if one is not None and not point.one_gpu_borrowed:
            compute_errors.append(pred.one_gpu / one - 1)
            error = f"{compute_errors[-1]:+.0%}"
        print(f"| `{point.id}` | {point.model} {point.precision} b{point.batch} | {system} | "
              f"{one_text} | {pred.one_gpu:,.0f} | {error} | {measured:.1%} | "
              f"{pred.efficiency:.1%} | {(pred.efficiency - measured) * 100:+.1f} | "
              f"{pred.comm_share:.1%} |")
        rated = point.n_gpu is not None
        rows.append(Row(measured, pred.efficiency,
                        point.n_gpu / point.gpus if rated else None,
                        one if rated else None,
                        one * pred.efficiency if rated else None, point.category))
    print()
    print(f"{len(POINTS)} rows; * the 1-GPU throughput of the same cluster's 16-GPU table. "
          f"Per-GPU throughput from the catalog alone: median |error| "
          f"{median_absolute(compute_errors):.0%} over the {len(compute_errors)} rows with a "
          "measured 1-GPU throughput.")
    print()
    print("| over the rows | model (out of sample) | perfect scaling | mean of the other rows |")
    print("| --- | ---: | ---: | ---: |")
    for name, scores in summary(rows).items():
        unit = "{:.1f}" if "points" in name else "{:.1%}"
        cells = " | ".join(unit.format(v) for v in scores.values())
        print(f"| {name} | {cells} |")
    print()
    apart = [
        Row(r.efficiency, pred.efficiency, category=r.category)
        for r, pred in zip(rows, leave_one_out_by_category(POINTS, catalog), strict=True)
    ]
    diagnostic = category_summary(apart)
    print("| efficiency MAE (points), by kind of row | rows | model (out of sample) | "
          "perfect scaling | mean of the other rows (same kind) | diagnostic: model, each "
          "kind fitted apart |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, scores in category_summary(rows).items():
        print(f"| {name} | {scores['rows']:.0f} | {scores['model']:.1f} | "
              f"{scores['perfect scaling']:.1f} | {scores['mean of the other rows']:.1f} | "
              f"{diagnostic[name]['model']:.1f} |")
    print()
    fits = {"all rows": fit(POINTS, catalog)} | {
        f"{c} rows": fit([p for p in POINTS if p.category == c], catalog) for c in CATEGORIES
    }
    held = Params.from_catalog(catalog)
    print(f"| parameter | {' | '.join(f'fitted to {k}' for k in fits)} | in the catalog "
          f"(fit to the {CATALOG_FIT} rows) |")
    print("| --- |" + " ---: |" * (len(fits) + 1))
    for label, get, unit in (
        ("step-time noise of a rank (cv)", lambda q: q.step_noise_cv, "{:.3f}"),
        ("per-step synchronisation overhead", lambda q: q.sync_overhead_s * 1e3, "{:.1f} ms"),
        ("TCP Ethernet link efficiency", lambda q: q.tcp_efficiency, "{:.2f}"),
    ):
        cells = " | ".join(unit.format(get(q)) for q in [*fits.values(), held])
        print(f"| {label} | {cells} |")
    print("\nA category without a TCP link (pcie-no-p2p) leaves the TCP efficiency where the "
          "fit starts (the catalog's).")
    print()
    fsdp_table(catalog)
    print()
    sweep_table(catalog)


if __name__ == "__main__":
    main()
