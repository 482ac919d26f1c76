"""The types of the verbs' flags and the parsers of their values: each refuses bad input
with one line naming the flag and what it allows (``BadInput``, exit code 2), so a verb
checks its input before anything runs. The exit codes of every verb are here with it.

Imports no other module of trainperf.cli; ``common`` and ``store_access`` build on it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import click

from trainperf.case.precision import PRECISIONS
from trainperf.core.limits import INT64_MAX, MAX_COUNT, TIMEOUT_S_MAX, ascii_digits

EXIT_OK, EXIT_FAILED_CASES, EXIT_BAD_INPUT = 0, 1, 2


class BadInput(click.ClickException):
    """Bad input: reported as one line, exit code 2."""

    exit_code = EXIT_BAD_INPUT


class NonEmptyPath(click.Path):
    """``click.Path`` that refuses an empty value, which click would turn into the current
    directory (``Path("")`` is ``Path(".")``): a place no one means by giving nothing."""

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, str) and not value:
            self.fail("is empty: give a path", param, ctx)
        return super().convert(value, param, ctx)


def positive_int(text: Any) -> int:
    """The count from 1 to ``MAX_COUNT`` (a C int) that ``text`` spells in ASCII digits (a
    + sign and spaces around allowed), else ValueError saying what is allowed.
    ``str.isdigit`` is not enough: it accepts '²', which ``int`` refuses."""
    digits = str(text).strip().removeprefix("+")
    if not ascii_digits(digits) or not digits.strip("0"):
        raise ValueError(f"must be a positive integer, got '{text}'")
    significant = digits.lstrip("0")  # int() of thousands of digits raises: not tried
    if len(significant) > len(str(MAX_COUNT)) or int(significant) > MAX_COUNT:
        raise ValueError(f"must be a positive integer up to {MAX_COUNT}, got '{text}'")
    return int(significant)


class PositiveInt(click.ParamType):
    """A count: 1 to ``MAX_COUNT`` (``positive_int``)."""

    name = "positive integer"

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_COUNT:
            return value  # a default
        try:
            return positive_int(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def count_range() -> click.IntRange:
    """A count that may be 0 (loader workers, warm-up steps): 0 to ``MAX_COUNT``."""
    return click.IntRange(min=0, max=MAX_COUNT)


def seed_range() -> click.IntRange:
    """A seed: 0 to ``INT64_MAX``, what SQLite's INTEGER and torch's generators hold."""
    return click.IntRange(min=0, max=INT64_MAX)


def _shown(bound: float) -> str:
    """A bound as written in a message, exactly: 1048576, 31536000, 0.0625, 1e-06, 1e+12
    (a whole number below a billion in digits, not as 3.1536e+07)."""
    if float(bound).is_integer() and abs(bound) < 1e9:
        return f"{bound:.0f}"
    short = f"{bound:g}"
    if float(short) == bound:
        return short
    return f"{bound:.0f}" if float(bound).is_integer() else repr(float(bound))


class FiniteFloat(click.ParamType):
    """A number option: finite, within optional bounds (open or closed). Every float option
    of every verb takes this type: ``click.FloatRange`` lets NaN through (a comparison with
    NaN is false, so no bound refuses it) and infinity where a side is unbounded."""

    name = "number"

    def __init__(
        self,
        min: float | None = None,
        max: float | None = None,
        min_open: bool = False,
        max_open: bool = False,
    ) -> None:
        self.min, self.max, self.min_open, self.max_open = min, max, min_open, max_open

    def allowed(self) -> str:
        """What the option takes, in words: 'a finite number > 0 and <= 1'."""
        bounds = []
        if self.min is not None:
            bounds.append(f"{'>' if self.min_open else '>='} {_shown(self.min)}")
        if self.max is not None:
            bounds.append(f"{'<' if self.max_open else '<='} {_shown(self.max)}")
        return " ".join(["a finite number", " and ".join(bounds)]).strip()

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            number = math.nan
        low, high = self.min, self.max
        inside = math.isfinite(number) and not (
            (low is not None and (number <= low if self.min_open else number < low))
            or (high is not None and (number >= high if self.max_open else number > high))
        )
        if not inside:
            self.fail(f"must be {self.allowed()}, got '{value}'", param, ctx)
        return number


def timeout_seconds() -> FiniteFloat:
    """The type of every verb's ``--timeout``: seconds, > 0 and at most a year
    (``trainperf.core.limits.TIMEOUT_S_MAX``)."""
    return FiniteFloat(min=0, max=TIMEOUT_S_MAX, min_open=True)


class Endpoint(click.ParamType):
    """HOST:PORT of a torchrun rendezvous: a host name or IPv4 address, or an IPv6
    address in brackets, and a port from 1 to 65535."""

    name = "HOST:PORT"
    _pattern = re.compile(r"(?:[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]):([0-9]{1,5})")

    def convert(self, value: Any, param: Any, ctx: Any) -> str:
        match = self._pattern.fullmatch(str(value))
        if not match or not 1 <= int(match.group(1)) <= 65535:
            self.fail(
                f"must be HOST:PORT (a host name or address, [IPv6] in brackets, and a port "
                f"1-65535), got {str(value)!r}",
                param,
                ctx,
            )
        return str(value)


class CountList(click.ParamType):
    """'1,2,4,8': positive integers, one case per value."""

    name = "counts"

    def convert(self, value: Any, param: Any, ctx: Any) -> list[int]:
        if isinstance(value, list):
            return value
        try:
            return [positive_int(part) for part in str(value).split(",")]
        except ValueError:
            self.fail(
                f"must be positive integers up to {MAX_COUNT} separated by commas, got '{value}'",
                param,
                ctx,
            )


class PrecisionChoice(click.Choice):
    """A precision of a case (trainperf.case.precision.PRECISIONS), refused in the words a case
    uses for it, so that ``run`` answers as it did when the case checked it."""

    def __init__(self) -> None:
        super().__init__(PRECISIONS)

    def convert(self, value: Any, param: Any, ctx: Any) -> str:
        if value in self.choices:
            return str(value)
        *first, last = (repr(p) for p in PRECISIONS)
        raise BadInput(f"precision {value!r} is not valid: allowed {', '.join(first)} or {last}")


def given_once(flag_values: Mapping[str, Any]) -> tuple[str, Any] | None:
    """The one flag of ``flag_values`` (flag -> value, None when left out) that was given,
    or None; bad input when two were (two spellings or a pair of exclusive flags)."""
    given = [(flag, value) for flag, value in flag_values.items() if value is not None]
    if len(given) > 1:
        raise BadInput(f"give one of {' and '.join(flag for flag, _ in given)}, not both")
    return given[0] if given else None


STEPS_METAVAR = "fixed:W:N|N"


def fixed_steps(text: str, verb: str, warmup_allowed: bool = True) -> tuple[int | None, int]:
    """``--steps`` of a verb that runs a set number of steps, in ``run``'s syntax and
    parsed by its one parser (trainperf.measure.policy): ``fixed:W:N`` gives (W, N); N
    alone, accepted as before, gives (None, N): N steps after the verb's own warm-up.
    ``adaptive`` (and ``W`` > 0 where ``warmup_allowed`` is false) is bad input, one line."""
    from trainperf.measure.policy import FixedPolicy, PolicyError, parse_policy

    try:
        return None, positive_int(text)
    except ValueError:
        pass
    allowed = "fixed:0:N or N" if not warmup_allowed else f"{STEPS_METAVAR.replace('|', ' or ')}"
    try:
        policy = parse_policy(str(text).strip())
    except PolicyError:
        raise BadInput(f"--steps {text!r} is not valid: allowed {allowed}") from None
    if not isinstance(policy, FixedPolicy):
        raise BadInput(f"--steps {text}: {verb} runs a set number of steps: give {allowed}")
    if policy.warmup_steps and not warmup_allowed:
        raise BadInput(
            f"--steps {text}: {verb} compares every step, it has no warm-up: give {allowed}"
        )
    return policy.warmup_steps, policy.measured_steps
