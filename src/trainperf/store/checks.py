"""Is this path a trainperf store? Said in one line before anything opens it.

``check_writable`` (a path a writer may use: absent in a writable directory, empty, or a
store) and ``check_readable`` (a store to read) are what every verb checks first, through
``trainperf.cli.store_access``; ``check_store`` is their common part, which ``Store`` also
runs before it writes to a file it did not make. Special files are refused by ``stat``
before anything opens them, and a database is read without writing anything beside it
(``access.read_only_uri``).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from trainperf.core import fileio
from trainperf.store.access import BUSY_TIMEOUT_S, StoreError, read_only_uri
from trainperf.store.schema import SCHEMA_VERSION

SQLITE_HEADER = b"SQLite format 3\x00"
# The tables every trainperf store has had since schema version 1.
STORE_TABLES = ("systems", "results")


def check_writable(path: Path) -> None:
    """Raise ``StoreError`` unless ``path`` can hold the database: absent (in a directory
    this user may write: it is created), an empty file, or one that ``check_store``
    accepts. Writes nothing."""
    if not path.exists() and not path.is_symlink():
        parent = path.parent if str(path.parent) else Path(".")
        if not parent.is_dir():
            raise StoreError(f"--db {path}: directory {parent} does not exist")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise StoreError(f"--db {path}: directory {parent} is not writable by this user")
        return
    if path.is_dir():
        raise StoreError(f"--db {path} is a directory: give a file path, e.g. {path}/trainperf.db")
    try:
        check_store(path, empty_ok=True)
    except StoreError as exc:
        raise StoreError(f"--db {path}: {exc}") from None
    if not os.access(path, os.W_OK):
        raise StoreError(f"--db {path} is not writable by this user")


def check_readable(path: Path) -> None:
    """Raise ``StoreError`` unless ``path`` is a database this user can read
    (``check_store``, and not empty). Callers name the path: the message says what is wrong
    with it, except when nothing is there."""
    if not path.exists() and not path.is_symlink():
        raise StoreError(f"no results database at {path}: run `trainperf run` first or give --db")
    check_store(path, empty_ok=False)


def check_store(path: Path, *, empty_ok: bool) -> None:
    """Raise ``StoreError`` (the reason, without the path) unless the file at ``path`` is a
    trainperf store or an empty SQLite database (or, with ``empty_ok``, an empty file, which
    a writer makes a store). Special files are refused by ``stat`` before anything opens
    them, and the database is read without writing anything (``read_only_uri``)."""
    try:
        fileio.check_input(path)
    except fileio.FileKindError as exc:
        raise StoreError(exc.reason) from None
    if not os.access(path, os.R_OK):
        raise StoreError("not readable by this user")
    with path.open("rb") as f:
        head = f.read(16)
    if not head:
        if empty_ok:
            return
        raise StoreError("the file is empty: not a trainperf database")
    if head != SQLITE_HEADER:
        raise StoreError("not a trainperf database (not SQLite)")
    try:
        db = sqlite3.connect(read_only_uri(path), uri=True, timeout=BUSY_TIMEOUT_S)
        try:
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            tables = [
                row[0]
                for row in db.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'"
                    " AND name NOT LIKE 'sqlite!_%' ESCAPE '!' ORDER BY name"
                )
            ]
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"not a readable SQLite database ({exc})") from None
    reason = _not_a_store(version, tables)
    if reason:
        raise StoreError(reason)


def _not_a_store(version: int, tables: list[str]) -> str | None:
    """Why an SQLite database of this ``user_version`` and these tables is not one that
    trainperf may open, or None. Version 0 without tables is an empty database (a store
    yet to be made); trainperf sets a version from 1 with its first tables."""
    if version > SCHEMA_VERSION:
        return (
            f"schema version {version}, newer than this trainperf ({SCHEMA_VERSION}): "
            "upgrade trainperf to read it"
        )
    if version < 0 or (version == 0 and tables):
        shown = ", ".join(tables[:8]) + (f", ... ({len(tables)} in all)" if len(tables) > 8 else "")
        details = [f"it has tables: {shown}" if tables else "it has no tables"]
        details += [f"user_version {version}"] if version else []
        return f"an SQLite database but not a trainperf store ({'; '.join(details)})"
    missing = [name for name in STORE_TABLES if name not in tables]
    if version > 0 and missing:
        return (
            f"damaged or not a trainperf store: schema version {version} "
            f"but no {' or '.join(missing)} table"
        )
    return None
