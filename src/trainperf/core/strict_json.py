"""Strict JSON (RFC 8259) for every document trainperf writes: never NaN, never Infinity.

Python's ``json`` writes ``float('inf')`` as ``Infinity`` and ``float('nan')`` as ``NaN``:
no strict parser reads them (JavaScript's ``JSON.parse``, jq, Python with
``parse_constant``). Everything trainperf prints with ``--json``, exports, stores in the
database or hands from a worker to its parent goes through ``dumps`` here.

The rule is made where a value is computed: a number that cannot be computed (an interval
from too few runs, a ratio over zero) is ``None`` with a ``<key>_absent_reason`` beside it.
``dumps`` is the net under that rule. A non-finite number that still reaches it becomes
``null``, with ``<key>_absent_reason`` set beside it (in the object that holds it, or that
holds the array it is in) unless a reason is there already, so a document is never lost
for one bad number; and under ``TRAINPERF_STRICT_JSON=1`` (the test suite sets it) it
raises ``NonFiniteNumber`` naming the path instead, so that its source fails a test.

``loads`` reads strictly (a file that says ``Infinity`` is refused); ``finite`` converts
a document read from an older trainperf, which wrote such numbers, the way ``dumps``
would.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

from trainperf.core.limits import first_bad_number

STRICT_ENV = "TRAINPERF_STRICT_JSON"
REASON_SUFFIX = "_absent_reason"


class NonFiniteNumber(ValueError):
    """A NaN or infinity reached ``dumps`` in strict mode (``TRAINPERF_STRICT_JSON=1``)."""


def strict_mode() -> bool:
    return os.environ.get(STRICT_ENV, "") not in ("", "0")


def dumps(
    value: Any,
    *,
    indent: int | None = None,
    sort_keys: bool = False,
    separators: tuple[str, str] | None = None,
) -> str:
    """``value`` as strict JSON text. Numpy scalars and arrays are written as numbers and
    lists; a path is written as its text. See the module doc for non-finite numbers."""
    options: dict[str, Any] = {
        "indent": indent,
        "sort_keys": sort_keys,
        "separators": separators,
        "allow_nan": False,
        "default": _plain,
    }
    try:
        return json.dumps(value, **options)
    except ValueError:  # "Out of range float values are not JSON compliant"
        if strict_mode():
            where = first_non_finite(value)
            raise NonFiniteNumber(
                f"{where or 'the document'}: a non-finite number would be written; "
                f"make it None with a '{REASON_SUFFIX}' where it is computed"
            ) from None
        return json.dumps(finite(value), **options)


def write_object(out: TextIO, fields: Iterable[tuple[str, Any]]) -> dict[str, int]:
    """Write one JSON object to ``out`` field by field, in bounded memory whatever its size.
    A field whose value is an iterator (``iter(...)``, a generator) is written as an array
    one item at a time, an item per line, each through ``dumps``; any other value as
    ``dumps`` writes it with an indent of 2. Return the number of items of each array."""
    counts: dict[str, int] = {}
    out.write("{")
    for index, (key, value) in enumerate(fields):
        out.write(("," if index else "") + "\n  " + dumps(key) + ": ")
        if not isinstance(value, Iterator):
            out.write(dumps(value, indent=2).replace("\n", "\n  "))
            continue
        counts[key] = 0
        for item in value:
            out.write(("," if counts[key] else "[") + "\n    " + dumps(item))
            counts[key] += 1
        out.write("\n  ]" if counts[key] else "[]")
    out.write("\n}\n")
    return counts


def loads(text: str | bytes) -> Any:
    """Parse strict JSON: ``NaN``, ``Infinity`` and ``-Infinity`` raise ``ValueError``."""
    return json.loads(text, parse_constant=_refuse_constant)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (RFC 8259 allows finite numbers only)")


def _plain(value: Any) -> Any:
    """What ``json`` cannot write itself: numpy values as Python numbers, the rest as text."""
    if hasattr(value, "tolist") and hasattr(value, "dtype"):
        return value.tolist()  # a numpy scalar or array: Python numbers, checked again
    return str(value)


def is_non_finite(value: Any) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def _reason(value: float) -> str:
    return f"not a finite number ({value!r}): it could not be computed"


def finite(value: Any) -> Any:
    """A copy of a JSON-like document with every NaN and infinity replaced by None and
    its reason set beside it (module doc); the value itself when it holds none."""
    if first_non_finite(value) is None:
        return value
    return _replaced(_plain_tree(value))


def _plain_tree(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain_tree(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain_tree(v) for v in value]
    if hasattr(value, "tolist") and hasattr(value, "dtype"):
        return _plain_tree(value.tolist())
    return value


def _replaced(value: Any) -> Any:
    if isinstance(value, list):
        return [None if is_non_finite(v) else _replaced(v) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    reasons: dict[str, str] = {}
    for key, item in value.items():
        bad = _bad_inside(item)
        if bad is not None:
            reasons[f"{key}{REASON_SUFFIX}"] = _reason(bad)
        out[key] = None if is_non_finite(item) else _replaced(item)
    for key, reason in reasons.items():
        if not out.get(key):
            out[key] = reason
    return out


def _bad_inside(value: Any) -> float | None:
    """The first non-finite number of ``value`` itself or of the arrays in it (not of the
    objects in it: those carry their own reasons)."""
    if is_non_finite(value):
        return value
    if isinstance(value, list):
        for item in value:
            if (bad := _bad_inside(item)) is not None:
                return bad
    return None


def first_non_finite(value: Any) -> str | None:
    """The path (``results[3].metrics.cv``) of the first NaN or infinity in ``value``, or
    None when it holds none."""
    found = first_bad_number(_plain_tree(value), problem=_non_finite_problem)
    return None if found is None else (found[0] or "the value")


def _non_finite_problem(value: Any) -> str | None:
    return "not finite" if is_non_finite(value) else None
