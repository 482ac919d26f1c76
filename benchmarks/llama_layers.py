"""Llama 3 8B's blocks, fewer of them: a model one GPU holds whose every block, embedding
and output layer has the 8B model's shapes (d 4096, GQA 32/8, SwiGLU 14,336, vocabulary
128,256). Measured at two depths (6 and 8 blocks), the line through the two steps splits
the step into the cost of one block and the cost of the rest (embedding, output layer and
loss, AdamW), which the predictor prices apart (docs/predict.md, "Llama 3 8B's blocks on
one H200").

    trainperf run benchmarks/llama8b_layers.yaml   # from the repository root, on one GPU

A ``module:function`` model of trainperf run (trainperf.models.custom): each function
returns the ModelSpec of the 8B model cut to that many blocks.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from trainperf import models
from trainperf.models.llama import CONFIGS, Llama
from trainperf.models.spec import ModelSpec

FULL = "llama3-8b"


def spec(layers: int) -> ModelSpec:
    """Llama 3 8B with ``layers`` blocks; everything else as the zoo's model."""
    return replace(
        models.get(FULL),
        name=f"{FULL}-{layers}-blocks",
        factory=partial(Llama, replace(CONFIGS[FULL], layers=layers)),
        description=f"Llama 3 8B cut to {layers} of its 32 blocks",
    )


# Six blocks are the fewest that hold most of the weights (1.31 of 2.36 B; the embedding and
# output layer hold 1.05 B), as FSDP2's wrapping of the repeated blocks asks; eight still
# leave an H100's 80 GB room for the activations of 8,192 tokens without checkpointing.
def llama3_8b_6_blocks() -> ModelSpec:
    return spec(6)


def llama3_8b_8_blocks() -> ModelSpec:
    return spec(8)
