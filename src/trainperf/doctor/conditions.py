"""Which settings that change results differ between systems (``trainperf compare``).

Each stored sweep carries the doctor's verdict (store schema 9); its checks marked
``condition`` read a setting (the governor, a GPU's PCIe width, the driver, a clock lock)
whose ``value`` is compared here. A check without a value (absent) says nothing and is
left out: a machine that cannot tell its governor is not taken to differ. A system whose
sweeps were measured under several values of a setting lists each.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trainperf.core import strict_json


@dataclass(frozen=True)
class Difference:
    """A setting (a check's name) with more than one value among the compared systems:
    each value as text, with the systems that had it, in the order they were given."""

    name: str
    values: dict[str, list[str]]


def value_text(value: Any) -> str:
    """A condition's value in one short piece of text ('performance', '16', 'on')."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "on" if value else "off"
    return strict_json.dumps(value)


def conditions(verdict: Mapping[str, Any] | None) -> dict[str, str]:
    """The settings of one verdict that change results, by check name, as text."""
    if not verdict:
        return {}
    return {
        check["name"]: value_text(check["value"])
        for check in verdict.get("checks", [])
        if check.get("condition") and check.get("value") is not None
    }


def differences(sides: Iterable[tuple[str, Mapping[str, Any] | None]]) -> list[Difference]:
    """The settings whose values differ between the systems of ``sides`` (a system's
    name and one verdict of a sweep of it; a system may come several times), in the order
    the checks were first seen."""
    seen: dict[str, dict[str, list[str]]] = {}
    for system, verdict in sides:
        for name, text in conditions(verdict).items():
            holders = seen.setdefault(name, {}).setdefault(text, [])
            if system not in holders:
                holders.append(system)
    return [Difference(name, values) for name, values in seen.items() if len(values) > 1]
