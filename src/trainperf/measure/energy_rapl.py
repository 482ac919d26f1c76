"""CPU energy from RAPL through the Linux powercap files, with counter wrap-around.

See trainperf.measure.energy for the readings and how absent ones look.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainperf.core.limits import ascii_digits
from trainperf.measure.energy import (
    RAPL_ROOT,
    SOURCE_RAPL,
    MeterBase,
    Reading,
    absent,
    domain_description,
    measured,
)


def _read_text(path: str) -> str:
    with open(path) as f:
        return f.read()


@dataclass(frozen=True)
class _RaplZone:
    domain: str  # "package-0", "dram-0"
    path: Path  # the zone's directory


class RaplEnergy(MeterBase):
    """CPU energy from the Linux powercap RAPL files under ``root``.

    ``reader(path) -> str`` reads one file; it is a parameter so tests can simulate a
    permission error even when run as root (who reads everything regardless of mode).
    """

    def __init__(
        self,
        root: str | os.PathLike[str] = RAPL_ROOT,
        reader: Callable[[str], str] = _read_text,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root = Path(root)
        self._read = reader
        self._clock = clock
        self.zones, self.missing_reason = self._discover()
        self._begin: dict[str, int | str] = {}
        self._t0: float | None = None

    def _discover(self) -> tuple[list[_RaplZone], str | None]:
        try:
            names = sorted(os.listdir(self.root))
        except OSError:
            names = []
        packages = sorted(
            (int(m.group(1)), n) for n in names if (m := re.fullmatch(r"intel-rapl:(\d+)", n))
        )
        if not packages:
            return [], f"no RAPL powercap interface ({self.root / 'intel-rapl'} absent)"
        zones: list[_RaplZone] = []
        for number, name in packages:
            path = self.root / name
            try:
                zone_name = self._read(str(path / "name")).strip()
            except OSError:
                continue
            # psys (whole platform on some laptops) overlaps the packages: left out.
            if not zone_name.startswith("package"):
                continue
            zones.append(_RaplZone(zone_name, path))
            suffix = zone_name.rpartition("-")[2]
            socket = suffix if ascii_digits(suffix) else str(number)
            for sub in self._subzones(number, path, names):
                try:
                    sub_name = self._read(str(sub / "name")).strip()
                except OSError:
                    continue
                if sub_name == "dram":
                    zones.append(_RaplZone(f"dram-{socket}", sub))
        if not zones:
            return [], f"no RAPL package zone under {self.root}"
        return zones, None

    def _subzones(self, number: int, package: Path, root_names: list[str]) -> list[Path]:
        """Subzones appear in the package's directory and, in sysfs, also as root links."""
        pattern = re.compile(rf"intel-rapl:{number}:\d+")
        found: dict[str, Path] = {}
        try:
            inner = sorted(os.listdir(package))
        except OSError:
            inner = []
        for name in inner:
            if pattern.fullmatch(name):
                found.setdefault(name, package / name)
        for name in root_names:
            if pattern.fullmatch(name):
                found.setdefault(name, self.root / name)
        return [found[n] for n in sorted(found)]

    def _read_uj(self, path: Path) -> int | str:
        """Microjoules, or the reason they cannot be read."""
        try:
            return int(self._read(str(path)).strip())
        except PermissionError:
            return f"RAPL energy files not readable by this user ({path})"
        except (OSError, ValueError) as exc:
            return f"RAPL read failed ({path}): {exc}"

    def begin(self) -> None:
        self._begin = {z.domain: self._read_uj(z.path / "energy_uj") for z in self.zones}
        self._t0 = self._clock()

    def end(self) -> list[Reading]:
        if self._t0 is None:
            raise RuntimeError("RaplEnergy.end() without begin()")
        ends = {z.domain: self._read_uj(z.path / "energy_uj") for z in self.zones}
        duration = self._clock() - self._t0
        self._t0 = None
        if self.missing_reason is not None:
            return [absent(SOURCE_RAPL, "cpu", self.missing_reason, duration)]
        return [
            self._reading(z, self._begin[z.domain], ends[z.domain], duration) for z in self.zones
        ]

    def _reading(
        self, zone: _RaplZone, begin: int | str, end: int | str, duration: float
    ) -> Reading:
        for value in (begin, end):
            if isinstance(value, str):
                return absent(SOURCE_RAPL, zone.domain, value, duration)
        delta = end - begin
        if delta < 0:
            max_range = self._read_uj(zone.path / "max_energy_range_uj")
            if isinstance(max_range, str):
                reason = f"counter wrapped and its range is unknown: {max_range}"
                return absent(SOURCE_RAPL, zone.domain, reason, duration)
            delta += max_range
        return measured(SOURCE_RAPL, zone.domain, delta / 1e6, duration)

    def describe(self) -> list[dict[str, Any]]:
        if self.missing_reason is not None:
            return [domain_description(SOURCE_RAPL, "cpu", reason=self.missing_reason)]
        out = []
        for zone in self.zones:
            probe = self._read_uj(zone.path / "energy_uj")
            reason = probe if isinstance(probe, str) else None
            method = f"{zone.path / 'energy_uj'} (uJ) read at both edges, wrap-corrected"
            out.append(domain_description(SOURCE_RAPL, zone.domain, method, reason))
        return out


# ---------------------------------------------------------------------------- factory
