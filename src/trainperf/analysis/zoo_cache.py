"""The zoo's analytics kept on disk, so ``trainperf models`` neither imports torch nor counts.

Counting the FLOPs of every model (trainperf.models.flops) takes about 20 CPU seconds
and importing torch 1.5 more; the rows depend only on the model definitions, the counter
and the versions. They are kept in the user's cache directory (``$TRAINPERF_CACHE`` or
``~/.cache/trainperf``, trainperf.datasets.cache_dir) as ``zoo-analytics/KEY.json``, where
KEY is a SHA-256 over what the rows depend on: torch's version (the FLOP counter), Python's
and trainperf's versions, and the bytes of every source file of the trainperf package (the
zoo, its names and natural sizes, and the counting code), so an edited model or an upgraded
torch is a new key and never reads an old file. A cache that cannot be read (missing,
corrupt, another key inside) or written (read-only, no home) means counting as before,
without an error; the file is written whole and renamed into place, so a reader never sees
half of it.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from trainperf.core import fileio

Rows = list[dict]

_FOLDER = "zoo-analytics"


def zoo_rows() -> Rows:
    """``analyse(spec).as_dict()`` of every model of the zoo at its natural size, in the
    registry's order: from the cache when its key matches, otherwise counted and kept."""
    return cached(_count_zoo)


def _count_zoo() -> Rows:
    from trainperf import models
    from trainperf.models.flops import analyse

    return [analyse(models.get(name)).as_dict() for name in models.names()]


def cached(compute: Callable[[], Rows]) -> Rows:
    """``compute()``'s rows, read from the cache file of the current key when there is a
    valid one, otherwise computed and written there (silently skipped when unwritable)."""
    key = cache_key()
    path = _path(key)
    if path is None:
        return compute()
    rows = _read(path, key)
    if rows is not None:
        return rows
    rows = compute()
    _write(path, key, rows)
    return rows


def cache_key() -> str | None:
    """The SHA-256 of what the zoo's rows depend on; None when torch's version is unknown
    (torch not installed as a distribution): then nothing is cached."""
    try:
        torch_version = version("torch")
    except PackageNotFoundError:
        return None
    from trainperf import __version__

    digest = hashlib.sha256()
    for part in (torch_version, __version__, sys.version):
        digest.update(part.encode() + b"\0")
    package = Path(__file__).resolve().parents[1]
    for source in sorted(package.rglob("*.py")):
        digest.update(source.relative_to(package).as_posix().encode() + b"\0")
        digest.update(source.read_bytes() + b"\0")
    return digest.hexdigest()


def _path(key: str | None) -> Path | None:
    if key is None:
        return None
    from trainperf.datasets.source import DataError, cache_dir

    try:
        return cache_dir() / _FOLDER / f"{key}.json"
    except DataError:  # TRAINPERF_CACHE or the home directory cannot be expanded
        return None


def _read(path: Path, key: str) -> Rows | None:
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(document, dict) or document.get("key") != key:
        return None
    rows = document.get("rows")
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        return None
    return rows


def _write(path: Path, key: str, rows: Rows) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fileio.write_atomic(path, json.dumps({"key": key, "rows": rows}))
    except OSError:  # fileio.FileKindError included: a cache path that is not a file
        pass  # a read-only or full cache: the rows were counted, just not kept
