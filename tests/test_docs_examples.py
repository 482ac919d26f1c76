"""Every ``trainperf ...`` example of README.md and docs/*.md is a command the CLI takes.

The examples are read from the fenced code blocks: a line that starts with ``trainperf ``,
joined with the lines it continues onto (a line ending in ``\\``), split and stripped of
its ``# comment`` by shell rules (shlex). The examples write placeholders three ways, and
this test reads them so:

- ``...`` stands for options left out (``trainperf run ... --json``): the line is not
  checked, and neither is one with a ``<...>`` word;
- ``[--flag]`` and ``[--a | --b]`` mark optional options: the line is checked without them,
  and with each alternative that holds no value to fill in;
- a word in capitals (``PATH``, ``HOST``, ``DIR``) is a value to fill in: an optional part
  holding one is left out (``trainperf report [--db PATH]``).

Each line is parsed by click itself (``Command.make_context``): the verb exists, every
option exists and its value converts, as on the command line, but the verb does not run.
The cheap ones also run for real in a folder holding a small two-system database as
``trainperf.db`` (the listings, the readers, export and import, and ``slurm``, which
writes its script there): that is how a failure at run time, like the ``slurm scaling``
example that made two cases of the suite equal, is caught.
"""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from report_fixture import build
from trainperf.cli import cli

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FILL_IN = re.compile(r"[A-Z][A-Z_]+")  # PATH, HOST, DIR: a value to fill in
ELIDED = re.compile(r"\.\.\.|<[^>]*>")
# Verbs whose examples run for real: quick, and writing only into the test's folder.
RUN_FOR_REAL = ("suites", "catalog", "scaling", "pareto", "results", "compare", "export")
RUN_FOR_REAL += ("import", "slurm")


@dataclass(frozen=True)
class Example:
    path: Path
    line: int
    words: tuple[str, ...]  # without the comment, "trainperf" first

    def __str__(self) -> str:
        return f"{self.path.name}:{self.line}"

    @property
    def elided(self) -> bool:
        return any(ELIDED.fullmatch(word) for word in self.words)

    def variants(self) -> list[list[str]]:
        """The arguments after ``trainperf``: without the optional parts, then with each
        alternative of each that holds no value to fill in."""
        base: list[str] = []
        optional: list[list[list[str]]] = []
        group: list[list[str]] | None = None
        depth = 0  # a part nested in an alternative ([--json [--steps] | --csv]) goes with it
        for word in self.words[1:]:
            opens = len(word) - len(word.lstrip("["))
            if group is None and opens:
                group = [[]]
            if group is None:
                base.append(word)
                continue
            closes = len(word) - len(word.rstrip("]"))
            depth += opens - closes
            word = word.strip("[]")
            if word == "|" and depth == 1:
                group.append([])
            elif word:
                group[-1].append(word)
            if depth == 0:
                optional.append(group)
                group = None
        assert group is None, f"{self}: an unclosed '['"
        variants = [base]
        for alternatives in optional:
            for alternative in alternatives:
                if alternative and not any(FILL_IN.fullmatch(w) for w in alternative):
                    variants.append(base + alternative)
        return variants


def examples() -> list[Example]:
    found = []
    for path in DOCUMENTS:
        lines = path.read_text().splitlines()
        in_block, index = False, 0
        while index < len(lines):
            text, first = lines[index].strip(), index + 1
            if text.startswith("```"):
                in_block = not in_block
            elif in_block and text.startswith("trainperf "):
                while text.endswith("\\") and index + 1 < len(lines):
                    index += 1
                    text = text[:-1] + " " + lines[index].strip()
                found.append(Example(path, first, tuple(shlex.split(text, comments=True))))
            index += 1
    return found


EXAMPLES = examples()
CHECKED = [example for example in EXAMPLES if not example.elided]


def parse(args: list[str]) -> click.Context:
    """Parse ``trainperf ARGS`` as click does, down to the verb, without running it."""
    context = click.Context(cli, info_name="trainperf")
    command: click.Command = cli
    name = "trainperf"
    while isinstance(command, click.Group):
        if not args:
            raise click.UsageError(f"'{name}' needs a command")
        name, *args = args
        found = command.get_command(context, name)
        if found is None:
            raise click.UsageError(f"no such command '{name}'")
        command = found
        if isinstance(command, click.Group):
            context = click.Context(command, info_name=name, parent=context)
    return command.make_context(name, args, parent=context)


def test_the_examples_are_found():
    # A change of layout that hid the examples from this test would pass every check.
    assert len(EXAMPLES) >= 50 and len(CHECKED) >= 45
    verbs = {example.words[1] for example in CHECKED}
    assert {"run", "slurm", "micro", "compare", "predict", "train", "maxbatch"} <= verbs
    joined = {" ".join(example.words) for example in EXAMPLES}
    assert "trainperf slurm scaling --nodes 4 --gpus-per-node 8" in joined
    assert not any("\\" in words for words in joined)  # continuation lines joined


@pytest.mark.parametrize("example", CHECKED, ids=str)
def test_every_example_parses(example):
    for args in example.variants():
        try:
            parse(args)
        except click.ClickException as exc:
            pytest.fail(f"{example}: trainperf {shlex.join(args)}: {exc.format_message()}")


def test_an_example_that_does_not_parse_is_caught():
    bad = Example(Path("x.md"), 1, ("trainperf", "run", "--nodez", "2"))
    with pytest.raises(click.UsageError, match="No such option"):
        parse(bad.variants()[0])
    with pytest.raises(click.BadParameter):
        parse(["run", "--devices", "two"])
    with pytest.raises(click.UsageError, match="no such command"):
        parse(["runn"])
    words = shlex.split("trainperf results [--db PATH] [--json | --csv]  # stored", comments=True)
    optional = Example(Path("x.md"), 1, tuple(words))
    assert optional.variants() == [["results"], ["results", "--json"], ["results", "--csv"]]


def test_the_cheap_examples_run(tmp_path, monkeypatch, run_cli):
    build(tmp_path / "trainperf.db", hostile_model=False)  # the examples' default database
    shutil.copy(tmp_path / "trainperf.db", tmp_path / "after.db")
    monkeypatch.chdir(tmp_path)
    assert run_cli("export before.json")[0] == 0  # for `trainperf compare before.json after.db`
    ran, failures = [], []
    for example in CHECKED:
        if example.words[1] not in RUN_FOR_REAL:
            continue
        for args in example.variants():
            code, out, err = run_cli(args)
            ran.append(args)
            if code != 0:
                failures.append(f"{example}: trainperf {shlex.join(args)}: exit {code}: {err}")
    assert not failures, "\n".join(failures)
    assert ["slurm", "scaling", "--nodes", "4", "--gpus-per-node", "8"] in ran
    script = (tmp_path / "trainperf-scaling.sbatch").read_text()
    assert "#SBATCH --nodes=4" in script and "#SBATCH --gpus-per-node=8" in script
    assert len(ran) >= 15


def test_the_readme_names_the_export_format_version_trainperf_writes():
    from trainperf.store.exchange_format import FORMAT_VERSION

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    assert re.findall(r'"format_version": (\d+)', readme) == [str(FORMAT_VERSION)]
