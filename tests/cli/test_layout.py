"""The layout of the trainperf.cli package: shared helpers are public in
trainperf.cli.common, which imports no verb module, and no module of src/ imports another
module's private (``_``-prefixed) name; the cli modules import each other without a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import trainperf

SRC = Path(trainperf.__file__).parent


def _modules() -> dict[str, ast.Module]:
    """Every module of the package by dotted name, parsed."""
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = ast.parse(path.read_text(), filename=str(path))
    return found


def _imported(module: str, tree: ast.Module, is_package: bool) -> list[tuple[str, str]]:
    """(module, name) for every ``from X import name`` of the module (nested ones too);
    relative imports resolved; ``import X`` gives (X, "")."""
    package = module if is_package else module.rpartition(".")[0]
    pairs = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            pairs += [(alias.name, "") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            pairs += [(base, alias.name) for alias in node.names]
    return pairs


def _is_package(name: str) -> bool:
    return (SRC.parent / name.replace(".", "/") / "__init__.py").is_file()


def test_no_module_imports_a_private_name_of_another():
    offences = [
        f"{module}: from {source} import {name}"
        for module, tree in _modules().items()
        for source, name in _imported(module, tree, _is_package(module))
        if source.startswith("trainperf")
        and source != module
        and name.startswith("_")
        and not name.startswith("__")
    ]
    assert offences == []


def _cli_graph() -> dict[str, set[str]]:
    """Which trainperf.cli modules each trainperf.cli module imports."""
    modules = _modules()
    cli = {name for name in modules if name == "trainperf.cli" or name.startswith("trainperf.cli.")}
    graph = {}
    for module in cli:
        edges = set()
        for source, name in _imported(module, modules[module], _is_package(module)):
            if f"{source}.{name}" in cli:
                edges.add(f"{source}.{name}")  # from trainperf.cli import run: the module
            elif source in cli:
                edges.add(source)
        graph[module] = edges - {module}
    return graph


def test_common_imports_no_other_cli_module():
    assert _cli_graph()["trainperf.cli.common"] == set()


def test_verb_modules_import_only_common():
    graph = _cli_graph()
    for module, edges in graph.items():
        if module not in ("trainperf.cli", "trainperf.cli.common"):
            assert edges <= {"trainperf.cli.common"}, module


def test_cli_modules_have_no_import_cycle():
    graph = _cli_graph()
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, " -> ".join((*path, module))
        if module not in done:
            for edge in graph[module]:
                visit(edge, (*path, module))
            done.add(module)

    for module in graph:
        visit(module, ())


def test_the_layout_check_sees_a_private_import():
    """The check itself can fail: a private import in a made-up module is found."""
    tree = ast.parse("from trainperf.cli.common import _apply\nfrom . import _x\n")
    pairs = _imported("trainperf.cli.run", tree, is_package=False)
    assert ("trainperf.cli.common", "_apply") in pairs
    assert ("trainperf.cli", "_x") in pairs
