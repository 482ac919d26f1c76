"""Stored results as pandas DataFrames, for notebooks.

``dataframe(db_path, result_filter)``: one row per result that ``result_filter`` (a
``trainperf.store.query.ResultFilter``; by default all) selects, in its order (oldest
first by default). Its columns:

- the CSV columns of ``trainperf results --csv``, under the same names (``id``,
  ``created_at`` (a UTC datetime), ``sweep_id``, ``system``, ``hostname``, ``model``,
  ``batch_size``, ..., ``status``, ``samples_per_s_median``, ..., ``error``);
- ``uid``, the result's id across databases (``trainperf export`` / ``import``);
- ``case.<field>``: every other field of the case (``case.devices``, ``case.compile``, ...);
- ``metric.<name>``: every other metric holding one value (a number, string, boolean or
  null), e.g. ``metric.mem_peak_source``, ``metric.achieved_tflops``. Metrics holding
  lists or objects are left out, except:
- ``run_samples_per_s``: the throughput of each run (independent process), a list per row;
- ``step_s``: the measured step times in seconds of all its runs, run after run, a list
  per row (empty when none).

A name never appears twice: ``model`` is the case's model, so there is no ``case.model``.
Numbers missing from some rows are floats with NaN there.

``runs_dataframe(db_path)``: one row per run (a worker process measuring a case), oldest
first: ``uid``, ``result_uid`` (the result it belongs to; empty while its case is
unfinished), ``sweep_id``, ``run_number``, ``created_at``, ``system``, ``hostname``,
``model``, ``status``, ``case.<field>``, ``metric.<name>`` (one-value metrics of the run:
its own ``samples_per_s_median``, ``cv``, ``wall_s``, ...) and ``step_s``.

``micro_dataframe(db_path, kind)``: one row per row of the micro-benchmark's table (one
per GEMM shape, message size, ...), with the run's ``uid``, ``created_at``, ``system``,
``hostname``, ``run_status`` and ``param.<name>`` for its scalar parameters; a run with
no rows (failed, or a kind without a table, like ``profile``) gives one row of those.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd

from trainperf.store.database import Store
from trainperf.store.query import EVERYTHING, ResultFilter


def dataframe(
    db_path: str | os.PathLike[str], result_filter: ResultFilter = EVERYTHING
) -> pd.DataFrame:
    """One row per stored result, or per result that ``result_filter`` selects, in its
    order (see the module docstring for the columns)."""
    from trainperf.report.tables import CSV_COLUMNS

    with _open(db_path) as store:
        rows = [_row(result) for result in store.select(result_filter, runs=True, steps=True)]
    fixed = [*CSV_COLUMNS, "uid"]
    lists = ["run_samples_per_s", "step_s"]
    extra = sorted({c for row in rows for c in row} - {*fixed, *lists})
    frame = pd.DataFrame.from_records(rows, columns=[*fixed, *extra, *lists])
    return _typed(frame)


def _row(result: dict[str, Any]) -> dict[str, Any]:
    """The row of one result in ``dataframe``."""
    from trainperf.report.tables import CASE_COLUMNS, METRIC_COLUMNS, csv_row

    metrics = result.get("metrics") or {}
    row = csv_row(result) | {"uid": result["uid"]}
    for field, value in result["case"].items():
        if field not in CASE_COLUMNS:
            row[f"case.{field}"] = value
    for name, value in metrics.items():
        if name not in METRIC_COLUMNS and _scalar(value):
            row[f"metric.{name}"] = value
    row["run_samples_per_s"] = list(metrics.get("run_samples_per_s") or [])
    row["step_s"] = [t for run in result["runs"] for t in run["metrics"].get("step_s") or []]
    return row


def runs_dataframe(db_path: str | os.PathLike[str]) -> pd.DataFrame:
    """One row per stored run (see the module docstring for the columns)."""
    with _open(db_path) as store:
        hostnames = {r["fingerprint"]: r["hostname"] for r in store.systems()}
        runs = store.runs()
    rows = []
    for run in runs:
        row = {k: run[k] for k in ("uid", "result_uid", "sweep_id", "run_number", "created_at")}
        row |= {"system": run["system"], "hostname": hostnames.get(run["system"])}
        row |= {"model": run["case"]["model"], "status": run["status"]}
        row |= {f"case.{k}": v for k, v in run["case"].items() if k != "model"}
        row |= {f"metric.{k}": v for k, v in run["metrics"].items() if _scalar(v)}
        row["step_s"] = list(run["metrics"].get("step_s") or [])
        rows.append(row)
    columns = [c for c in _columns(rows) if c != "step_s"] + ["step_s"]
    return _typed(pd.DataFrame.from_records(rows, columns=columns))


def micro_dataframe(db_path: str | os.PathLike[str], kind: str) -> pd.DataFrame:
    """One row per row of the tables of the stored micro-benchmark runs of ``kind``
    (``gemm``, ``conv``, ``memory``, ``p2p``, ``collective`` or ``profile``)."""
    from trainperf.micro import KINDS

    if kind not in (*KINDS, "profile"):
        raise ValueError(f"unknown micro-benchmark kind '{kind}': allowed {', '.join(KINDS)}")
    with _open(db_path) as store:
        hostnames = {r["fingerprint"]: r["hostname"] for r in store.systems()}
        runs = store.micro(kind)
    rows: list[dict[str, Any]] = []
    for run in runs:
        head = {
            "uid": run["uid"],
            "created_at": run["created_at"],
            "system": run["system"],
            "hostname": hostnames.get(run["system"]),
            "run_status": run["status"],
        } | {f"param.{k}": v for k, v in run["params"].items() if _scalar(v) and k != "kind"}
        table = run["metrics"].get("rows") or [{}]
        rows += [head | {(f"row.{k}" if k in head else k): v for k, v in r.items()} for r in table]
    return _typed(pd.DataFrame.from_records(rows, columns=_columns(rows)))


def _open(db_path: str | os.PathLike[str]) -> Store:
    """The store at ``db_path``, which must exist (``Store`` would create an empty one),
    read in place without writing anything (``Store.read_only``)."""
    path = Path(db_path)
    if not path.exists() and not path.is_symlink():  # a FIFO, device or dangling link: below
        raise FileNotFoundError(f"no trainperf results database at {path}")
    return Store.read_only(path)


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | float | str)


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    """Every key of the rows, in the order first seen."""
    return list(dict.fromkeys(key for row in rows for key in row))


def _typed(frame: pd.DataFrame) -> pd.DataFrame:
    """Times as UTC datetimes; columns of numbers and nulls as numbers."""
    if "created_at" in frame:
        frame["created_at"] = pd.to_datetime(frame["created_at"], utc=True)
    for column in frame.columns:
        values = frame[column].dropna()
        if frame[column].dtype == object and len(values) and all(map(_number, values)):
            frame[column] = pd.to_numeric(frame[column])
    return frame


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
