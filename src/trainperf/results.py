"""Stored results as pandas DataFrames, for notebooks.

``dataframe(db_path)``: one row per result, oldest first. Its columns:

- the CSV columns of ``trainperf results --csv``, under the same names (``id``,
  ``created_at`` (a UTC datetime), ``run_id``, ``system``, ``hostname``, ``model``,
  ``batch_size``, ..., ``status``, ``samples_per_s_median``, ..., ``error``);
- ``uid``, the result's id across databases (``trainperf export`` / ``import``);
- ``case.<field>``: every other field of the case (``case.devices``, ``case.compile``, ...);
- ``metric.<name>``: every other metric holding one value (a number, string, boolean or
  null), e.g. ``metric.mem_peak_source``, ``metric.achieved_tflops``. Metrics holding
  lists or objects are left out, except:
- ``step_s``: the measured step times in seconds, a list per row (empty when none).

A name never appears twice: ``model`` is the case's model, so there is no ``case.model``.
Numbers missing from some rows are floats with NaN there.

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

from trainperf.store import Store


def dataframe(db_path: str | os.PathLike[str]) -> pd.DataFrame:
    """One row per stored result (see the module docstring for the columns)."""
    from trainperf.report.tables import CASE_COLUMNS, CSV_COLUMNS, METRIC_COLUMNS, csv_row

    with _open(db_path) as store:
        results = store.results()
    rows = []
    for result in results:
        metrics = result.get("metrics") or {}
        row = csv_row(result) | {"uid": result["uid"]}
        for field, value in result["case"].items():
            if field not in CASE_COLUMNS:
                row[f"case.{field}"] = value
        for name, value in metrics.items():
            if name not in METRIC_COLUMNS and _scalar(value):
                row[f"metric.{name}"] = value
        row["step_s"] = list(metrics.get("step_s") or [])
        rows.append(row)
    fixed = [*CSV_COLUMNS, "uid"]
    extra = sorted({c for row in rows for c in row} - {*fixed, "step_s"})
    frame = pd.DataFrame.from_records(rows, columns=[*fixed, *extra, "step_s"])
    return _typed(frame)


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
    """The store at ``db_path``, which must exist (``Store`` would create an empty one)."""
    path = Path(db_path)
    if not path.is_file():
        raise FileNotFoundError(f"no trainperf results database at {path}")
    return Store(path)


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
