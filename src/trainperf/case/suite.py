"""Suites: named grids of cases in YAML, validated with the file and line of every problem.

A suite file is a mapping::

    name: short-test                 # required
    description: what it measures    # optional
    claims: [{model: resnet50, batch_size: [32, 64]}]   # optional: the description's facts
    defaults: {steps: "fixed:10:100"}   # case fields applied to every case
    cases:                           # explicit cases (each merged over the defaults)
      - {model: resnet50, batch_size: 64}
    matrix:                          # field -> values, expanded as the cartesian product
      model: [alexnet, resnet50]
      batch_size: [32, 64, 128, max]
    exclude:                         # partial cases removed from the expansion
      - {model: alexnet, batch_size: max}

``claims`` restate what the description says in a checked form (trainperf.case.claims;
the built-in suites' are audited by tests/case/test_suite_claims.py).
``cases`` and ``matrix`` may both be given; the suite is the explicit cases followed by the
expansion. An excluded case stays in the plan and is recorded as ``skipped`` with the
exclusion that removed it. ``batch_size: max`` means the largest batch that fits (see
trainperf.launch.maxbatch), looked up or found when the case runs.

The version of a suite is derived from its content: the first 12 hex digits of SHA-256
over the parsed document (name, defaults, cases, matrix, exclude) in canonical JSON, so
comments, layout, key order, the description and its claims do not change it. Resuming a sweep
matches results by system, suite version and case key (``PlannedCase.key``).

A suite file is bounded, so that a small file cannot hang or crash the loader: YAML
aliases may repeat at most ``MAX_ALIAS_NODES`` nodes in all (each alias counts the nodes
of what it repeats, fully expanded; a recursive alias is refused), a suite plans at most
``MAX_CASES`` cases (the matrix counted as the product of its axis lengths before it is
expanded), a key may not appear twice in one mapping, and nesting too deep for the parser
is one error line. The environment variables ``TRAINPERF_MAX_CASES`` and
``TRAINPERF_MAX_ALIAS_NODES`` change the two limits.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import math
import os
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from trainperf.case.spec import Case, CaseError, DeviceKind, HardwareAbsent, check_case, label_of
from trainperf.case.spec import describe_validation_error as describe_case_error
from trainperf.case.stored import ADDED_CASE_FIELDS
from trainperf.core import fileio
from trainperf.core.limits import MAX_COUNT, ascii_digits, control_problem
from trainperf.core.strict_yaml import StrictLoader, YamlRefused

MAX_BATCH = "max"
SUITE_FIELDS = ("name", "description", "claims", "defaults", "cases", "matrix", "exclude")
# What a suite says about its cases rather than what they are: not part of its version.
PROSE_FIELDS = ("description", "claims")
# The keys of a claim besides case fields (trainperf.case.claims says what they mean).
CLAIM_FIELDS = ("where", "cases", "unchecked", "min_runs", "budget_s", "world")
# Built-in suites, shipped as package data in trainperf/suites/NAME.yaml.
BUILTIN = (
    "quick",
    "short-test",
    "large-models",
    "high-throughput",
    "language-models",
    "batch-scaling",
    "scaling",
    "cpu-engines",
    "loader-workers",
    "frameworks",
    "llm",
)

# Bounds on what one suite file may ask of the loader (module docstring; README).
MAX_CASES = 10_000
MAX_CASES_ENV = "TRAINPERF_MAX_CASES"
MAX_ALIAS_NODES = 10_000
MAX_ALIAS_NODES_ENV = "TRAINPERF_MAX_ALIAS_NODES"

Path_ = tuple[str | int, ...]


class SuiteError(ValueError):
    """A suite that cannot be used; the message is one line: FILE:LINE: field: problem."""


@dataclass(frozen=True)
class PlannedCase:
    """One case of a suite before it runs. ``fields`` is a full case dump, except that
    ``batch_size`` may be ``"max"``."""

    fields: dict[str, Any]
    origin: str  # where the case came from: "cases[2]" or "matrix"
    line: int
    excluded_by: str | None = None

    @property
    def key(self) -> str:
        """Identity of the case for resuming: 16 hex of SHA-256 over its canonical JSON.

        Every field counts, ``runs`` included: results stored before cases had runs (one
        process each) have other keys, so a resumed suite measures them again in runs. A
        field added since (``framework``) counts only away from the value every case had
        before it, so the keys of the suites stored before it stay theirs."""
        added = ADDED_CASE_FIELDS.items()
        return _digest({k: v for k, v in self.fields.items() if (k, v) not in added}, 16)

    @property
    def wants_max_batch(self) -> bool:
        return self.fields["batch_size"] == MAX_BATCH

    @functools.cached_property
    def template(self) -> Case:
        """The case validated once: as asked, or at batch 1 for a ``max`` batch (the
        template of the largest-batch search)."""
        return self.case(1 if self.wants_max_batch else None)

    def case(self, batch_size: int | None = None) -> Case:
        """The runnable case; a ``max`` batch needs the ``batch_size`` found for it."""
        fields = dict(self.fields)
        if self.wants_max_batch:
            if batch_size is None:
                raise ValueError("batch_size 'max' must be resolved before the case runs")
            fields["batch_size"] = batch_size
        return Case.model_validate(fields)

    def label(self) -> str:
        return label_of(self.fields)


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    source: str  # the file it was read from
    version: str
    planned: tuple[PlannedCase, ...]
    claims: tuple[dict[str, Any], ...] = ()  # trainperf.case.claims
    _lines: dict[Path_, int] = field(default_factory=dict, repr=False, compare=False)

    def check(self, capabilities: dict[str, DeviceKind]) -> dict[str, str]:
        """Check every case against the zoo and this machine before anything runs.

        Returns the skip reason of each case that will not run (excluded, or needing
        hardware this machine lacks), by case key. Raises ``SuiteError`` for a case that
        can never run (unknown model, size out of range, ...).
        """
        skips: dict[str, str] = {}
        for planned in self.planned:
            try:
                check_case(planned.template, capabilities)
            except HardwareAbsent as exc:
                skips[planned.key] = str(exc)
            except CaseError as exc:
                raise SuiteError(f"{self.source}:{planned.line}: {planned.origin}: {exc}") from None
            if planned.excluded_by:
                skips[planned.key] = f"excluded by {planned.excluded_by}"
        return skips

    def with_overrides(self, assignments: list[str]) -> Suite:
        """The suite with case fields set in every case (``FIELD=VALUE``, value in YAML).

        The version stays the file's; the cases change, so their keys do too, and a
        resumed sweep matches only the cases run with the same overrides.
        """
        overrides: dict[str, Any] = {}
        for text in assignments:
            name, sep, value = text.partition("=")
            if not sep or name not in Case.model_fields:
                raise SuiteError(
                    f"--set {text}: give FIELD=VALUE with a case field: "
                    f"{', '.join(Case.model_fields)}"
                )
            try:  # the suite file's loader: its limits hold for a value given here too
                loader = _loader(value, f"--set {name}", MAX_ALIAS_NODES, lines=False)
                overrides[name] = loader.get_single_data()
            except YamlRefused as exc:
                raise SuiteError(str(exc)) from None
            except yaml.YAMLError:
                raise SuiteError(f"--set {text}: the value is not valid YAML") from None
        planned = []
        for p in self.planned:
            fields = p.fields | overrides
            check = fields | ({"batch_size": 1} if fields["batch_size"] == MAX_BATCH else {})
            try:
                Case.model_validate(check)
            except ValidationError as exc:
                raise SuiteError(f"--set: {describe_case_error(exc)}") from None
            planned.append(PlannedCase(fields, p.origin, p.line, p.excluded_by))
        keys = [p.key for p in planned]
        if len(set(keys)) != len(keys):
            raise SuiteError(f"--set {' '.join(assignments)} makes two cases of the suite equal")
        return replace(self, planned=tuple(planned))

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "version": self.version,
            "source": self.source,
            "cases": len(self.planned),
            "excluded": sum(1 for p in self.planned if p.excluded_by),
        }


def builtin_path(name: str) -> Path:
    return Path(str(resources.files("trainperf") / "suites" / f"{name}.yaml"))


def resolve(name_or_path: str) -> Suite:
    """A built-in suite by name, or a suite file by path."""
    if not name_or_path.strip():
        raise SuiteError(
            f"the suite name is empty: give a YAML file or one of {', '.join(BUILTIN)}"
        )
    path = Path(name_or_path)
    if name_or_path in BUILTIN and not path.exists():
        return load(builtin_path(name_or_path))
    if path.suffix in (".yaml", ".yml") or path.exists():
        return load(path)
    raise SuiteError(
        f"unknown suite '{name_or_path}': give a YAML file or one of {', '.join(BUILTIN)}"
    )


def load(path: Path) -> Suite:
    """Read and validate a suite file (a regular file: a FIFO would block the read)."""
    try:
        fileio.check_input(path, "suite file")
        text = path.read_text()
    except (FileNotFoundError, fileio.NoSuchFile):
        raise SuiteError(f"suite file {path} does not exist") from None
    except fileio.FileKindError as exc:
        raise SuiteError(str(exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SuiteError(f"cannot read suite file {path}: {exc}") from None
    return parse(text, str(path))


def parse(text: str, source: str = "<suite>") -> Suite:
    """Validate the YAML ``text`` of a suite; ``source`` names it in error messages."""
    document, lines = _load_yaml(text, source)
    return _Builder(document, lines, source).build()


def env_limit(variable: str, default: int) -> int:
    """A bound of the loader: the environment ``variable`` when set, else ``default``."""
    text = os.environ.get(variable, str(default)).strip()
    if not ascii_digits(text) or int(text) < 1:
        raise SuiteError(f"{variable}={text!r} is not valid: give a positive integer")
    return int(text)


def check_claims_shape(claims: Any) -> str | None:
    """What is wrong with the form of a suite's ``claims`` (the loader's check); None if
    nothing. Whether they hold is ``claim_problems``'s question."""
    allowed = (*Case.model_fields, *CLAIM_FIELDS)
    if not isinstance(claims, list):
        return "must be a list of mappings (field: values the cases take)"
    for index, claim in enumerate(claims):
        if not isinstance(claim, dict) or not claim:
            return f"[{index}] must be a non-empty mapping"
        for key in claim:
            if key not in allowed:
                return f"[{index}]: unknown claim field '{key}': allowed {', '.join(allowed)}"
        if not isinstance(claim.get("where", {}), dict):
            return f"[{index}].where must be a mapping of case fields"
        if not isinstance(claim.get("unchecked", []), list):
            return f"[{index}].unchecked must be a list of phrases"
    return None


def _loader(text: str, source: str, budget: int, lines: bool = True) -> StrictLoader:
    """The suite file's loader (``trainperf.core.strict_yaml``), its limits worded for a
    suite; a refusal is a ``YamlRefused``."""
    return StrictLoader(
        text,
        source,
        budget,
        lines=lines,
        budget_hint=f"the limit; {MAX_ALIAS_NODES_ENV} changes it",
        numbers="a suite's numbers",
        numbers_hint=f"counts are at most {MAX_COUNT:,}",
    )


def _load_yaml(text: str, source: str) -> tuple[Any, dict[Path_, int]]:
    """Safe-load ``text``, also returning the line (1-based) of every key and list item."""
    budget = env_limit(MAX_ALIAS_NODES_ENV, MAX_ALIAS_NODES)
    try:
        loader = _loader(text, source, budget)
    except yaml.reader.ReaderError as exc:  # the reader checks every character first
        line = text.count("\n", 0, exc.position) + 1
        raise SuiteError(
            f"{source}:{line}: character {exc.character:#06x} is not allowed in a suite file "
            "(YAML takes printable text: no NUL or other control character but tab and "
            "line breaks)"
        ) from None
    lines: dict[Path_, int] = {(): 1}
    try:
        node = loader.get_single_node()
        document = loader.construct_document(node) if node is not None else None
        if node is not None:
            _index_lines(node, (), lines)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SuiteError(f"{source}:{line}: malformed YAML: {problem}") from None
    except YamlRefused as exc:
        raise SuiteError(str(exc)) from None
    except RecursionError:
        line = loader.get_mark().line + 1
        raise SuiteError(f"{source}:{line}: YAML nested too deep to parse") from None
    finally:
        loader.dispose()
    return document, lines


def _index_lines(node: yaml.Node, path: Path_, lines: dict[Path_, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node)
            lines[path + (key,)] = key_node.start_mark.line + 1
            _index_lines(value_node, path + (key,), lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[path + (index,)] = item.start_mark.line + 1
            _index_lines(item, path + (index,), lines)


def _digest(document: Any, hex_digits: int) -> str:
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:hex_digits]


def _dotted(path: Path_) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


class _Builder:
    """Turns a parsed suite document into a ``Suite``, or the first problem into SuiteError."""

    def __init__(self, document: Any, lines: dict[Path_, int], source: str) -> None:
        self.document, self.lines, self.source = document, lines, source

    def fail(self, path: Path_, message: str) -> SuiteError:
        line = next(
            (self.lines[path[:n]] for n in range(len(path), -1, -1) if path[:n] in self.lines), 1
        )
        where = f"{_dotted(path)}: " if path else ""
        return SuiteError(f"{self.source}:{line}: {where}{message}")

    def build(self) -> Suite:
        doc = self.document
        if not isinstance(doc, dict):
            raise self.fail((), f"a suite is a mapping with the keys {', '.join(SUITE_FIELDS)}")
        for key in doc:
            if key not in SUITE_FIELDS:
                raise self.fail(
                    (str(key),), f"unknown suite field: allowed {', '.join(SUITE_FIELDS)}"
                )
        name = doc.get("name")
        if not isinstance(name, str) or not name.strip():
            raise self.fail(("name",) if "name" in doc else (), "name is required: a string")
        if problem := control_problem(name):  # stored with every result, exported as a Name
            raise self.fail(("name",), problem)
        description = doc.get("description", "")
        if not isinstance(description, str):
            raise self.fail(("description",), "must be a string")
        claims = doc.get("claims", [])
        if problem := check_claims_shape(claims):
            raise self.fail(("claims",), problem)
        if "cases" not in doc and "matrix" not in doc:
            raise self.fail((), "a suite needs 'cases', 'matrix' or both")

        defaults = self.partial_case(doc.get("defaults", {}), ("defaults",))
        planned = self.explicit_cases(doc.get("cases", []), defaults)
        if "matrix" in doc:
            planned += self.expand_matrix(doc["matrix"], defaults, len(planned))
        planned = self.apply_exclusions(doc.get("exclude", []), planned)
        first_of: dict[str, int] = {}
        for index, planned_case in enumerate(planned):
            if first_of.setdefault(planned_case.key, index) != index:
                raise SuiteError(
                    f"{self.source}:{planned_case.line}: {planned_case.origin}: the case "
                    f"{planned_case.label()} appears twice in the suite"
                )
        content = {k: doc.get(k) for k in SUITE_FIELDS if k not in PROSE_FIELDS}
        return Suite(
            name=name,
            description=description.strip(),
            source=self.source,
            version=_digest(content, 12),
            planned=tuple(planned),
            claims=tuple(claims),
            _lines=self.lines,
        )

    def partial_case(self, value: Any, path: Path_) -> dict[str, tuple[Any, Path_]]:
        """Check a mapping of case fields; return {field: (value, path of the value)}."""
        if not isinstance(value, dict):
            raise self.fail(path, "must be a mapping of case fields")
        for key in value:
            if key not in Case.model_fields:
                raise self.fail(
                    path + (str(key),),
                    f"unknown case field '{key}': allowed {', '.join(Case.model_fields)}",
                )
        return {key: (item, path + (key,)) for key, item in value.items()}

    def explicit_cases(self, value: Any, defaults: dict[str, Any]) -> list[PlannedCase]:
        if not isinstance(value, list):
            raise self.fail(("cases",), "must be a list of case mappings")
        if "cases" in self.document and not value and "matrix" not in self.document:
            raise self.fail(("cases",), "is empty: give at least one case")
        self.check_count(len(value), [])  # before the cases are validated one by one
        planned = []
        for index, entry in enumerate(value):
            path = ("cases", index)
            own = self.partial_case(entry, path)
            planned.append(self.make(defaults | own, _dotted(path), path))
        return planned

    def check_count(self, explicit: int, lengths: list[int]) -> None:
        """Refuse a suite of more than the case limit, counted before anything expands."""
        most = env_limit(MAX_CASES_ENV, MAX_CASES)
        total = explicit + (math.prod(lengths) if lengths else 0)
        if total <= most:
            return
        parts = [f"matrix {' x '.join(map(str, lengths))}"] if lengths else []
        parts += [f"{explicit} explicit"] if explicit else []
        raise self.fail(
            ("matrix",) if lengths else ("cases",),
            f"the suite has {total:,} cases ({' + '.join(parts)}), more than the limit of "
            f"{most:,}: narrow or split it, or raise the limit with {MAX_CASES_ENV}",
        )

    def expand_matrix(
        self, value: Any, defaults: dict[str, Any], explicit: int
    ) -> list[PlannedCase]:
        path: Path_ = ("matrix",)
        if not isinstance(value, dict) or not value:
            raise self.fail(path, "is empty: give a mapping from case field to a list of values")
        axes = []
        for key, values in value.items():
            if key not in Case.model_fields:
                raise self.fail(
                    path + (str(key),),
                    f"unknown case field '{key}': allowed {', '.join(Case.model_fields)}",
                )
            if not isinstance(values, list):
                raise self.fail(path + (key,), "must be a list of values")
            if not values:
                raise self.fail(path + (key,), "is empty: give at least one value")
            axes.append([(key, (v, path + (key, i))) for i, v in enumerate(values)])
        self.check_count(explicit, [len(axis) for axis in axes])
        return [
            self.make(defaults | dict(combination), "matrix", path)
            for combination in itertools.product(*axes)
        ]

    def make(self, fields: dict[str, tuple[Any, Path_]], origin: str, path: Path_) -> PlannedCase:
        """Validate merged fields as a Case; a problem points at the line of its value."""
        values = {name: value for name, (value, _) in fields.items()}
        where = {name: value_path for name, (_, value_path) in fields.items()}
        check = dict(values)
        if check.get("batch_size") == MAX_BATCH:
            check["batch_size"] = 1
        try:
            case = Case.model_validate(check)
        except ValidationError as exc:
            loc = exc.errors()[0]["loc"]
            problem = describe_case_error(exc)
            if loc and str(loc[0]) in where:
                raise self.fail(where[str(loc[0])], problem) from None
            raise self.fail(path, problem) from None
        dump = case.model_dump()
        dump["batch_size"] = values["batch_size"]
        return PlannedCase(dump, origin, self.lines.get(path, 1))

    def apply_exclusions(self, value: Any, planned: list[PlannedCase]) -> list[PlannedCase]:
        if not isinstance(value, list):
            raise self.fail(("exclude",), "must be a list of partial cases")
        for index, entry in enumerate(value):
            path = ("exclude", index)
            partial = {name: v for name, (v, _) in self.partial_case(entry, path).items()}
            if not partial:
                raise self.fail(path, "is empty: name the fields of the cases to exclude")
            label = f"{_dotted(path)} (line {self.lines.get(path, 1)})"
            hits = 0
            for i, p in enumerate(planned):
                if all(p.fields.get(k) == v for k, v in partial.items()):
                    hits += 1
                    if not p.excluded_by:
                        planned[i] = PlannedCase(p.fields, p.origin, p.line, label)
            if not hits:
                raise self.fail(path, "matches no case of the suite")
        return planned
