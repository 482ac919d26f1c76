"""The hardware catalog read from its file: ``load_catalog`` (the shipped one, loaded once,
or another for tests), with every problem of a file in one line (``CatalogFileError``).
The file is read by the one strict YAML loader (``trainperf.core.strict_yaml``: no key
twice, bounded aliases and integers) and validated by the models of
``trainperf.predict.catalog``.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from trainperf.core.strict_yaml import StrictLoader, YamlRefused
from trainperf.predict.catalog import Catalog, DataParallel, Device, Link, System


class CatalogFileError(ValueError):
    """A catalog file that cannot be used; the message is one line naming every problem."""


def builtin_path() -> Path:
    """The catalog shipped with trainperf."""
    return Path(str(resources.files("trainperf") / "predict" / "catalog.yaml"))


def load_catalog(path: str | Path | None = None) -> Catalog:
    """Load and validate a catalog; ``None`` is the shipped one (loaded once, then cached).

    Raises CatalogFileError with one line naming every problem of the file."""
    if path is None:
        return _builtin()
    return _load(Path(path))


@functools.cache
def _builtin() -> Catalog:
    return _load(builtin_path())


# The shipped catalog uses no alias: a few are allowed, a file that repeats more is no catalog.
MAX_ALIAS_NODES = 1_000


def _load(path: Path) -> Catalog:
    try:
        loader = StrictLoader(
            path.read_text(encoding="utf-8"),
            str(path),
            MAX_ALIAS_NODES,
            budget_hint="the shipped catalog has none",
            numbers="a catalog's numbers",
        )
        try:
            document = loader.get_single_data()
        finally:
            loader.dispose()
    except YamlRefused as exc:
        raise CatalogFileError(str(exc)) from None
    except OSError as exc:
        raise CatalogFileError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except yaml.MarkedYAMLError as exc:
        line = f":{exc.problem_mark.line + 1}" if exc.problem_mark else ""
        raise CatalogFileError(f"{path}{line}: not valid YAML: {exc.problem}") from exc
    except yaml.YAMLError as exc:
        raise CatalogFileError(f"{path}: not valid YAML: {_one_line(str(exc))}") from exc
    if not isinstance(document, dict):
        raise CatalogFileError(f"{path}: expected a mapping with devices and links")
    try:
        return Catalog.model_validate(document)
    except ValidationError as exc:
        problems = [_describe(err) for err in exc.errors()]
        raise CatalogFileError(f"{path}: {'; '.join(problems)}") from None


def _describe(err: dict[str, Any]) -> str:
    """One pydantic problem as ``where: what``, naming the field and what is allowed."""
    loc = tuple(str(part) for part in err["loc"])
    where = ".".join(loc) or "catalog"
    kind = err["type"]
    if kind == "extra_forbidden":
        parent, field = ".".join(loc[:-1]) or "catalog", loc[-1]
        return f"{parent}: unknown field {field!r} (allowed: {', '.join(_allowed(loc))})"
    if kind == "missing":
        parent, field = ".".join(loc[:-1]) or "catalog", loc[-1]
        return f"{parent}: field {field!r} is required"
    message = err["msg"].removeprefix("Value error, ")
    if kind == "value_error":
        return f"{where}: {message}"
    return f"{where}: {message}, got {err.get('input')!r}"


def _allowed(loc: tuple[str, ...]) -> tuple[str, ...]:
    if len(loc) == 1:
        return tuple(Catalog.model_fields)
    model = {"devices": Device, "links": Link, "systems": System}.get(loc[0], DataParallel)
    return tuple(name for name in model.model_fields if name != "id")


def _one_line(text: str) -> str:
    return " ".join(text.split())
