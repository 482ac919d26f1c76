"""The numeric precisions a case trains in: one definition for the case and the CLI.

Kept in a module without torch so that the CLI can offer the choice without importing it.
"""

from __future__ import annotations

from typing import Literal, get_args

Precision = Literal["fp32", "tf32", "fp16", "bf16"]
PRECISIONS: tuple[str, ...] = get_args(Precision)

# What the JAX backend trains in (trainperf.jax.step): fp16 would need loss scaling, which
# neither jax nor optax provides (jmp, which did, is archived), so it is not offered.
JAX_PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "bf16")
