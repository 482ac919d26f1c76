"""Markdown tables (``--format md``) rendered from the terminal tables."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from trainperf.report.markdown import markdown_table


def test_header_alignment_and_cells():
    table = Table(title="t")
    table.add_column("name")
    table.add_column("value", justify="right")
    table.add_row("a|b", "1.5")
    table.add_row(Text("two\nlines"), "[bold]2[/bold]")
    lines = markdown_table(table).splitlines()
    assert lines[0] == "**t**"
    assert lines[2] == "| name | value |"
    assert lines[3] == "| --- | ---: |"
    assert lines[4] == "| a\\|b | 1.5 |"  # a pipe in a cell does not split it
    assert lines[5] == "| two lines | 2 |"  # markup dropped, line breaks joined


def test_escaped_markup_comes_back_as_the_text(run_cli, tmp_path):
    from rich.markup import escape

    table = Table()
    table.add_column("error")
    table.add_row(escape("[pair.cc:537] connection reset"))
    assert "| [pair.cc:537] connection reset |" in markdown_table(table)


def test_cli_tables_as_markdown(run_cli):
    code, out, _ = run_cli("models --format md")
    assert code == 0
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| model | family |")
    assert any(line.startswith("| resnet50 |") for line in rows)


def test_json_and_markdown_together_is_bad_input(run_cli):
    code, out, err = run_cli("suites --json --format md")
    assert code == 2
    assert out == ""
    assert err.strip() == "trainperf: error: choose one of --json and --format md"
