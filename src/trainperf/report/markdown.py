"""Any Rich table of trainperf as a GitHub-flavoured Markdown table (``--format md``).

The terminal tables are the one place where columns, headers and number formats are
decided; Markdown is rendered from them, so the two never disagree. Cells are plain text
(Rich markup and styles dropped); ``|`` is escaped and line breaks become spaces.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text


def _plain(cell: Any) -> str:
    text = cell.plain if isinstance(cell, Text) else Text.from_markup(str(cell)).plain
    return " ".join(text.split())


def plain_table(table: Table) -> dict[str, Any]:
    """Title, headers, column alignments, rows and caption of the table as plain text.

    The HTML report renders these (escaped by Jinja2); nothing here is escaped for HTML.
    """
    return {
        "title": Text.from_markup(str(table.title)).plain if table.title else "",
        "caption": Text.from_markup(str(table.caption)).plain if table.caption else "",
        "headers": [_plain(column.header) for column in table.columns],
        "justify": [column.justify for column in table.columns],
        "rows": [
            [_plain(cell) for cell in row]
            for row in zip(*(list(column.cells) for column in table.columns), strict=True)
        ],
    }


def markdown_table(table: Table) -> str:
    """The table as Markdown, its title (if any) as a bold line above it."""
    plain = plain_table(table)

    def cells(row: list[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |"

    align = {"right": "---:", "center": ":---:"}
    lines = []
    if plain["title"]:
        lines += [f"**{' '.join(plain['title'].split())}**", ""]
    lines.append(cells(plain["headers"]))
    lines.append("| " + " | ".join(align.get(j, "---") for j in plain["justify"]) + " |")
    lines += [cells(row) for row in plain["rows"]]
    if plain["caption"]:
        lines += ["", " ".join(plain["caption"].split())]
    return "\n".join(lines) + "\n"
