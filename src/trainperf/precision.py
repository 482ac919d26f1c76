"""The numeric precisions a case trains in: one definition for the case and the CLI.

Kept in a module without torch so that the CLI can offer the choice without importing it.
"""

from __future__ import annotations

from typing import Literal, get_args

Precision = Literal["fp32", "tf32", "fp16", "bf16"]
PRECISIONS: tuple[str, ...] = get_args(Precision)
