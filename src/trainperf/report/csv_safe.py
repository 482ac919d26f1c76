"""CSV that is safe to open in a spreadsheet (``results --csv``, ``export FILE.csv``).

A spreadsheet reads a cell that begins with ``=``, ``+``, ``-`` or ``@`` as a formula, and
some strip a leading tab or carriage return and then do the same: a model or host named
``=cmd|' /C calc'!A0`` would run a command on the machine of whoever opens the file
(OWASP, "CSV Injection"). As OWASP recommends, such a cell is written with a single quote
before it, which the spreadsheet shows as text. Only text is escaped, decided by the
value's type and never by the look of the string: a number trainperf wrote as a number
(-67.3) stays a number a spreadsheet can sum.

Lines end in CRLF (RFC 4180, the ``excel`` dialect), so that the writer quotes a carriage
return inside a cell: with ``\n`` line ends, Python 3.11's writer leaves it bare, and a
host named ``x\r=cmd|...`` would start a line of its own with an unescaped formula.
"""

from __future__ import annotations

import csv
import io
import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value: Any) -> Any:
    """``value`` as a CSV cell: text that a spreadsheet would run prefixed with ``'``;
    numbers, booleans and None as they are."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def csv_text(columns: Sequence[str], rows: Iterable[dict[str, Any]]) -> str:
    """A header of ``columns`` and one line per row, every cell through ``safe_cell``: the
    one CSV writer of trainperf (``csv_lines`` gives it line by line)."""
    return "".join(csv_lines(columns, rows))


def csv_lines(columns: Sequence[str], rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    """The lines of ``csv_text``, one at a time, as ``rows`` are read."""
    out = io.StringIO()
    writer = csv.writer(out, dialect="excel")  # CRLF: a \r or \n in a cell is quoted
    for row in itertools.chain([dict(zip(columns, columns, strict=True))], rows):
        writer.writerow([safe_cell(row.get(c)) for c in columns])
        yield out.getvalue()
        out.seek(0)
        out.truncate()
