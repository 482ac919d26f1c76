"""Micro-benchmarks with the field's definitions: GEMM and convolution (DeepBench), memory
and peer-to-peer bandwidth, collectives (nccl-tests). One harness (``harness.py``) owns
warm-up, timing and summaries; each kind supplies only what differs.

A micro-benchmark runs in a child process like a benchmark case (``collective`` under
torchrun, one process per rank): the worker calls ``run_document`` with the document the
CLI built, ``{"kind": KIND, "device": ..., ...}``, and returns ``{"device", "metrics"}``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

KINDS = ("gemm", "conv", "memory", "p2p", "collective")


def run_document(document: dict[str, Any], workdir: Path) -> dict[str, Any] | None:
    """Run the micro-benchmark ``document`` describes (None on ranks other than 0)."""
    kind = document["kind"]
    if kind == "collective":
        from trainperf.micro import collective

        return collective.rank_main(document, workdir)

    import torch

    from trainperf.benchmark import device_info

    device = torch.device(document["device"])
    if kind == "gemm":
        from trainperf.micro import gemm

        shapes = []
        if document["shapes"] in ("deepbench", "all"):
            shapes += gemm.deepbench_shapes()
        if document["shapes"] in ("square", "all"):
            shapes += gemm.square_shapes(device.type)
        shapes = shapes[: document.get("limit") or None]
        metrics = gemm.run(
            shapes,
            device,
            document["dtypes"],
            warmup=document["warmup"],
            iters=document["iters"],
            flush=document["flush"],
        )
    elif kind == "conv":
        from trainperf.micro import conv
        from trainperf.train import set_fp32_math

        set_fp32_math(device, document["dtype"])  # tf32 or IEEE float32 for cuDNN
        if document.get("model"):
            shapes = conv.model_shapes(document["model"], document["batch_size"])
        else:
            shapes = conv.deepbench_shapes()
        shapes = shapes[: document.get("limit") or None]
        rows = conv.run(
            shapes,
            device,
            document["dtype"],
            warmup=document["warmup"],
            iters=document["iters"],
            flush=document["flush"],
            cudnn_benchmark=document.get("cudnn_benchmark", True),
        )
        metrics = {"rows": rows, "cudnn_benchmark": torch.backends.cudnn.benchmark}
    elif kind == "memory":
        from trainperf.micro import memory

        metrics = memory.run(device, document.get("size_bytes"), iters=document["iters"])
    elif kind == "p2p":
        from trainperf.micro import p2p

        return {"device": None, "metrics": p2p.run(document.get("size_bytes") or p2p.DEFAULT_BYTES)}
    else:
        raise ValueError(f"unknown micro-benchmark '{kind}': allowed {', '.join(KINDS)}")
    return {"device": device_info(device), "metrics": metrics}
