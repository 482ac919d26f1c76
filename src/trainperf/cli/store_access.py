"""How a verb opens the results database: checked first (``check_db_writable``,
``check_db_readable``: nothing written, one line of bad input), then opened to write
(``writing_store``) or to read in place (``reading_store``), the store's errors turned into
the verb's message in one place (``store_errors``). No verb opens a ``Store`` itself. A
command that measured one thing stores it with ``store_or_save_aside``: a database that
stays locked or full gets it in a recovery file instead.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainperf.cli.flag_types import BadInput

if TYPE_CHECKING:
    from trainperf.store.recovery import NotStored


def check_db_readable(db: Path, made_by: str = "run") -> None:
    """Bad input unless ``--db`` is a results database to read (``store.check_readable``):
    one line, and nothing opened but a regular file. ``made_by``: the verb that would have
    made it."""
    from trainperf.store.checks import check_readable

    if not db.exists() and not db.is_symlink():
        raise BadInput(f"no results database at {db}: run `trainperf {made_by}` first or give --db")
    with store_errors(f"cannot read --db {db}"):
        check_readable(db)


@contextlib.contextmanager
def store_errors(prefix: str | None = None) -> Iterator[None]:
    """What goes wrong with the store inside, as bad input of one line: a filter that names
    a system the store does not hold (its own message), a store that cannot be used or is
    damaged (``StoreError``, ``sqlite3.DatabaseError``: ``PREFIX: why``, or just why
    without a prefix). The one place a verb turns a store's error into its message; a
    store that stays locked or full (``StoreUnavailable``) passes on to ``main``."""
    from trainperf.store.access import StoreError
    from trainperf.store.query import FilterError

    try:
        yield
    except FilterError as exc:
        raise BadInput(str(exc)) from None
    except (StoreError, sqlite3.DatabaseError) as exc:
        raise BadInput(f"{prefix}: {exc}" if prefix else str(exc)) from None


def check_db_writable(db: Path) -> None:
    """Bad input unless ``--db`` can hold the results (``store.check_writable``, nothing
    written) and how long to wait for it (``TRAINPERF_STORE_WAIT_S``) is a number: what
    every verb that stores checks before anything runs."""
    from trainperf.store.access import wait_from_environment
    from trainperf.store.checks import check_writable

    with store_errors():
        check_writable(db)
        wait_from_environment()


@contextlib.contextmanager
def writing_store(db: Path, on_wait: Callable[[str], None] | None = None) -> Iterator[Any]:
    """The store at ``--db`` opened to write (made when absent): how every verb stores
    what it measured, once ``check_db_writable`` (or ``open_machine``) has checked the
    path. ``on_wait``: told while another process holds the database; one that stays
    locked or full raises ``StoreUnavailable``, which ``main`` makes exit code 1."""
    from trainperf.store.database import Store

    with Store(db, on_wait=on_wait) as store:
        yield store


def store_or_save_aside(
    db: Path, write: Callable[[Any], Any], what: str, into: Any = None
) -> tuple[Any, NotStored | None]:
    """What ``write`` returns after adding one command's measurement to the store at
    ``--db`` (``into``: that store, when the command holds it open already), and None; or,
    where the database stays locked or full, the measurement saved in a recovery file
    instead (``recovery.save_aside``, the file named with ``what``) and what says so:
    nothing measured is lost, as in a sweep. So too when the database turns out unusable
    only now (replaced, damaged or of a newer schema since ``check_db_writable`` passed:
    the measurement took minutes)."""
    from trainperf.store.access import StoreUnavailable
    from trainperf.store.recovery import save_aside

    try:
        if into is not None:
            return write(into), None
        with writing_store(db) as store:
            return write(store), None
    except StoreUnavailable as exc:
        return save_aside(exc, write, what)
    except store_write_errors() as exc:  # replaced or damaged since the check
        return save_aside(StoreUnavailable(db, f"cannot be written ({exc})", 0.0), write, what)


def store_write_errors() -> tuple[type[Exception], ...]:
    """The errors of a write to a database checked when the command started: locked or
    full for the store's whole wait (``StoreUnavailable``), or replaced or damaged since
    (``StoreError``, ``sqlite3.DatabaseError``)."""
    from trainperf.store.access import StoreError, StoreUnavailable

    return (StoreUnavailable, StoreError, sqlite3.DatabaseError)


def stored_micro(
    db: Path, record: dict, document: dict[str, Any], result: dict[str, Any]
) -> dict[str, Any]:
    """A micro-benchmark's (or a profile's) ``result`` stored, its ``id`` set; or, where
    the database stays locked or full, saved in a recovery file, ``not_stored`` set and
    ``id`` null (``exit_if_not_stored`` ends the command once it is shown)."""
    from trainperf.cli.common import stderr

    stored_id, not_stored = store_or_save_aside(
        db, lambda store: store.add_micro(record, document, result), f"micro-{document['kind']}"
    )
    if not_stored is None:
        stderr.print(f"stored in {db}", markup=False)
        return result | {"id": stored_id}
    return result | {"id": None, "not_stored": not_stored.as_dict()}


def exit_if_not_stored(document: dict[str, Any]) -> None:
    """Exit 1 with the recovery file's line when ``document`` says it was not stored."""
    from trainperf.cli.common import fail
    from trainperf.cli.flag_types import EXIT_FAILED_CASES

    if document.get("not_stored"):
        fail(document["not_stored"]["message"], EXIT_FAILED_CASES)


def open_machine(db: Path) -> tuple[dict, dict]:
    """Check the database path and how long to wait for it first (nothing written), then
    read this machine."""
    from trainperf.system import inventory as system

    check_db_writable(db)
    record = system.collect()
    return record, system.device_capabilities(record)


@contextlib.contextmanager
def reading_store(db: Path, made_by: str = "run") -> Iterator[Any]:
    """The store at ``--db`` opened to read in place, writing nothing (``Store.read_only``),
    or bad input when it is missing or unreadable (``check_db_readable``), when a filter
    names a system it does not hold, or when it turns out damaged while it is read."""
    from trainperf.store.database import Store

    check_db_readable(db, made_by)
    with store_errors(f"cannot read {db}"), Store.read_only(db) as store:
        yield store
