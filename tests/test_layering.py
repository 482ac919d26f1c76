"""The layering contract of the trainperf package, read from the source with ``ast``.

- The top of ``src/trainperf`` holds packages only (and ``__init__``, ``__main__``), each
  named in ``LAYERS``: a new package must say where it stands.
- Imports only go down ``LAYERS``: a module imports from its own package or from one below
  it, never from one above. So the predictor (predict) imports nothing of a case's runtime
  (parallel, step, launch): what it counts of a model comes from trainperf.models.
- No import cycle between modules, counting every import: those inside functions and those
  for type checkers only (``if TYPE_CHECKING:``).
- trainperf.cli: shared helpers are public in trainperf.cli's shared modules (``CLI_SHARED``:
  common, flag_types, store_access), which import no verb module, and every verb module
  imports only those.
- No module uses a private (``_``-prefixed) name of another, whether imported by name
  (``from trainperf.store.database import _write``) or reached through a module
  (``store._write``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

import trainperf

SRC = Path(trainperf.__file__).parent

# The packages from the bottom up; a module may import from its own package and those
# before it. "trainperf" is the package's __init__ (its version), "trainperf.__main__" the
# entry point. Packages in one line stand side by side in this order.
LAYERS = (
    "trainperf",
    "trainperf.core",  # limits, strict JSON, atomic files: what every layer shares
    "trainperf.measure",  # clocks, timers, statistics, energy meters
    "trainperf.models",  # the zoo (torch and Flax), block counting, FLOPs
    "trainperf.datasets",
    "trainperf.case",  # what to measure and what became of it
    "trainperf.store",  # where results live and how they travel
    "trainperf.predict",  # the analytic model: no runtime below it
    "trainperf.analysis",
    "trainperf.system",
    "trainperf.parallel",  # what runs on a rank: groups, DDP and FSDP2 wrapping
    "trainperf.step",  # what one process measures
    "trainperf.jax",
    "trainperf.micro",
    "trainperf.profile",
    "trainperf.convergence",
    "trainperf.doctor",
    "trainperf.report",
    "trainperf.launch",  # how processes start, end and are cleaned
    "trainperf.cli",
    "trainperf.__main__",
)


def layer_of(module: str) -> int:
    """The index in LAYERS of the package holding ``module``."""
    parts = module.split(".")
    top = ".".join(parts[:2]) if len(parts) > 1 else parts[0]
    return LAYERS.index(top)


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


def _imported(module: str, tree: ast.Module, is_package: bool) -> list[tuple[str, str]]:
    """(module, name) for every ``from X import name`` of the module (nested ones and those
    for type checkers only too); relative imports resolved; ``import X`` gives (X, "")."""
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


def upward_imports(graph: nx.DiGraph) -> list[str]:
    """Every import of a module from a package above its own in LAYERS."""
    return [f"{a} -> {b}" for a, b in graph.edges if layer_of(b) > layer_of(a)]


def test_the_top_level_holds_packages_each_in_its_layer():
    top = {path.name for path in SRC.iterdir() if not path.name.startswith((".", "__pycache__"))}
    modules = {name for name in top if name.endswith(".py")}
    assert modules == {"__init__.py", "__main__.py"}
    packages = {f"trainperf.{name}" for name in top if (SRC / name / "__init__.py").is_file()}
    assert packages <= set(LAYERS), sorted(packages - set(LAYERS))


def test_imports_only_go_down_the_layers():
    assert upward_imports(import_graph(_modules())) == []


def test_the_predictor_imports_no_runtime():
    """Implied by the layers; said once more because the analytic model must stay
    importable without what runs a case."""
    runtime = ("trainperf.parallel", "trainperf.step", "trainperf.launch", "trainperf.jax")
    graph = import_graph(_modules())
    offences = [
        f"{a} -> {b}"
        for a, b in graph.edges
        if _within(a, ("trainperf.predict",)) and _within(b, runtime)
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


# The modules of trainperf.cli that the verbs share; they import only one another.
CLI_SHARED = {"trainperf.cli.common", "trainperf.cli.flag_types", "trainperf.cli.store_access"}


def cli_offences(graph: nx.DiGraph) -> list[str]:
    """Imports inside trainperf.cli that break its rule: the shared modules import only one
    another; a verb imports the shared modules and its own parts (a verb may be a package,
    trainperf.cli.predict.inputs), never another verb."""
    offences = []
    for module in graph:
        if not _within(module, ("trainperf.cli",)) or module == "trainperf.cli":
            continue
        verb = ".".join(module.split(".")[:3])
        allowed = CLI_SHARED if module in CLI_SHARED else CLI_SHARED | {verb}
        offences += [
            f"{module} -> {b}"
            for b in graph.successors(module)
            if _within(b, ("trainperf.cli",)) and not _within(b, tuple(allowed))
        ]
    return offences


def test_cli_verbs_import_only_the_shared_modules():
    graph = import_graph(_modules())
    assert set(graph) >= CLI_SHARED
    assert cli_offences(graph) == []


def test_a_verb_may_import_its_own_parts_but_not_another_verb():
    """The rule on a synthetic package: a verb's own submodule passes, another verb's fails,
    and so does a shared module importing a verb."""
    own = {
        "trainperf.cli.verb": ast.parse("import trainperf.cli.verb.parts"),
        "trainperf.cli.verb.parts": ast.parse("from trainperf.cli import common"),
        "trainperf.cli.common": ast.parse(""),
    }
    assert cli_offences(import_graph(own)) == []
    other = {**own, "trainperf.cli.other": ast.parse("import trainperf.cli.verb.parts")}
    assert cli_offences(import_graph(other)) == ["trainperf.cli.other -> trainperf.cli.verb.parts"]
    shared = {**own, "trainperf.cli.common": ast.parse("import trainperf.cli.verb")}
    assert cli_offences(import_graph(shared)) == ["trainperf.cli.common -> trainperf.cli.verb"]


def _module_aliases(module: str, tree: ast.Module, names: set[str]) -> dict[str, str]:
    """Local names bound to trainperf modules: ``import trainperf.x as y``,
    ``from trainperf.store import database``."""
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
    assert graph.has_edge("trainperf.c", "trainperf.a")  # for type checkers only: counted
    layered = {
        "trainperf.store.x": ast.parse("from trainperf.launch.runner import run_job\n"),
        "trainperf.launch.runner": ast.parse("from trainperf.store import x\n"),
    }
    assert upward_imports(import_graph(layered)) == ["trainperf.store.x -> trainperf.launch.runner"]
    assert private_uses(made_up) == [
        "trainperf.a: trainperf.b._hidden",
        "trainperf.b: from trainperf.a import _x",
    ]
