"""Results read from the store: one typed filter, one SQL query, documents streamed.

Every reader of results (the verbs ``results``, ``compare``, ``scaling``, ``pareto``,
``report`` and ``export``; the notebook frames; ``predict --calibrate``) reads them here,
from the database opened in place without writing anything (``Store.read_only``): nothing
copies the store, and a lab's store (10,000 results of 100 systems) reads in bounded memory.

``ResultFilter`` is the one filter, checked when it is made (``FilterError``: one line,
naming the field as the flag of the same name). ``select`` turns it into one SQL statement
with parameters, never formatted values:

    system  HOST|FINGERPRINT  results.system IN (the fingerprints, hostnames resolved)
    model   M                 results.model IN (...)
    status  S                 results.status IN (...)
    since   DATE              julianday(results.created_at) >= julianday(DATE)
    suite   NAME              results.suite = NAME
    sort    KEY | -KEY        ORDER BY the key (then time, then id), -KEY the other way
    limit   N                 LIMIT N, after sorting

``system``, ``model`` and ``status`` take several values (either matches). The default
order is ``created_at``: oldest first, the order in which results accumulate; ``--sort
-created_at --limit 20`` gives the 20 newest. ``select`` runs the statement at once and
keeps the ids it gives, in order (an unknown system fails before anything is printed);
iterating the ``Selection`` then reads the documents ``CHUNK`` at a time (``id IN
(...)``), the runs of a chunk in one more query, and the system records are decoded once
and shared by every result of a system. The per-step lists of the runs (``STEP_LISTS``),
most of a run's bytes, are cut out in SQL (``json_remove``) unless asked for.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, get_args

from trainperf.case.outcome import Status
from trainperf.core.limits import MAX_COUNT, comma_items
from trainperf.store.rows import (
    decoded_columns,
    maybe_json,
    result_document,
    row_document,
    train_run_document,
)

STATUSES: tuple[str, ...] = get_args(Status)
# Per-step lists of a run's metrics (and of an old result's): step times, warm-up step
# times, each rank's step times, data waits, the steps without communication.
STEP_LISTS = (
    "step_s",
    "warmup_step_s",
    "rank_step_s",
    "data_wait_s",
    "compute_step_s",
    "gather_free_step_s",
)
# --sort KEY -> its SQL expression (results r JOIN systems s)
SORT_KEYS = {
    "created_at": "julianday(r.created_at)",
    "model": "r.model",
    "system": "s.hostname",
    "status": "r.status",
    "samples_per_s": "json_extract(r.metrics_json, '$.samples_per_s_median')",
}
DEFAULT_SORT = "created_at"
CHUNK = 500  # ids in one IN (...): SQLite takes 32766 parameters, older builds 999
_WITHOUT_STEPS = "json_remove({}, " + ", ".join(f"'$.{key}'" for key in STEP_LISTS) + ")"
_RESULT_COLUMNS = (
    "id, uid, sweep_id, system, created_at, status, result_schema, case_json, device_json,"
    " {metrics} AS metrics_json, error_json, suite, suite_version, case_key"
)
_RUN_COLUMNS = (
    "id, uid, sweep_id, system, created_at, result_uid, suite_version, case_key, run_number,"
    " status, result_schema, case_json, device_json, {metrics} AS metrics_json, error_json"
)
# The keys an import looks up (``present``): table -> its key column.
KEYS = {"systems": "fingerprint", "sweeps": "sweep_id", "results": "uid", "runs": "uid"}


class FilterError(ValueError):
    """A filter that cannot be applied: a bad value, or a system the store does not hold.
    The message is one line for the user."""


def _texts(values: str | Iterable[str] | None, flag: str) -> tuple[str, ...]:
    """Values given once or repeated, each possibly a comma list: 'a,b' 'c' -> (a, b, c);
    an empty item is a ``FilterError`` (``limits.comma_items``)."""
    if values is None:
        return ()
    try:
        return comma_items(values, flag)
    except ValueError as exc:
        raise FilterError(str(exc)) from None


def parse_since(text: str) -> datetime:
    """The moment ``text`` names: an ISO 8601 date (midnight) or time; without a UTC
    offset it is UTC, as the store's times are. ``FilterError`` for anything else."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise FilterError(
            f"--since {text!r} is not an ISO 8601 date or time: "
            "give e.g. 2026-11-21 or 2026-11-21T09:30 (UTC) or 2026-11-21T09:30+01:00"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00+01:00 is in year 0 in UTC
        raise FilterError(
            f"--since {text!r} is outside the years 1 to 9999 in UTC: give a time within them"
        ) from None


@dataclass(frozen=True)
class ResultFilter:
    """Which results to read, and in which order (module doc). Empty fields select all."""

    system: tuple[str, ...] = ()
    model: tuple[str, ...] = ()
    status: tuple[str, ...] = ()
    since: datetime | None = None
    suite: str | None = None
    limit: int | None = None
    sort: str = DEFAULT_SORT

    def __post_init__(self) -> None:
        for name in ("system", "model", "status"):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(v, str) and v for v in value):
                raise FilterError(f"--{name}: expected a tuple of names, got {value!r}")
            object.__setattr__(self, name, tuple(value))
        if unknown := [s for s in self.status if s not in STATUSES]:
            raise FilterError(
                f"--status {unknown[0]!r} is not a status of a result: allowed "
                + ", ".join(STATUSES)
            )
        if self.since is not None and (
            not isinstance(self.since, datetime) or self.since.tzinfo is None
        ):
            raise FilterError(f"--since: expected a time with its UTC offset, got {self.since!r}")
        if self.suite is not None and not (isinstance(self.suite, str) and self.suite):
            raise FilterError(f"--suite: expected a suite name, got {self.suite!r}")
        limit = self.limit
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_COUNT
        ):
            raise FilterError(
                f"--limit must be a positive integer up to {MAX_COUNT}, got {limit!r}"
            )
        if self.sort.removeprefix("-") not in SORT_KEYS:
            keys = ", ".join(SORT_KEYS)
            raise FilterError(
                f"--sort {self.sort!r} is not valid: allowed {keys}, each with - before it "
                "for the other way (-created_at: newest first)"
            )

    @classmethod
    def parse(
        cls,
        *,
        system: str | Iterable[str] | None = None,
        model: str | Iterable[str] | None = None,
        status: str | Iterable[str] | None = None,
        since: str | None = None,
        suite: str | None = None,
        limit: int | None = None,
        sort: str | None = None,
    ) -> ResultFilter:
        """The filter of the flags as typed (repeated or comma lists; ``since`` as text)."""
        if suite is not None and not suite.strip():
            raise FilterError("--suite is empty: give a suite name")
        return cls(
            system=_texts(system, "--system"),
            model=_texts(model, "--model"),
            status=tuple(s.lower() for s in _texts(status, "--status")),
            since=None if since is None else parse_since(since),
            suite=None if suite is None else suite.strip(),
            limit=limit,
            sort=DEFAULT_SORT if sort is None else sort.strip(),
        )

    @property
    def selects_results_only(self) -> bool:
        """Whether a field that only results have (model, status, suite, limit) is set:
        rows of other kinds (micro-benchmarks, ...) follow ``system`` and ``since`` only."""
        return bool(self.model or self.status or self.suite or self.limit)

    def ok_only(self) -> ResultFilter:
        """This filter for a reader of ok results only (``scaling``, ``pareto``): status
        ok, unless ``status`` leaves ok out (then it selects no ok result, as it should)."""
        return replace(self, status=("ok",)) if not self.status or "ok" in self.status else self

    def words(self) -> str:
        """The filter as the flags that make it, for messages: '--model resnet50 --status
        ok' ('' when it selects everything)."""
        given = [(name, ",".join(getattr(self, name))) for name in ("system", "model", "status")]
        if self.since is not None:
            given.append(("since", self.since.isoformat(timespec="seconds")))
        given += [("suite", self.suite), ("limit", self.limit)]
        return " ".join(f"--{name} {value}" for name, value in given if value)

    def matching(self) -> str:
        """' matching --model x' to follow "no results in DB" in a message, or ''."""
        words = self.words()
        return f" matching {words}" if words else ""


EVERYTHING = ResultFilter()


def system_records(db: sqlite3.Connection) -> dict[str, dict[str, Any]]:
    """Every stored system's record by fingerprint, decoded once, in the order first seen."""
    rows = db.execute("SELECT fingerprint, record FROM systems ORDER BY rowid")
    return {fingerprint: json.loads(record) for fingerprint, record in rows}


def doctor_verdicts(db: sqlite3.Connection, sweep_ids: Iterable[str]) -> dict[str, Any]:
    """The doctor's verdict stored with each of these sweeps (None for a sweep measured
    before trainperf examined machines, schema 9), by sweep id, each decoded once."""
    wanted = list(dict.fromkeys(sweep_ids))
    found: dict[str, Any] = {}
    for start in range(0, len(wanted), CHUNK):
        chunk = wanted[start : start + CHUNK]
        rows = db.execute(
            f"SELECT sweep_id, doctor_json FROM sweeps WHERE sweep_id IN ({_marks(len(chunk))})",
            chunk,
        )
        found |= {sweep_id: maybe_json(text) for sweep_id, text in rows}
    return {sweep_id: found.get(sweep_id) for sweep_id in wanted}


def chosen_systems(
    systems: dict[str, dict[str, Any]], names: Sequence[str], where: str = "the store"
) -> list[str]:
    """The fingerprints of the systems named by hostname or fingerprint (all when none is
    named), in the order of ``systems``; ``FilterError`` naming the known ones when a name
    matches none."""
    wanted = set(names)
    chosen = {f for f, r in systems.items() if wanted & {f, r.get("hostname")}}
    for name in names:
        if not any(name in (f, systems[f].get("hostname")) for f in chosen):
            raise FilterError(f"no system '{name}' in {where}: {_known(systems)}")
    return [fingerprint for fingerprint in systems if not names or fingerprint in chosen]


def _known(systems: dict[str, dict[str, Any]], shown: int = 20) -> str:
    if not systems:
        return "it holds none"
    known = ", ".join(f"{r.get('hostname')} ({f})" for f, r in list(systems.items())[:shown])
    more = f", ... ({len(systems)} in all)" if len(systems) > shown else ""
    return f"known systems (hostname (fingerprint)): {known}{more}"


def _marks(count: int) -> str:
    return ", ".join("?" * count)


def where_clause(
    result_filter: ResultFilter, fingerprints: Sequence[str] | None
) -> tuple[str, list[Any]]:
    """The WHERE clause (and its parameters) of ``result_filter`` over ``results r``;
    ``fingerprints``: the systems chosen (None: all)."""
    conditions, values = [], []
    if fingerprints is not None:
        conditions.append(f"r.system IN ({_marks(len(fingerprints))})")
        values += fingerprints
    for column, chosen in (("r.model", result_filter.model), ("r.status", result_filter.status)):
        if chosen:
            conditions.append(f"{column} IN ({_marks(len(chosen))})")
            values += chosen
    if result_filter.since is not None:
        conditions.append("julianday(r.created_at) >= julianday(?)")
        values.append(result_filter.since.isoformat())
    if result_filter.suite is not None:
        conditions.append("r.suite = ?")
        values.append(result_filter.suite)
    return (" WHERE " + " AND ".join(conditions) if conditions else ""), values


def order_clause(sort: str) -> str:
    """ORDER BY of ``--sort``: the key (absent values last), then time, then id."""
    key = sort.removeprefix("-")
    way = " DESC" if sort.startswith("-") else ""
    expression = SORT_KEYS[key]
    if key == "created_at":
        return f" ORDER BY {expression}{way}, r.id{way}"
    return f" ORDER BY {expression} IS NULL, {expression}{way}, julianday(r.created_at), r.id"


@dataclass
class Selection:
    """The results a filter selected: their ids in order, known at once, and their
    documents read as they are iterated (module doc). ``fingerprints``: the systems of
    the selected results, in the order first met."""

    connection: sqlite3.Connection
    systems: dict[str, dict[str, Any]]
    ids: list[int]
    fingerprints: list[str]
    runs: bool = False
    steps: bool = False

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for start in range(0, len(self.ids), CHUNK):
            chunk = self.ids[start : start + CHUNK]
            metrics = "metrics_json" if self.steps else _WITHOUT_STEPS.format("metrics_json")
            columns = _RESULT_COLUMNS.format(metrics=metrics)
            found = self.connection.execute(
                f"SELECT {columns} FROM results WHERE id IN ({_marks(len(chunk))})", chunk
            ).fetchall()
            rows = {row["id"]: row for row in found}
            ordered = [rows[i] for i in chunk if i in rows]
            yield from documents(
                self.connection, ordered, self.systems, runs=self.runs, steps=self.steps
            )

    def sweeps(self) -> list[tuple[str, str]]:
        """The distinct (system fingerprint, sweep id) of the selected results, read by
        id alone (no document decoded)."""
        found: dict[tuple[str, str], None] = {}
        for start in range(0, len(self.ids), CHUNK):
            chunk = self.ids[start : start + CHUNK]
            rows = self.connection.execute(
                f"SELECT DISTINCT system, sweep_id FROM results WHERE id IN ({_marks(len(chunk))})",
                chunk,
            )
            found |= dict.fromkeys((system, sweep) for system, sweep in rows)
        return list(found)


def _selecting(
    result_filter: ResultFilter,
    systems: dict[str, dict[str, Any]],
    columns: str,
    *,
    ordered: bool = True,
    where: str = "the store",
) -> tuple[str, list[Any]]:
    """The statement (and its parameters) selecting ``columns`` of the results that
    ``result_filter`` chooses; ``ordered``: with its ORDER BY even without a LIMIT."""
    named = chosen_systems(systems, result_filter.system, where) if result_filter.system else None
    clause, values = where_clause(result_filter, named)
    query = f"SELECT {columns} FROM results r JOIN systems s ON s.fingerprint = r.system{clause}"
    if ordered or result_filter.limit is not None:
        query += order_clause(result_filter.sort)
    if result_filter.limit is not None:
        query, values = query + " LIMIT ?", [*values, result_filter.limit]
    return query, values


def select(
    db: sqlite3.Connection,
    result_filter: ResultFilter = EVERYTHING,
    *,
    runs: bool = False,
    steps: bool = False,
    oldest_first: bool = False,
    systems: dict[str, dict[str, Any]] | None = None,
    where: str = "the store",
) -> Selection:
    """The results ``result_filter`` selects (module doc), with their runs when ``runs``
    and the runs' per-step lists when ``steps``. ``oldest_first``: iterate the selected
    results oldest first whatever ``--sort`` chose them (the newest result of a case is the
    one an analysis counts). ``FilterError`` when a system named is not in the store
    (``where``: the store's name in the message)."""
    systems = system_records(db) if systems is None else systems
    columns = "r.id, r.system, julianday(r.created_at)"
    query, values = _selecting(result_filter, systems, columns, where=where)
    rows = db.execute(query, values).fetchall()
    if oldest_first:
        rows.sort(key=lambda row: (row[2], row[0]))
    seen = list(dict.fromkeys(row[1] for row in rows))
    return Selection(db, systems, [row[0] for row in rows], seen, runs=runs, steps=steps)


def documents(
    db: sqlite3.Connection,
    rows: Sequence[sqlite3.Row],
    systems: dict[str, dict[str, Any]],
    *,
    runs: bool,
    steps: bool,
) -> list[dict[str, Any]]:
    """The documents of result rows (``trainperf.store.rows.result_document``), each with
    its system's record and, when ``runs``, its runs (``runs``: all in one query)."""
    by_result = runs_of(db, [row["uid"] for row in rows], steps=steps) if runs else {}
    found = []
    for row, decoded in zip(rows, decoded_columns(rows), strict=True):
        document = result_document(row, systems[row["system"]], decoded)
        if runs:
            document["runs"] = by_result.get(row["uid"], [])
        found.append(document)
    return found


def runs_of(
    db: sqlite3.Connection, uids: Sequence[str], *, steps: bool
) -> dict[str, list[dict[str, Any]]]:
    """The run documents of the results ``uids``, by result uid, in run order."""
    metrics = "metrics_json" if steps else _WITHOUT_STEPS.format("metrics_json")
    columns = _RUN_COLUMNS.format(metrics=metrics)
    found: dict[str, list[dict[str, Any]]] = {}
    for start in range(0, len(uids), CHUNK):
        chunk = list(uids[start : start + CHUNK])
        rows = db.execute(
            f"SELECT {columns} FROM runs WHERE result_uid IN ({_marks(len(chunk))})"
            " ORDER BY run_number, id",
            chunk,
        ).fetchall()
        for run, decoded in zip(rows, decoded_columns(rows), strict=True):
            found.setdefault(run["result_uid"], []).append(row_document(run, decoded))
    return found


def present(db: sqlite3.Connection, table: str, keys: Iterable[str]) -> set[str]:
    """Those of ``keys`` that rows of ``table`` hold (its key column, ``KEYS``): what an
    import looks up, a few hundred keys per query, without reading any row's document."""
    column = KEYS[table]  # a fixed name: nothing the user typed goes into the SQL
    wanted = list(dict.fromkeys(keys))
    held: set[str] = set()
    for start in range(0, len(wanted), CHUNK):
        chunk = wanted[start : start + CHUNK]
        rows = db.execute(
            f"SELECT {column} FROM {table} WHERE {column} IN ({_marks(len(chunk))})", chunk
        )
        held |= {row[0] for row in rows}
    return held


# The tables beside results, each with the time that ``since`` compares.
TIMES = {
    "sweeps": "started_at",
    "runs": "created_at",
    "micro": "created_at",
    "max_batch": "created_at",
    "train_runs": "created_at",
}


def _beside(
    table: str, result_filter: ResultFilter, systems: dict[str, dict[str, Any]], where: str
) -> tuple[str, list[Any]]:
    """The condition (never empty) and parameters choosing rows of ``table``, a table
    beside results: those of the systems and the time of ``result_filter``, the only
    fields such rows share with results."""
    conditions, values = ["1"], []
    if result_filter.system:
        named = chosen_systems(systems, result_filter.system, where)
        conditions.append(f"system IN ({_marks(len(named))})")
        values += named
    if result_filter.since is not None:
        conditions.append(f"julianday({TIMES[table]}) >= julianday(?)")
        values.append(result_filter.since.isoformat())
    return " AND ".join(conditions), values


def _document(table: str, row: sqlite3.Row, system: Any) -> dict[str, Any]:
    if table == "train_runs":
        return train_run_document(row, system)
    return row_document(row)


def rows_beside(
    db: sqlite3.Connection,
    table: str,
    result_filter: ResultFilter = EVERYTHING,
    *,
    systems: dict[str, dict[str, Any]] | None = None,
    where: str = "the store",
) -> Iterator[dict[str, Any]]:
    """The rows of ``table`` (sweeps, micro, max_batch or train_runs) of the systems and
    time of ``result_filter`` (its other fields are results' own), in the order stored,
    as documents; a training run's ``system`` is its system's record."""
    systems = system_records(db) if systems is None else systems
    condition, values = _beside(table, result_filter, systems, where)
    found = db.execute(f"SELECT * FROM {table} WHERE {condition} ORDER BY rowid", values)
    for row in found:
        yield _document(table, row, systems.get(row["system"]))


def export_tables(
    db: sqlite3.Connection,
    result_filter: ResultFilter = EVERYTHING,
    *,
    systems: dict[str, dict[str, Any]] | None = None,
    where: str = "the store",
) -> Iterator[tuple[str, Iterable[dict[str, Any]]]]:
    """The tables of an export (``trainperf.store.exchange``), in file order, each an iterable
    read as it is consumed. ``result_filter`` chooses the results, and their runs go with
    them; every other row (the runs of no result yet, micro-benchmarks, largest-batch
    searches, training runs, sweeps) goes by its system and time alone, and so does a
    sweep any row exported names, and the system of every sweep exported. Rows refer to
    their system by fingerprint; database ids stay home."""
    systems = system_records(db) if systems is None else systems
    chosen, chosen_values = _selecting(result_filter, systems, "r.uid", ordered=False, where=where)
    loose, loose_values = _beside("runs", result_filter, systems, where)
    runs_where = f"result_uid IN ({chosen}) OR (result_uid IS NULL AND {loose})"
    runs_values = [*chosen_values, *loose_values]
    swept, swept_values = _beside("sweeps", result_filter, systems, where)
    sweeps = db.execute(
        f"SELECT * FROM sweeps WHERE ({swept}) OR sweep_id IN (SELECT sweep_id FROM results"
        f" WHERE uid IN ({chosen}) UNION SELECT sweep_id FROM runs WHERE {runs_where})"
        " ORDER BY rowid",
        [*swept_values, *chosen_values, *runs_values],
    ).fetchall()
    named = chosen_systems(systems, result_filter.system, where)
    needed = set(named) | {row["system"] for row in sweeps}
    yield "systems", [record for fingerprint, record in systems.items() if fingerprint in needed]
    yield "sweeps", [row_document(row) for row in sweeps]
    results = select(db, result_filter, steps=True, systems=systems, where=where)
    yield (
        "results",
        (
            _without_id(document) | {"system": document["system"]["fingerprint"]}
            for document in results
        ),
    )
    found = db.execute(f"SELECT * FROM runs WHERE {runs_where} ORDER BY id", runs_values)
    yield "runs", _exported("runs", found)
    for table in ("micro", "max_batch", "train_runs"):
        condition, values = _beside(table, result_filter, systems, where)
        found = db.execute(f"SELECT * FROM {table} WHERE {condition} ORDER BY id", values)
        yield table, _exported(table, found)


def _exported(table: str, rows: Iterable[sqlite3.Row]) -> Iterator[dict[str, Any]]:
    """Rows of ``table`` as an export holds them: documents naming their system by
    fingerprint, without the database's id."""
    for row in rows:
        yield _without_id(_document(table, row, row["system"]))


def _without_id(document: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in document.items() if key != "id"}
