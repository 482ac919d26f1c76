"""The layering contract of the trainperf package, read from the source with ``ast``.

- No import cycle between modules (imports inside functions count; imports only for type
  checkers, under ``if TYPE_CHECKING:``, do not: they never run).
- The predictor (trainperf.predict) imports nothing of a case's runtime (parallel, runner,
  worker, benchmark, training_step): what it counts of a model comes from trainperf.models.
- Layers: what measures and stores (models, measure, store, datasets, analysis and the
  small shared modules) never imports the command line, the reports, the child-process
  runner or torchrun; the reports never import the command line or the runner; only
  ``trainperf.__main__`` imports the command line from outside it.
- trainperf.cli: shared helpers are public in trainperf.cli.common, which imports no verb
  module, and every verb module imports only common.
- No module uses a private (``_``-prefixed) name of another, whether imported by name
  (``from trainperf.store.database import _write``) or reached through a module (``store._write``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

import trainperf

SRC = Path(trainperf.__file__).parent

# Low-level packages and modules: measurement, models, storage and what they share.
LOW_LEVEL = (
    "trainperf.models",
    "trainperf.measure",
    "trainperf.store.database",
    "trainperf.store.rows",
    "trainperf.store.schema",
    "trainperf.datasets",
    "trainperf.analysis",
    "trainperf.core.limits",
    "trainperf.case.precision",
    "trainperf.case.modes",
    "trainperf.core.fileio",
    "trainperf.case.outcome",
    "trainperf.case.spec",
    "trainperf.case.result",
)
# What low-level code must not import: the command line, reports, process launching.
LAUNCH_AND_UP = (
    "trainperf.cli",
    "trainperf.report",
    "trainperf.launch.runner",
    "trainperf.launch.sweep",
    "trainperf.launch.worker",
    "trainperf.parallel.torchrun",
)


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _modules() -> dict[str, ast.Module]:
    """Every module of the package by dotted name, parsed."""
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = ast.parse(path.read_text(), filename=str(path))
    return found


def _is_package(name: str) -> bool:
    return (SRC.parent / name.replace(".", "/") / "__init__.py").is_file()


def _type_checking_only(tree: ast.Module) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:``."""
    hidden = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            hidden |= {id(inner) for stmt in node.body for inner in ast.walk(stmt)}
    return hidden


def _imported(module: str, tree: ast.Module, is_package: bool) -> list[tuple[str, str]]:
    """(module, name) for every ``from X import name`` of the module (nested ones too, not
    those for type checkers only); relative imports resolved; ``import X`` gives (X, "")."""
    package = module if is_package else module.rpartition(".")[0]
    hidden = _type_checking_only(tree)
    pairs = []
    for node in ast.walk(tree):
        if id(node) in hidden:
            continue
        if isinstance(node, ast.Import):
            pairs += [(alias.name, "") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            pairs += [(base, alias.name) for alias in node.names]
    return pairs


def _target(source: str, name: str, modules: set[str]) -> str | None:
    """The module an import reaches: ``from pkg import sub`` reaches the submodule."""
    if name and f"{source}.{name}" in modules:
        return f"{source}.{name}"
    while source and source not in modules:
        source = source.rpartition(".")[0]
    return source or None


def import_graph(modules: dict[str, ast.Module]) -> nx.DiGraph:
    graph = nx.DiGraph()
    names = set(modules)
    for module, tree in modules.items():
        graph.add_node(module)
        for source, name in _imported(module, tree, _is_package(module)):
            if source.startswith("trainperf"):
                target = _target(source, name, names)
                if target and target != module:
                    graph.add_edge(module, target)
    return graph


def cycles(graph: nx.DiGraph) -> list[list[str]]:
    return [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]


def test_no_import_cycles():
    assert cycles(import_graph(_modules())) == []


def test_low_level_modules_never_import_cli_reports_or_launching():
    graph = import_graph(_modules())
    offences = [
        f"{a} -> {b}" for a, b in graph.edges if _within(a, LOW_LEVEL) and _within(b, LAUNCH_AND_UP)
    ]
    assert offences == []


def test_reports_never_import_the_cli_or_the_runner():
    graph = import_graph(_modules())
    offences = [
        f"{a} -> {b}"
        for a, b in graph.edges
        if _within(a, ("trainperf.report",))
        and _within(b, ("trainperf.cli", "trainperf.launch.runner", "trainperf.launch.sweep"))
    ]
    assert offences == []


# The runtime of a case: what launches, wraps and runs a training step.
RUNTIME = (
    "trainperf.parallel",
    "trainperf.launch.runner",
    "trainperf.launch.worker",
    "trainperf.step.benchmark",
    "trainperf.step.training_step",
)


def test_the_predictor_imports_no_runtime():
    graph = import_graph(_modules())
    offences = [
        f"{a} -> {b}"
        for a, b in graph.edges
        if _within(a, ("trainperf.predict",)) and _within(b, RUNTIME)
    ]
    assert offences == []


def test_only_main_imports_the_cli_from_outside():
    graph = import_graph(_modules())
    importers = {
        a
        for a, b in graph.edges
        if _within(b, ("trainperf.cli",)) and not _within(a, ("trainperf.cli",))
    }
    assert importers <= {"trainperf.__main__"}


def test_cli_verbs_import_only_common():
    graph = import_graph(_modules())
    cli = [m for m in graph if _within(m, ("trainperf.cli",))]
    assert not any(_within(b, ("trainperf.cli",)) for b in graph.successors("trainperf.cli.common"))
    for module in cli:
        if module not in ("trainperf.cli", "trainperf.cli.common"):
            inside = {b for b in graph.successors(module) if _within(b, ("trainperf.cli",))}
            assert inside <= {"trainperf.cli.common"}, module


def _module_aliases(module: str, tree: ast.Module, names: set[str]) -> dict[str, str]:
    """Local names bound to trainperf modules: ``import trainperf.x as y``,
    ``from trainperf import store``."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in names and alias.asname:
                    aliases[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if f"{node.module}.{alias.name}" in names:
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def private_uses(modules: dict[str, ast.Module]) -> list[str]:
    """Every use of another module's private name, by import or by attribute."""
    names = set(modules)
    offences = []
    for module, tree in modules.items():
        for source, name in _imported(module, tree, _is_package(module)):
            private = name.startswith("_") and not name.startswith("__")
            if source.startswith("trainperf") and source != module and private:
                offences.append(f"{module}: from {source} import {name}")
        aliases = _module_aliases(module, tree, names)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and aliases[node.value.id] != module
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                offences.append(f"{module}: {aliases[node.value.id]}.{node.attr}")
    return offences


def test_no_module_uses_a_private_name_of_another():
    assert private_uses(_modules()) == []


def test_the_contract_can_fail():
    """The checks see what they forbid, in made-up modules."""
    made_up = {
        "trainperf.a": ast.parse("from trainperf import b\nb._hidden()\n"),
        "trainperf.b": ast.parse("def f():\n    from trainperf.a import _x\n"),
        "trainperf.c": ast.parse(
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import trainperf.a\n"
        ),
    }
    graph = import_graph(made_up)
    assert cycles(graph) == [["trainperf.a", "trainperf.b"]]
    assert not graph.has_edge("trainperf.c", "trainperf.a")  # for type checkers only
    assert private_uses(made_up) == [
        "trainperf.a: trainperf.b._hidden",
        "trainperf.b: from trainperf.a import _x",
    ]
