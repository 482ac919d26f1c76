"""How the results store is reached: its errors, how long a write waits, the read-only URI.

``StoreError`` is a database path that cannot be used (one line for the user);
``StoreUnavailable`` a write that waited its bound (``STORE_WAIT_S``,
``wait_from_environment``) for a database locked by another process or a full disk
(``unavailable_reason`` tells those from other failures); ``read_only_uri`` reads a
database without writing anything beside it. The checks of a path are
``trainperf.store.checks``'s; the writes, with their retries, ``trainperf.store.database``'s.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

# How long a write waits in all, trying again, for a database that another process holds
# locked or on a full disk before it gives up (``StoreUnavailable``); the environment
# variable overrides it (seconds). Our own transactions take milliseconds: a lock held for
# minutes is another program's (a browser of the database, a stuck process).
STORE_WAIT_S = 600.0
WAIT_VARIABLE = "TRAINPERF_STORE_WAIT_S"
# SQLite's own wait for the write lock in one try (its busy timeout): at most this, and a
# tenth of the whole wait, so that a long wait is told as it goes.
BUSY_TIMEOUT_S = 60.0
# The first pause before trying again after a try that failed at once (a full disk, a lock
# SQLite does not wait for); it doubles up to the busy timeout (``Store._retrying``).
RETRY_PAUSE_S = 0.01
LOCKED = "is locked by another process"
FULL = "cannot grow: database or disk is full"


class StoreError(Exception):
    """A database path that cannot be used; the message is one line for the user."""


class StoreUnavailable(Exception):
    """The database could not be written for ``waited_s`` (the store's bound): another
    process held it locked, or the disk was full (``reason``: ``LOCKED`` or ``FULL``).
    Nothing of the write that failed is in the database."""

    def __init__(self, path: Path, reason: str, waited_s: float) -> None:
        self.path, self.reason, self.waited_s = path, reason, waited_s
        super().__init__(f"results database {path} {reason} (waited {duration(waited_s)})")


def duration(seconds: float) -> str:
    """'10 min', '1 min 5 s', '1.5 s': a wait for people."""
    if seconds < 9.95:  # what rounds to 10.0 reads as 10 s
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    if not minutes:
        return f"{rest} s"
    return f"{minutes} min" + (f" {rest} s" if rest else "")


def wait_from_environment() -> float:
    """``TRAINPERF_STORE_WAIT_S`` in seconds (``STORE_WAIT_S`` when unset); ``StoreError``
    unless it is a number >= 0."""
    text = os.environ.get(WAIT_VARIABLE)
    if text is None:
        return STORE_WAIT_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise StoreError(f"{WAIT_VARIABLE}={text!r} is not valid: give seconds, a number >= 0")
    return seconds


def unavailable_reason(exc: BaseException) -> str | None:
    """``LOCKED`` or ``FULL`` when ``exc`` says that the database is locked by another
    process or the disk is full: a write worth trying again later. None otherwise."""
    if isinstance(exc, sqlite3.OperationalError):
        code = (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF  # primary code
        return {sqlite3.SQLITE_BUSY: LOCKED, sqlite3.SQLITE_FULL: FULL}.get(code)
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return FULL
    return None


def read_only_uri(path: Path) -> str:
    """The SQLite URI that reads ``path`` without writing anything, there or beside it.

    ``mode=ro`` alone is not enough for a WAL database: it makes the ``-wal`` and ``-shm``
    files when they are absent, owned by the reader (the owner's next write then fails),
    and cannot open the database in a directory the reader cannot write. Without a
    ``-wal`` file no writer has the database open (the last one to close removes it), so
    it is read ``immutable``: no lock, no file made. With one, a writer may be at work, and
    ``mode=ro`` reads its committed transactions through the files that are there (beside
    the file a symlink points to: SQLite names them after it).
    """
    resolved = path.resolve()
    wal = resolved.with_name(resolved.name + "-wal")
    return f"{resolved.as_uri()}?mode=ro" if wal.exists() else f"{resolved.as_uri()}?immutable=1"
