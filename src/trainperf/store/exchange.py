"""Results that travel: a versioned JSON file of systems, sweeps, results and their runs,
micro-benchmark runs, largest-batch searches and training runs, exported from one database
and imported into another (or read in place: ``read_results``).

The file (``FORMAT``, ``FORMAT_VERSION``)::

    {"format": "trainperf-results", "format_version": 3,
     "exported_at": "2026-11-21T06:41:21+00:00", "trainperf_version": "0.1.0",
     "systems":   [system record (``trainperf system --json``), ...],
     "sweeps":    [{sweep_id, started_at, system, label, order_seed, doctor}, ...],
     "results":   [{uid, sweep_id, system, created_at, status, result_schema, case, device,
                    metrics, error, suite, suite_version, case_key}, ...],
     "runs":      [{uid, sweep_id, system, created_at, result_uid, suite_version, case_key,
                    run_number, status, result_schema, case, device, metrics, error}, ...],
     "micro":     [{uid, system, created_at, kind, status, params, device, metrics,
                    error}, ...],
     "max_batch": [{uid, system, created_at, memory_key, case, batch_size, probes,
                    note}, ...],
     "train_runs": [{uid, system, created_at, updated_at, status, config, config_key,
                    reached, time_to_target_s, evaluations, metrics, error}, ...]}

``system`` fields hold a system's fingerprint; every field is present (null where empty).
The database's integer ids stay home: rows travel with their ``uid`` (store schema 4), so
an import adds only the rows the database lacks and importing a file twice adds nothing.
An export is written as the database is read, a row at a time (``write_export``), so a
store of any size exports in bounded memory; ``export_document`` holds the same document
whole. An import reads the whole file and checks it (``validate``) before it writes
anything, then writes it in one transaction; the rows it refers to and does not hold are
looked up by key alone (``resolve``).

Format history (bump ``FORMAT_VERSION`` for every change and keep reading the old ones):
  1: the first format.
  2: ``train_runs``: time-to-accuracy runs (``trainperf train``, store schema 5); a file of
     version 1 reads as one without training runs.
  3: a case is measured in several runs (store schema 6): ``runs`` (one execution of a
     suite) is renamed ``sweeps`` (``run_id`` -> ``sweep_id``, plus ``order_seed``), and
     ``runs`` holds the runs of the results (``result_uid``). In a file of version 1 or 2
     each result is one run: it reads as a 1-run result beside its run, made as the
     store's migration makes them (``case_result.from_legacy``), so that importing an old
     file and a new export of the same database adds nothing twice.
  4: strict JSON (RFC 8259): every number is finite, a value that could not be computed
     is null with ``<key>_absent_reason`` beside it, and a file holding NaN or Infinity
     is refused. Files of versions 1 to 3 could hold them (the intervals of runs of 1 to
     3 steps, Fieller's unbounded ratios, a diverged loss): they read with each such
     number as null and its reason (``strict_json.finite``), as store schema 8 converts a
     database. The status ``diverged`` (a non-finite loss) appears from this version on.
     Every imported case is checked as a case of a suite is (``trainperf.case.spec.Case``).
  5: each sweep carries ``doctor``: the verdict of ``trainperf doctor``'s checks on the
     machine as the sweep started (trainperf.doctor; store schema 9), null where the
     machine was not examined. In older files every sweep reads with ``doctor`` null.
"""

from __future__ import annotations

import json
import re
import sqlite3
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, NamedTuple, TextIO

from pydantic import ValidationError

from trainperf.core import fileio, strict_json
from trainperf.core.limits import count_problem, first_bad_number
from trainperf.core.strict_json import finite
from trainperf.store.access import StoreError
from trainperf.store.database import Store
from trainperf.store.exchange_format import (
    FINITE_SINCE,
    FORMAT,
    FORMAT_VERSION,
    READABLE_VERSIONS,
    ROW_TABLES,
    RUNS_SINCE,
    TABLES,
    ExchangeError,
    ExportFile,
    Json,
    short_value,
    system_problem,
)
from trainperf.store.exchange_metrics import (
    check_throughput,
    measured_problem,
    metric_type_problem,
)
from trainperf.store.query import EVERYTHING, FilterError, ResultFilter


class Reference(NamedTuple):
    """A system, sweep or result that a row refers to and the file does not hold."""

    where: str  # e.g. results[3].system
    kind: Literal["system", "sweep", "result"]
    key: str


@dataclass(frozen=True)
class ValidatedExport:
    """A checked export: its tables as in the file, and what they refer to outside it."""

    format_version: int
    exported_at: str
    trainperf_version: str
    tables: dict[str, list[Json]]
    unresolved: list[Reference]


@dataclass(frozen=True)
class ImportSummary:
    """Rows added, rows already in the database, and rows the database held unfinished
    that took the file's later state (training runs stored as running, then saved aside
    when they ended: ``Store.import_documents``), per table."""

    added: dict[str, int]
    already_present: dict[str, int]
    updated: dict[str, int]

    def as_dict(self) -> dict[str, Any]:
        return {
            "added": self.added,
            "already_present": self.already_present,
            "updated": self.updated,
        }

    def line(self, source: str) -> str:
        """One line for people: what came in from ``source`` and what was there before."""
        notes = []
        if any(self.updated.values()):
            notes.append(f"{counts_text(self.updated, always=())} finished")
        if any(self.already_present.values()):
            notes.append(f"{counts_text(self.already_present, always=())} already present")
        tail = f" ({'; '.join(notes)})" if notes else ""
        return f"imported {counts_text(self.added)} from {source}{tail}"


# table -> (singular, plural), in the order a summary line names them
_NAMES = {
    "results": ("result", "results"),
    "micro": ("micro run", "micro runs"),
    "max_batch": ("max-batch search", "max-batch searches"),
    "runs": ("run", "runs"),
    "train_runs": ("training run", "training runs"),
    "systems": ("system", "systems"),
    "sweeps": ("sweep", "sweeps"),
}


def counts_text(counts: dict[str, int], always: tuple[str, ...] = ("results",)) -> str:
    """Row counts per table for people, e.g. '12 results, 3 micro runs, 2 systems': the
    tables with rows, and those in ``always``."""
    return ", ".join(
        f"{counts.get(table, 0)} {names[counts.get(table, 0) != 1]}"
        for table, names in _NAMES.items()
        if counts.get(table) or table in always
    )


# --- export -----------------------------------------------------------------------------


def _head() -> list[tuple[str, Any]]:
    from trainperf import __version__

    return [
        ("format", FORMAT),
        ("format_version", FORMAT_VERSION),
        ("exported_at", datetime.now(UTC).isoformat(timespec="seconds")),
        ("trainperf_version", __version__),
    ]


def export_document(store: Store, result_filter: ResultFilter | None = None) -> Json:
    """Everything stored, or what ``result_filter`` chooses (``Store.export_tables``: the
    results it selects with their runs, the other rows of its systems and time), as a
    document of the current format, held whole in memory (``write_export`` streams it)."""
    chosen = result_filter or EVERYTHING
    tables = {table: list(rows) for table, rows in store.export_tables(chosen)}
    return dict(_head()) | tables


def write_export(
    store: Store, out: TextIO, result_filter: ResultFilter = EVERYTHING
) -> dict[str, int]:
    """Write the document of ``export_document`` to ``out`` as it is read, one row at a
    time (bounded memory, whatever the store holds); return the rows written per table."""
    tables = ((table, iter(rows)) for table, rows in store.export_tables(result_filter))
    return strict_json.write_object(out, [*_head(), *tables])


# --- import -----------------------------------------------------------------------------


def read_file(path: Path) -> Any:
    """The JSON value in ``path``; ``ExchangeError`` when it is missing, not a regular file
    (never opened: ``fileio.check_input``) or not JSON."""
    _check_file(path)
    try:
        text = path.read_text(encoding="utf-8")
        document = json.loads(text, object_pairs_hook=_without_duplicate_keys)
        if _SURROGATE_ESCAPE.search(text) and (where := _lone_surrogate(document)):
            raise ExchangeError(
                f"{path}: {where}: a lone UTF-16 surrogate (\\ud800 to \\udfff without its "
                "pair) is not text: strings must be Unicode"
            )
        return document
    except _DuplicateKey as exc:
        raise ExchangeError(
            f"{path}: the key {exc.key!r} appears twice in {exc.where}: JSON readers keep "
            "either value; give each key once"
        ) from None
    except UnicodeDecodeError:
        raise ExchangeError(f"{path} is not UTF-8 text: not a trainperf export") from None
    except json.JSONDecodeError as exc:
        if not text.strip():
            raise ExchangeError(f"{path} is empty: not a trainperf export") from None
        # An export is one object: begun and not ended, the copy was likely cut short.
        begun, ended = text.lstrip().startswith("{"), text.rstrip().endswith("}")
        cut = "; the file ends early: truncated?" if begun and not ended else ""
        raise ExchangeError(
            f"{path} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno}){cut}"
        ) from None
    except ValueError:  # an integer of more digits than Python converts
        limit = sys.get_int_max_str_digits()
        raise ExchangeError(f"{path}: an integer of more than {limit} digits") from None
    except RecursionError:
        raise ExchangeError(f"{path}: JSON nested too deeply") from None


# The keys that tell a row of an export apart, to name the object a duplicate key is in.
_ROW_KEYS = ("uid", "fingerprint", "sweep_id", "run_id", "model", "name")


class _DuplicateKey(Exception):  # not a ValueError: read_file reads those as long integers
    def __init__(self, key: str, pairs: list[tuple[str, Any]]) -> None:
        self.key = key
        # the object named by a key that tells rows apart, where it has one
        named = [f"{k} {v!r}" for k, v in pairs if k in _ROW_KEYS and isinstance(v, str)]
        self.where = f"the object of {named[0]}" if named else "one object"


def _without_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object of the file as a dict, refusing a key given twice (RFC 8259 leaves the
    meaning open; Python keeps the last silently, another reader the first)."""
    document = dict(pairs)
    if len(document) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key, pairs)
            seen.add(key)
    return document


# JSON may spell a character outside the BMP as a pair of \\uXXXX escapes; one half alone
# decodes to a code point that no UTF-8 writer (the store, a terminal) accepts.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _lone_surrogate(document: Any) -> str | None:
    """Where in ``document`` a key or string holds a lone surrogate (``results[0].case``),
    None when none does."""
    stack: list[tuple[str, Any]] = [("", document)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                where = f"{path}.{key}" if path else key
                if not _is_unicode(key):
                    return ascii(where)[1:-1]
                stack.append((where, item))
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", item) for i, item in enumerate(value))
        elif isinstance(value, str) and not _is_unicode(value):
            return ascii(path)[1:-1]
    return None


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class SourceResults(NamedTuple):
    """What ``read_results`` gives: the results, and the doctor's verdict of each sweep
    they name, by sweep id (None where none was stored)."""

    results: list[Json]
    doctor_verdicts: dict[str, Any]


def read_results(path: Path, result_filter: ResultFilter = EVERYTHING) -> SourceResults:
    """The results that ``result_filter`` selects (without their runs, each with its
    system's record) of a database or an exported file, read in place: nothing is
    written anywhere, with the doctor's verdicts of their sweeps. Raise ``ExchangeError``
    when ``path`` is neither, or is damaged, or holds no system the filter names."""
    _check_file(path)
    with path.open("rb") as f:
        head = f.read(16)
    if head == b"SQLite format 3\x00":
        try:
            with Store.read_only(path) as store:
                return _selected(store, result_filter)
        except (StoreError, sqlite3.DatabaseError, FilterError) as exc:
            raise ExchangeError(f"cannot read {path}: {exc}") from None
    if not head.lstrip().startswith((b"{", b"[")) and head.strip():
        raise ExchangeError(
            f"{path} is neither a trainperf database (SQLite) nor an exported file (JSON)"
        )
    document = read_file(path)  # its errors name the file
    try:
        validated = validate(document)
    except ExchangeError as exc:  # its errors name the field: the file goes before it
        raise ExchangeError(f"{path}: {exc}") from None
    with Store(":memory:") as store:
        import_document(store, validated)
        try:
            return _selected(store, result_filter)
        except FilterError as exc:
            raise ExchangeError(f"cannot read {path}: {exc}") from None


def _selected(store: Store, result_filter: ResultFilter) -> SourceResults:
    results = list(store.select(result_filter, oldest_first=True))
    return SourceResults(results, store.doctor_verdicts(r["sweep_id"] for r in results))


def _check_file(path: Path) -> None:
    try:
        fileio.check_input(path)
    except fileio.FileKindError as exc:
        raise ExchangeError(str(exc)) from None


def validate(document: Any) -> ValidatedExport:
    """Check a document fully: its format and version, every field's presence and type,
    that every number is finite and every integer fits in 64 bits (a case's counts in
    ``limits.MAX_COUNT``), the throughput of every ok result, and that no row names a
    system, sweep or result twice or that the file does not hold (such references are
    returned in ``unresolved``: the target database may hold them). A file of an older
    format comes back in the current one. Raise ``ExchangeError`` saying which field of
    which row is wrong."""
    if not isinstance(document, dict):
        raise ExchangeError(f"expected a JSON object ({FORMAT}), got {_kind(document)}")
    _check_format(document)
    if document["format_version"] < FINITE_SINCE:
        document = finite(document)  # older trainperf wrote NaN and Infinity
    if bad := first_bad_number(document):
        raise ExchangeError(f"{bad[0]}: {bad[1]}: numbers must be finite, integers 64-bit")
    from trainperf.store.exchange_legacy import LegacyExportFile, upgrade

    shape = ExportFile if document["format_version"] >= RUNS_SINCE else LegacyExportFile
    try:
        shape.model_validate(document)
    except ValidationError as exc:
        raise ExchangeError(_describe(exc)) from None
    if shape is LegacyExportFile:
        _check_unique(document["runs"], "runs", "run_id")
        _check_unique(document["results"], "results", "uid")
        document = upgrade(document)
    tables = {table: document.get(table, []) for table in TABLES}
    for sweep in tables["sweeps"]:
        sweep.setdefault("doctor", None)  # files before DOCTOR_SINCE
    for table, key in (("systems", "fingerprint"), ("sweeps", "sweep_id")) + tuple(
        (table, "uid") for table in ROW_TABLES
    ):
        _check_unique(tables[table], table, key)
    for index, system in enumerate(tables["systems"]):
        if problem := system_problem(system, f"systems[{index}]"):
            raise ExchangeError(problem)
    _check_contents(tables)
    return ValidatedExport(
        document["format_version"],
        document["exported_at"],
        document["trainperf_version"],
        tables,
        _references(tables),
    )


def _check_contents(tables: dict[str, list[Json]]) -> None:
    """What the rows hold, checked as the door checks it: every case as a case of a suite
    (``case.stored_case_problem``: types, ranges, a known model or a ``module:function``,
    printable names; a failed largest-batch request may say ``batch_size: max``), every
    training configuration as ``trainperf train`` checks its own, and the measured times
    and rates of every ok result and run positive (``measured_problem``)."""
    from trainperf.case.spec import stored_case_problem
    from trainperf.case.training import stored_config_problem

    for table in ("results", "runs", "max_batch"):
        for index, row in enumerate(tables[table]):
            where = f"{table}[{index}]"
            if bad := count_problem(row["case"]):  # named by its field, before the model
                raise ExchangeError(f"{where}.case.{bad[0]}: {bad[1]}")
            ok = row.get("status", "ok") == "ok" and table != "max_batch"
            if table != "max_batch" and (bad := metric_type_problem(row["metrics"])):
                raise ExchangeError(f"{where}.metrics.{bad[0]}: {bad[1]}")
            if problem := stored_case_problem(row["case"], max_batch=not ok):
                raise ExchangeError(f"{where}.case: {problem}")
            if ok and table == "results":
                check_throughput(row["metrics"], f"{where}.metrics")
            elif ok and (bad := measured_problem(row["metrics"])):
                raise ExchangeError(f"{where}.metrics.{bad[0]}: {bad[1]}")
    for index, row in enumerate(tables["train_runs"]):
        where = f"train_runs[{index}]"
        if bad := count_problem(row["config"]):
            raise ExchangeError(f"{where}.config.{bad[0]}: {bad[1]}")
        if problem := stored_config_problem(row["config"]):
            raise ExchangeError(f"{where}.config: {problem}")
        times = {"time_to_target_s": row["time_to_target_s"]}
        times |= {
            f"evaluations[{i}].time_s": e.get("time_s") for i, e in enumerate(row["evaluations"])
        }
        for field, value in times.items():
            if value is not None and not (isinstance(value, int | float) and value > 0):
                raise ExchangeError(
                    f"{where}.{field}: a measured time must be positive, got {value!r}"
                )


def _references(tables: dict[str, list[Json]]) -> list[Reference]:
    """The systems, sweeps and results that rows name and the file does not hold."""
    held = {
        "system": {s["fingerprint"] for s in tables["systems"]},
        "sweep": {r["sweep_id"] for r in tables["sweeps"]},
        "result": {r["uid"] for r in tables["results"]},
    }
    unresolved = []
    for table in ("sweeps", *ROW_TABLES):
        for index, row in enumerate(tables[table]):
            named = [("system", "system", row["system"])]
            if table in ("results", "runs"):
                named.append(("sweep_id", "sweep", row["sweep_id"]))
            if table == "runs" and row["result_uid"] is not None:
                named.append(("result_uid", "result", row["result_uid"]))
            for field, kind, key in named:
                if key not in held[kind]:
                    unresolved.append(Reference(f"{table}[{index}].{field}", kind, key))
    return unresolved


def resolve(validated: ValidatedExport, store: Store) -> None:
    """Raise ``ExchangeError`` unless ``store`` holds every system, sweep and result the
    file names but does not hold: looked up by key (``Store.present``), so an import into
    a store of any size reads none of its rows."""
    tables = {"system": "systems", "sweep": "sweeps", "result": "results"}
    held = {
        kind: store.present(table, [key for _, named, key in validated.unresolved if named == kind])
        for kind, table in tables.items()
    }
    for where, kind, key in validated.unresolved:
        if key not in held[kind]:
            raise ExchangeError(
                f"{where}: {kind} '{key}' is neither in the file's {tables[kind]} "
                f"nor in {store.path}"
            )


def import_document(store: Store, document: Any) -> ImportSummary:
    """Check ``document`` (a loaded file, or a ``ValidatedExport``) fully, then add its rows
    that ``store`` lacks in one transaction. Raise ``ExchangeError`` before writing
    anything when the document is not a readable export."""
    validated = document if isinstance(document, ValidatedExport) else validate(document)
    resolve(validated, store)
    counts = store.import_documents(validated.tables)
    return ImportSummary(
        added={t: counts[t][0] for t in TABLES},
        already_present={t: counts[t][1] for t in TABLES},
        updated={t: counts[t][2] for t in TABLES},
    )


def _check_format(document: Json) -> None:
    """The format and its version first: a file of another kind or a newer version is
    described as such, not by the list of fields it lacks."""
    name = document.get("format")
    if name != FORMAT:
        found = "missing" if name is None else f"{short_value(name)} is not '{FORMAT}'"
        raise ExchangeError(f"format: {found}: not a trainperf results export")
    version = document.get("format_version")
    readable = ", ".join(map(str, READABLE_VERSIONS))
    if type(version) is not int:
        raise ExchangeError(f"format_version: expected an integer, got {short_value(version)}")
    if version not in READABLE_VERSIONS:
        newer = ": upgrade trainperf to read it" if version > FORMAT_VERSION else ""
        raise ExchangeError(
            f"format_version: {version} is not one this trainperf reads ({readable}){newer}"
        )


def _check_unique(rows: list[Json], table: str, key: str) -> None:
    first: dict[str, int] = {}
    for index, row in enumerate(rows):
        if row[key] in first:
            also = f"{table}[{first[row[key]]}]"
            raise ExchangeError(f"{table}[{index}].{key}: '{row[key]}' appears twice (also {also})")
        first[row[key]] = index


def _describe(exc: ValidationError) -> str:
    """The first problem as ``where: what`` (and how many more there are)."""
    errors = exc.errors()
    error = errors[0]
    where = ""
    for part in error["loc"]:
        where += f"[{part}]" if isinstance(part, int) else f".{part}" if where else str(part)
    value, kind = error.get("input"), error["type"]
    if kind == "missing":
        what = "missing"
    elif kind == "extra_forbidden":
        what = f"unknown field (got {short_value(value)})"
    elif kind == "literal_error":
        allowed = str(error.get("ctx", {}).get("expected", "")).replace("'", "")
        what = f"{short_value(value)} is not one of {allowed}"
    elif kind == "string_pattern_mismatch" and where.endswith(".uid"):
        what = f"{short_value(value)} is not a uid (32 lowercase hexadecimal digits)"
    elif kind in _EXPECTED:
        what = f"expected {_EXPECTED[kind]}, got {_kind(value)} {short_value(value)}"
    else:
        what = f"{error['msg'].removeprefix('Value error, ')} (got {short_value(value)})"
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return f"{where}: {what}{more}"


_EXPECTED = {
    "model_type": "an object",
    "dict_type": "an object",
    "list_type": "an array",
    "string_type": "a string",
    "int_type": "an integer",
}


def _kind(value: Any) -> str:
    """The JSON name of a value's type."""
    for python, name in ((bool, "a boolean"), (dict, "an object"), (list, "an array")):
        if isinstance(value, python):
            return name
    if isinstance(value, int | float):
        return "a number"
    return "a string" if isinstance(value, str) else "null"
