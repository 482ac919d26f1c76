"""Ranges of the numbers trainperf accepts, so that every reader of the store can use them.

A case's counts (batch size, image size, sequence length, devices, nodes, loader workers,
micro-batches, threads) are at most ``MAX_COUNT``: a C ``int``, what torch's kernels and
data loaders index with; a larger batch cannot run anyway. Every other number that enters
the store (an imported file's metrics, say) is finite, and an integer fits in 64 signed
bits (SQLite's INTEGER, a C ``long``): a 400-digit integer overflows a float (Python's
``float()`` raises) and numpy's integers, and NaN or infinity make every sum and ratio
meaningless. This module imports nothing heavy: reading a file must not import torch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from typing import Any

MAX_COUNT = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# The case fields that count something (bounded by MAX_COUNT in ``trainperf.case.spec.Case``).
COUNT_FIELDS = (
    "batch_size",
    "image_size",
    "seq_len",
    "devices",
    "nodes",
    "workers",
    "grad_accum",
    "threads",
)


def ascii_digits(text: str) -> bool:
    """``text`` is digits 0-9 and nothing else (not empty): ``str.isdigit`` also takes '²'
    (``int`` then raises) and '٣' (``int`` reads 3, which CUDA, Slurm or a stored key do
    not). Every check of a number typed as text goes through this."""
    return text.isascii() and text.isdigit()


# A timeout in seconds (``--timeout`` of every verb, a case's ``timeout_s``): at most a
# year. A longer one bounds nothing, and a process group's timeout is a
# ``datetime.timedelta``, which overflows past 999,999,999 days (at 1e30 s every rank of a
# distributed case ended in an OverflowError instead of running).
TIMEOUT_S_MAX = 365 * 86400.0
# A DDP gradient bucket (``bucket_mb``, MiB; a case's field, ``run`` and ``predict``): from
# 64 KiB, below which every all-reduce is latency alone and the predictor's list of buckets
# grows with the model (a 70B model in 64 KiB buckets is 4 million of them; at 1e-320 MiB
# a bucket holds 0 bytes), to 1 TiB, above any device's memory.
BUCKET_MB_MIN, BUCKET_MB_MAX = 2.0**-4, 2.0**20
# The compute inputs of ``predict``: a fraction of peak FLOP/s down to 1e-6 (smaller ones
# are no measurement, and a step time divided by 1e-320 overflows to infinity); a
# single-device throughput from 1e-6 to 1e12 samples/s (a sample per 12 days to a thousand
# times the fastest machine's), so that every time and rate it gives stays finite.
ACHIEVED_FRACTION_MIN = 1e-6
THROUGHPUT_MIN, THROUGHPUT_MAX = 1e-6, 1e12


def number_problem(value: Any) -> str | None:
    """What is wrong with a JSON number (None if nothing, or if it is no number)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        return f"an integer of {value.bit_length()} bits does not fit in 64"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a finite number"
    return None


def first_bad_number(
    document: Any,
    where: str = "",
    problem: Callable[[Any], str | None] = number_problem,
) -> tuple[str, str] | None:
    """(where, what) of the first number in a JSON document that ``problem`` (by default
    ``number_problem``) refuses, ``where`` as ``results[3].metrics.step_s[0]``; None when
    all are fine."""
    stack: list[tuple[str, Any]] = [(where, document)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            items = [(f"{path}.{k}" if path else str(k), v) for k, v in value.items()]
            stack.extend(reversed(items))  # popped in the document's order
        elif isinstance(value, list):
            if all(type(v) is float and -math.inf < v < math.inf for v in value):
                continue  # the common long list, step times: no path strings made
            stack.extend(reversed([(f"{path}[{i}]", v) for i, v in enumerate(value)]))
        elif (found := problem(value)) is not None:
            return path, found
    return None


def control_problem(text: str) -> str | None:
    """What is wrong with a name (a model, a host, a suite): a control character (C0, DEL
    or C1) that would corrupt a terminal, a CSV row or a C string (NUL), or None."""
    for index, char in enumerate(text):
        if ord(char) < 0x20 or 0x7F <= ord(char) <= 0x9F:
            return f"control character {char!r} at position {index}: names are printable text"
    return None


# C0 but newline and tab, DEL and C1: what a terminal reads as a command (ESC starts a
# colour, a title, a screen clear; CR overwrites the line) rather than as text.
_TERMINAL_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible_controls(text: str) -> str:
    """``text`` with each terminal control character written as its escape (ESC as
    ``\\x1b``): an error message or a reason stored from anywhere, printed, shows what it
    holds and moves no cursor."""
    return _TERMINAL_CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def comma_items(values: str | Iterable[str], flag: str) -> tuple[str, ...]:
    """The items of a flag given once or repeated, each a comma list ('a,b' 'c' -> a, b,
    c; each item stripped, the first of a repeat kept). An empty item (``''``, ``a,,b``,
    a trailing comma) raises ValueError naming ``flag``: an empty filter would select
    everything, not what was meant."""
    items: list[str] = []
    for value in [values] if isinstance(values, str) else values:
        parts = [part.strip() for part in str(value).split(",")]
        if not all(parts):
            raise ValueError(
                f"{flag} {str(value)!r} has an empty item: give one or more names separated "
                "by single commas"
            )
        items += parts
    return tuple(dict.fromkeys(items))


def count_problem(fields: dict[str, Any]) -> tuple[str, str] | None:
    """(field, what) of the first count of a case dict above ``MAX_COUNT`` or below 0."""
    for name in COUNT_FIELDS:
        value = fields.get(name)
        number = isinstance(value, int) and not isinstance(value, bool)
        if number and not 0 <= value <= MAX_COUNT:
            return name, f"{value} is outside 0 to {MAX_COUNT}"
    return None
