"""Stored results as pandas DataFrames (trainperf.report.results)."""

import pandas as pd
import pytest

from trainperf.report.results import dataframe, micro_dataframe, runs_dataframe
from trainperf.report.tables import CSV_COLUMNS
from trainperf.store.database import Store


def test_one_row_per_result_with_the_csv_columns_first(report_db):
    with Store(report_db) as store:
        results = store.results()
    frame = dataframe(report_db)
    assert len(frame) == len(results)
    assert tuple(frame.columns[: len(CSV_COLUMNS)]) == CSV_COLUMNS
    assert frame.columns[len(CSV_COLUMNS)] == "uid" and frame.columns[-1] == "step_s"
    assert frame.columns.is_unique and "case.model" not in frame.columns
    assert frame.columns[-2] == "run_samples_per_s"
    extra = frame.columns[len(CSV_COLUMNS) + 1 : -2]
    assert all(c.startswith(("case.", "metric.")) for c in extra)
    assert {"case.devices", "case.compile", "metric.achieved_tflops"} <= set(extra)
    assert list(frame["uid"]) == [r["uid"] for r in results]
    assert list(frame["model"]) == [r["case"]["model"] for r in results]


def test_types_a_notebook_can_compute_with(report_db):
    frame = dataframe(report_db)
    assert isinstance(frame["created_at"].dtype, pd.DatetimeTZDtype)
    assert frame["batch_size"].dtype == "int64"
    assert frame["case.devices"].dtype == "int64"
    assert frame["case.compile"].dtype == "bool"
    # failed results have no throughput: NaN there, floats everywhere
    assert frame["samples_per_s_median"].dtype == "float64"
    failed = frame["status"] != "ok"
    assert failed.any() and frame.loc[failed, "samples_per_s_median"].isna().all()
    assert frame.loc[~failed, "samples_per_s_median"].gt(0).all()


def test_step_times_and_run_throughputs_are_lists_per_row(report_db):
    with Store(report_db) as store:
        results = store.results()
    frame = dataframe(report_db)
    all_steps = [[t for run in r["runs"] for t in run["metrics"]["step_s"]] for r in results]
    assert list(frame["step_s"]) == all_steps
    ok = frame[frame["status"] == "ok"]
    assert all(len(times) > 0 and all(t > 0 for t in times) for times in ok["step_s"])
    assert all(len(runs) == 3 for runs in ok["run_samples_per_s"])
    assert ok["between_run_cv"].dtype == "float64" and ok["runs"].eq(3).all()
    assert "metric.step_s" not in frame.columns and "metric.context_start" not in frame.columns


def test_one_row_per_run(report_db):
    with Store(report_db) as store:
        runs = store.runs()
        results = {r["uid"]: r for r in store.results()}
    frame = runs_dataframe(report_db)
    assert list(frame["uid"]) == [r["uid"] for r in runs] and frame.columns[-1] == "step_s"
    assert frame["result_uid"].isin(list(results)).all()
    per_result = frame.groupby("result_uid")["metric.samples_per_s_median"].apply(list)
    for uid, values in per_result.items():
        assert values == pytest.approx(results[uid]["metrics"]["run_samples_per_s"])
    assert set(frame["run_number"]) == {1, 2, 3} and frame["case.steps"].notna().all()


def test_a_missing_database_is_not_created(tmp_path):
    missing = tmp_path / "missing.db"
    with pytest.raises(FileNotFoundError, match="no trainperf results database at .*missing.db"):
        dataframe(missing)
    with pytest.raises(FileNotFoundError):
        micro_dataframe(missing, "gemm")
    assert not missing.exists()


def test_micro_rows_with_their_system(report_db):
    with Store(report_db) as store:
        runs = store.micro("gemm")
        hostnames = {s["fingerprint"]: s["hostname"] for s in store.systems()}
    frame = micro_dataframe(report_db, "gemm")
    assert len(frame) == sum(len(run["metrics"]["rows"]) for run in runs)
    assert set(frame["hostname"]) == {hostnames[run["system"]] for run in runs} and len(runs) == 2
    assert {"M", "N", "K", "dtype", "tflops_median", "param.device", "run_status"} <= set(
        frame.columns
    )
    assert frame["tflops_median"].dtype == "float64" and frame["M"].dtype == "int64"
    assert isinstance(frame["created_at"].dtype, pd.DatetimeTZDtype)


def test_micro_runs_without_a_table_give_one_row(report_db):
    frame = micro_dataframe(report_db, "profile")
    assert len(frame) == 1 and frame["run_status"].iloc[0] == "ok"


def test_unknown_micro_kind_names_the_known_ones(report_db):
    with pytest.raises(ValueError, match="unknown micro-benchmark kind 'gemmm': allowed gemm"):
        micro_dataframe(report_db, "gemmm")
