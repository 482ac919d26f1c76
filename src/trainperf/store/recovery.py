"""What a sweep measured and could not store: kept, then saved in a file to import later.

When the results database cannot be written (``Store`` raises ``StoreUnavailable`` after
waiting its bound: another process holds it locked, or the disk is full), the sweep goes
on writing into a ``Spool``: an in-memory store of the same schema, where the same
``Store`` methods make the same rows (uids, times, a result joined to its runs). It
finishes the bookkeeping of the run it had measured (its case's result, when that run
ended the case), then stops before the next run: a run measured now could not be stored
either, and the wait for each write would stretch the sweep by the whole bound. The
spool's rows are then saved in a recovery file of the export format (trainperf.store.exchange),
which ``trainperf import FILE --db DB`` adds later: rows the database has are left as they
are, and runs it stored before their result join it (``Store.import_documents``).

The spool starts with rows read from the database: the system, this sweep, and the runs of
the system that no result holds yet, so that a result written to the spool joins the runs
the database already has. Reading needs no write lock in WAL mode and writes nothing, so it
works while another process holds the lock and on a full disk; should it fail all the
same, the spool starts with the system alone, and the file names this sweep without
holding it (the database has it). The spool checks no foreign keys, for that case: the
import checks every reference (``exchange.resolve``).

The file holds what the database lacks: the spool's results, runs and largest-batch
searches (a run read from the database only when a result of the spool joined it), and
the systems and sweeps they name. It goes beside the database, named after it, the sweep
and the time (``trainperf.db.recovered-<sweep>-<UTC time>.json``), or, where that cannot
be written (the disk is full), in the temporary directory; an existing file is never
replaced.
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from trainperf.core import strict_json
from trainperf.core.fileio import write_atomic
from trainperf.store.access import StoreUnavailable, duration
from trainperf.store.database import Store
from trainperf.store.exchange import counts_text, export_document

# The tables of the export format that hold measurements (the rest name where they ran).
MEASURED = ("results", "runs", "max_batch")


@dataclass(frozen=True)
class NotStored:
    """What a sweep could not store: why (``cause``), how many rows of each measured
    table, and the recovery file holding them (None: there was nothing to save, or no
    place could hold it, then ``problems`` says why)."""

    cause: StoreUnavailable
    counts: dict[str, int]
    file: Path | None
    problems: list[str] = field(default_factory=list)

    def line(self, not_run: int = 0) -> str:
        """The one error line for people: what was not stored, where it is and how to
        import it."""
        db, cause = self.cause.path, self.cause
        why = f"the database {cause.reason}"
        why += f"; waited {duration(cause.waited_s)}" if cause.waited_s else ""
        left = f"; {not_run} case(s) not run" if not_run else ""
        if not any(self.counts.values()):
            return (
                f"could not write to {db} ({why}): the sweep stopped{left}; everything it "
                "measured is stored: run the same command again to resume"
            )
        what = counts_text(self.counts, always=())
        if self.file is None:
            return f"could not store {what} in {db} ({why}), nor save them: " + "; ".join(
                self.problems
            )
        return (
            f"could not store {what} in {db} ({why}): saved them to {self.file}{left}; "
            f"import them later with: trainperf import {self.file} --db {db}"
        )

    def as_dict(self, not_run: int = 0) -> dict[str, Any]:
        return {
            "message": self.line(not_run),
            "db": str(self.cause.path),
            "reason": self.cause.reason,
            "waited_s": self.cause.waited_s,
            "counts": self.counts,
            "file": None if self.file is None else str(self.file),
            "problems": self.problems,
        }


class Spool:
    """Where a sweep writes once its database cannot be written (see the module doc);
    closed, and empty, until then."""

    def __init__(self) -> None:
        self.store: Store | None = None
        self.cause: StoreUnavailable | None = None
        self._read: set[str] = set()  # uids of the runs read from the database

    def open(
        self, database: Store, cause: StoreUnavailable, system: dict[str, Any], sweep_id: str
    ) -> Store:
        """Start the spool with what it needs from ``database``; return it."""
        self.cause = cause
        self.store = Store.spool()
        rows: dict[str, list[dict[str, Any]]] = {"systems": [system]}
        try:
            rows["runs"] = database.loose_runs(system["fingerprint"])
            named = {sweep_id} | {run["sweep_id"] for run in rows["runs"]}
            rows["sweeps"] = [s for s in database.sweeps() if s["sweep_id"] in named]
        except sqlite3.Error:
            rows = {"systems": [system]}
        self.store.import_documents(rows)
        self._read = {run["uid"] for run in rows.get("runs", [])}
        return self.store

    def raise_if_open(self) -> None:
        """Raise the cause once the database could not be written: no run may start."""
        if self.cause is not None:
            raise self.cause

    def save(self, sweep_id: str) -> NotStored:
        """Write what the database lacks to a recovery file (see the module doc)."""
        assert self.store is not None and self.cause is not None
        document = export_document(self.store)
        document["runs"] = [
            run
            for run in document["runs"]
            if run["uid"] not in self._read or run["result_uid"] is not None
        ]
        named = {row["sweep_id"] for row in document["results"] + document["runs"]}
        document["sweeps"] = [s for s in document["sweeps"] if s["sweep_id"] in named]
        counts = {table: len(document[table]) for table in MEASURED}
        counts["runs"] -= sum(run["uid"] in self._read for run in document["runs"])
        if not any(counts.values()):
            return NotStored(self.cause, counts, None)
        file, problems = save_file(document, self.cause.path, sweep_id)
        return NotStored(self.cause, counts, file, problems)


def save_aside(
    cause: StoreUnavailable, write: Callable[[Store], Any], name: str
) -> tuple[Any, NotStored]:
    """What one command measured (a micro-benchmark, a profile, a largest-batch search,
    the end of a training run) that ``write`` could not add to the database ``cause``
    names: written by ``write`` into a spool instead (the same rows, the system with
    them), then saved in a recovery file named with ``name`` (``save_file``). Returns
    what ``write`` returned (an id in the spool, not in the database) and what was not
    stored."""
    with Store.spool() as spool:
        written = write(spool)
        document = export_document(spool)
    counts = {table: len(document[table]) for table in (*MEASURED, "micro", "train_runs")}
    file, problems = save_file(document, cause.path, name)
    return written, NotStored(cause, counts, file, problems)


def save_file(document: dict[str, Any], database: Path, what: str) -> tuple[Path | None, list[str]]:
    """Write ``document`` beside ``database``, else in the temporary directory, never over
    a file; return where (None when neither took it) and why each place failed. ``what``:
    the sweep id, or the command (``micro-gemm``)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    name = f"{database.name}.recovered-{what}-{stamp}"
    text = strict_json.dumps(document, indent=2) + "\n"
    problems = []
    for folder in (database.parent, Path(tempfile.gettempdir())):
        path = _unused(folder, name)
        try:
            write_atomic(path, text)
        except OSError as exc:
            problems.append(f"cannot write {path}: {exc.strerror or exc}")
            continue
        return path, problems
    return None, problems


def _unused(folder: Path, name: str) -> Path:
    """``folder/name.json``, or ``name-2.json``, ... : the first that does not exist."""
    path, number = folder / f"{name}.json", 1
    while path.exists():
        number += 1
        path = folder / f"{name}-{number}.json"
    return path
