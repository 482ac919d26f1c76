"""Small readers shared by the inventory modules (trainperf.system.inventory, trainperf.system.gpu):
a file of /proc or /sys that may be missing, and a field that is either read or absent."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def read_file(path: Path) -> str | None:
    """The stripped text of ``path``, or None when it cannot be read."""
    try:
        return path.read_text().strip()
    except OSError:
        return None


def read_int(path: Path) -> int | None:
    """The integer in ``path``, or None when it is missing or not an integer."""
    text = read_file(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def set_or_absent(section: dict[str, Any], key: str, value: Any, reason: str) -> None:
    """``section[key] = value``, or ``section[key + "_absent_reason"] = reason`` for None."""
    if value is None:
        section[f"{key}_absent_reason"] = reason
    else:
        section[key] = value


def parse_cpulist(text: str) -> set[int]:
    """The CPUs (or NUMA nodes) of a kernel list such as '0-3,8,10-11' ('' is none)."""
    found: set[int] = set()
    for part in text.replace("\n", ",").split(","):
        first, sep, last = part.strip().partition("-")
        if first:
            found.update(range(int(first), int(last if sep else first) + 1))
    return found
