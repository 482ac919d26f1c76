"""docs/reproduce.md maps the published studies to commands and report figures that exist.

The page has a section per study, (a) to (e), each with a table whose rows name a
``trainperf`` command (in backticks) and a report figure key (in backticks, ``*`` for the
figures whose key starts with it). Every key must be one of ``trainperf.report.html``'s
SECTIONS prefixes, or start with one, so a figure renamed or removed fails here. Every
command of the page, in a table or in prose, must also stand in one of its fenced code
blocks, where tests/test_docs_examples.py parses it against the CLI; here each is parsed
too, and must be one that runs on a CPU at a small size: no ``...`` elision or ``<...>``
placeholder, ``--device cpu`` wherever the verb would otherwise pick a GPU, a short fixed
step budget and one run. Nothing is run: parsing only.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from test_docs_examples import Example, parse
from trainperf.cli import cli
from trainperf.report.html import SECTIONS

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "reproduce.md"
STUDIES = ("(a)", "(b)", "(c)", "(d)", "(e)")
PREFIXES = tuple(prefix for _, _, prefixes, _ in SECTIONS for prefix in prefixes)
CODE_SPAN = re.compile(r"`([^`]+)`")
FIGURE_HEADER = "Report figure"
COMMAND_HEADER = "trainperf commands"


def text() -> str:
    return PAGE.read_text()


def sections(page: str) -> dict[str, str]:
    """Study id ("(a)") -> the text of its ``## (a) ...`` section."""
    found: dict[str, str] = {}
    current = None
    for line in page.splitlines():
        if line.startswith("## "):
            current = next((s for s in STUDIES if line[3:].startswith(s)), None)
            if current:
                found[current] = ""
        elif current:
            found[current] += line + "\n"
    return found


def table_rows(section: str) -> list[dict[str, str]]:
    """The rows of the section's table that has the command and figure columns."""
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    for line in section.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif not set("".join(cells)) <= set("-: "):
            rows.append(dict(zip(header, cells, strict=True)))
    return [row for row in rows if FIGURE_HEADER in row and COMMAND_HEADER in row]


def commands_in(cell: str) -> list[str]:
    return [span for span in CODE_SPAN.findall(cell) if span.startswith("trainperf ")]


def prose(page: str) -> str:
    """The page without its fenced code blocks (whose fences would pair with backticks)."""
    kept, in_block = [], False
    for line in page.splitlines():
        if line.strip().startswith("```"):
            in_block = not in_block
        elif not in_block:
            kept.append(line)
    return "\n".join(kept)


def fenced_commands(page: str) -> list[str]:
    """The ``trainperf`` lines of the page's fenced code blocks (comments stripped)."""
    found, in_block = [], False
    for line in page.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            in_block = not in_block
        elif in_block and stripped.startswith("trainperf "):
            found.append(shlex.join(shlex.split(stripped, comments=True)))
    return found


def figure_key_exists(key: str) -> bool:
    stem = key.removesuffix("*")
    return any(stem.startswith(prefix) for prefix in PREFIXES)


def small_on_a_cpu(words: list[str]) -> list[str]:
    """Why the command ``trainperf WORDS`` would need a GPU or run long ([] when it would
    not), from its parsed options."""
    context = parse(words)
    params = context.params
    problems = []
    settings = [str(s) for s in params.get("overrides") or ()]  # --set FIELD=VALUE
    fields = dict(s.split("=", 1) for s in settings if "=" in s)
    device_option = next((p for p in context.command.params if p.name == "device"), None)
    picks_a_gpu = device_option is not None and device_option.default == "auto"
    if picks_a_gpu and fields.get("device", params.get("device")) != "cpu":
        problems.append("--device cpu missing")
    verb = words[0]
    if verb in ("run", "profile"):
        steps = fields.get("steps", params.get("steps"))
        match = re.fullmatch(r"fixed:(\d+):(\d+)", str(steps))
        if not match or int(match[1]) + int(match[2]) > 10:
            problems.append(f"steps {steps!r}: not a short fixed budget")
        if verb == "run":
            runs = fields.get("runs", params.get("runs"))
            if str(runs) != "1":
                problems.append(f"runs {runs!r}: not 1")
        size = int(fields.get("image_size", params.get("image_size") or 0))
        if size > 64:
            problems.append(f"image size {size}")
    if verb == "train" and params.get("max_epochs", 99) > 2:
        problems.append("more than 2 epochs")
    return problems


def test_a_section_per_study_each_with_a_table():
    found = sections(text())
    assert sorted(found) == list(STUDIES)
    for study, body in found.items():
        rows = table_rows(body)
        assert len(rows) >= 3, f"{study}: {len(rows)} table rows"
        for row in rows:
            assert commands_in(row[COMMAND_HEADER]), f"{study}: a row names no command: {row}"
            keys = CODE_SPAN.findall(row[FIGURE_HEADER])
            assert keys, f"{study}: a row names no report figure: {row}"
            missing = [k for k in keys if not figure_key_exists(k)]
            assert not missing, f"{study}: figure keys not in html.SECTIONS: {missing}"


def test_every_section_prefix_of_the_tables_is_one_the_report_draws():
    keys = {
        key
        for body in sections(text()).values()
        for row in table_rows(body)
        for key in CODE_SPAN.findall(row[FIGURE_HEADER])
    }
    # The page covers the report's figures of the studies, not one family only.
    stems = {next(p for p in PREFIXES if k.removesuffix("*").startswith(p)) for k in keys}
    assert {"throughput-vs-devices", "layer-breakdown", "comm-share-vs-devices"} <= stems
    assert {"collective-busbw", "gemm-tflops", "framework-", "convergence"} <= stems


def names_a_verb(words: list[str]) -> bool:
    """Whether ``trainperf WORDS`` only names a verb (``trainperf micro p2p``), with no
    option or argument: prose that names a verb, not a command to run."""
    command: click.Command = cli
    context = click.Context(cli, info_name="trainperf")
    for word in words:
        if not isinstance(command, click.Group):
            return False
        found = command.get_command(context, word)
        if found is None:
            return False
        command = found
    return not isinstance(command, click.Group)


def test_every_command_stands_in_a_fenced_block_and_is_checked():
    page = text()
    fenced = set(fenced_commands(page))
    spans = [shlex.split(s) for s in CODE_SPAN.findall(prose(page)) if s.startswith("trainperf ")]
    verbs = [words for words in spans if names_a_verb(words[1:])]
    inline = {shlex.join(words) for words in spans if words not in verbs}
    assert inline and verbs, "no command in backticks found"
    # In a fenced block, tests/test_docs_examples.py parses it against the CLI.
    assert not inline - fenced, f"commands only in prose or tables: {sorted(inline - fenced)}"
    assert len(fenced) >= 20


@pytest.mark.parametrize("command", sorted(set(fenced_commands(PAGE.read_text()))))
def test_every_command_parses_and_is_small_on_a_cpu(command):
    words = tuple(shlex.split(command))
    example = Example(PAGE, 0, words)
    assert not example.elided, f"{command}: elided ('...' or '<...>'): not checked"
    assert example.variants() == [list(words[1:])], f"{command}: optional parts: not all checked"
    try:
        problems = small_on_a_cpu(list(words[1:]))
    except click.ClickException as exc:
        pytest.fail(f"{command}: {exc.format_message()}")
    assert not problems, f"{command}: {problems}"


def test_the_checks_catch_a_bad_page():
    assert not figure_key_exists("throughput-vs-nodes")
    assert figure_key_exists("framework-*") and figure_key_exists("precision-speedup-*")
    with pytest.raises(click.UsageError):
        small_on_a_cpu(["run", "-m", "resnet18", "--nodez", "2"])
    assert small_on_a_cpu(["run", "-m", "resnet18", "--steps", "fixed:1:3", "--runs", "1"]) == [
        "--device cpu missing"
    ]
    assert "runs '3': not 1" in small_on_a_cpu(
        ["run", "-m", "resnet18", "--steps", "fixed:1:3", "--runs", "3", "--device", "cpu"]
    )
    assert small_on_a_cpu(["micro", "gemm", "--device", "cuda"]) == ["--device cpu missing"]
    assert small_on_a_cpu(["predict", "-m", "resnet50", "--device", "k80", "--devices", "1"]) == []
    elided = Example(PAGE, 0, ("trainperf", "run", "...", "--json"))
    assert elided.elided
