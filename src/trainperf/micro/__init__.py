"""Micro-benchmarks with the field's definitions: GEMM and convolution (DeepBench), memory
and peer-to-peer bandwidth, collectives (nccl-tests). One harness (``harness.py``) owns
warm-up, timing and summaries; each kind supplies only what differs.

A micro-benchmark runs in a child process like a benchmark case (``collective`` under
torchrun, one process per rank): the worker calls ``run_document`` with the document the
CLI built, ``{"kind": KIND, "device": ..., ...}``, and returns ``{"device", "metrics"}``.

Every kind is a module with the same entry point, as every nccl-tests collective fills the
same struct: ``run_document(document, workdir)`` reads the kind's fields of the document,
measures, and returns ``{"device", "metrics"}`` (None on a rank other than 0). ``KINDS``
names them all; nothing else lists the kinds.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

# Name (as the CLI and the store say it) -> the module that measures it. Modules are
# imported when a kind runs, so that naming the kinds does not import torch.
KINDS: dict[str, str] = {
    "gemm": "trainperf.micro.gemm",
    "conv": "trainperf.micro.conv",
    "memory": "trainperf.micro.memory",
    "p2p": "trainperf.micro.p2p",
    "collective": "trainperf.micro.collective",
}


def unknown_kind(name: str) -> str:
    """The message that refuses ``name``, with the valid kinds."""
    return f"unknown micro-benchmark '{name}': allowed {', '.join(KINDS)}"


def kind_module(name: str) -> ModuleType:
    """The module of micro-benchmark ``name``; ValueError lists the valid names."""
    if name not in KINDS:
        raise ValueError(unknown_kind(name))
    return importlib.import_module(KINDS[name])


def run_document(document: dict[str, Any], workdir: Path) -> dict[str, Any] | None:
    """Run the micro-benchmark ``document`` describes (None on ranks other than 0)."""
    return kind_module(document["kind"]).run_document(document, workdir)
