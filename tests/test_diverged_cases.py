"""A case whose loss diverges ends as ``diverged``, saying where; nothing non-finite is
stored (issue: a DDP run stored ``final_loss: NaN``; one process stored ok with null)."""

import json
import sqlite3

import pytest

from trainperf.core.strict_json import loads


def _stored_texts(db):
    """Every JSON text of the results and runs tables, strictly parsed."""
    with sqlite3.connect(db) as connection:
        rows = connection.execute(
            "SELECT metrics_json, error_json FROM results UNION ALL"
            " SELECT metrics_json, error_json FROM runs"
        ).fetchall()
    return [loads(text) for row in rows for text in row if text is not None]


@pytest.mark.parametrize(
    ("model", "devices", "rank"),
    [("flakynets:nan_from_3", "1", None), ("flakynets:nan_rank1_from_3", "2", 1)],
)
def test_a_diverging_loss_ends_the_case_as_diverged(
    user_nets, run_cli, tmp_path, model, devices, rank
):
    db = tmp_path / "r.db"
    code, out, err = run_cli(
        ["run", "-m", model, "-b", "2", "--image-size", "8", "--steps", "fixed:1:4"]
        + ["--runs", "2", "--devices", devices, "--db", db, "--json"]
    )
    assert code == 1, err
    (result,) = loads(out)["results"]
    assert result["status"] == "diverged"
    error = result["error"]
    # the third forward is the second measured step (one warm-up step before it)
    assert (error["phase"], error["step"], error["loss"]) == ("measured", 2, "nan")
    assert error.get("rank") == rank and error["run"] == 1
    assert "diverged" in error["message"]
    for document in _stored_texts(db):
        assert "NaN" not in json.dumps(document)
