"""Iso-accuracy: two evaluation curves compared at equal samples seen."""

from __future__ import annotations

import math

import pytest
from rich.console import Console

from trainperf.convergence.isoaccuracy import compare_curves
from trainperf.report.isoaccuracy import isoaccuracy_table


def top1_at(samples: float) -> float:
    """A smooth learning curve: accuracy saturating towards 0.9."""
    return 0.9 * (1 - math.exp(-samples / 4000))


def run(run_id: int, samples: list[int], top1=top1_at, top5: bool = True) -> dict:
    evaluations = []
    for epoch, seen in enumerate(samples, start=1):
        acc = top1(seen)
        evaluations.append(
            {
                "samples_seen": seen,
                "top1": acc,
                "top5": min(1.0, acc + 0.08) if top5 else None,
                "eval_loss": 2.3 * (1 - acc) + 0.1,
                "epoch": epoch,
                "time_s": float(epoch),
            }
        )
    return {"id": run_id, "label": f"run{run_id}", "evaluations": evaluations}


def test_identical_curves_agree() -> None:
    samples = [1000 * k for k in range(1, 11)]
    document = compare_curves(run(1, samples), run(2, samples))
    assert document["verdict"] == "agree"
    assert document["max_diff"] == {"top1_diff": 0.0, "top5_diff": 0.0, "eval_loss_rel_diff": 0.0}
    assert len(document["rows"]) == 10
    assert document["parted_at_samples"] is None


def test_same_curve_at_other_sample_counts_agrees_by_interpolation() -> None:
    a = run(1, [1000 * k for k in range(1, 21)])  # every 1000 samples
    b = run(2, [1500 * k for k in range(1, 14)])  # every 1500 samples
    document = compare_curves(a, b)
    assert document["verdict"] == "agree", document["reason"]
    assert document["samples_range"] == [1500, 19500]
    seen = [row["samples_seen"] for row in document["rows"]]
    assert 2000 in seen and 3000 in seen and 4500 in seen  # the union of both runs' counts
    assert all(1500 <= s <= 19500 for s in seen)
    assert 0 < document["max_diff"]["top1_diff"] < 0.02  # interpolation error only


def test_diverging_curve_differs_with_the_parting_point() -> None:
    samples = [1000 * k for k in range(1, 11)]

    def slower(seen: float) -> float:  # the same curve until 7000 samples, then 0.05 lower
        return top1_at(seen) - (0.05 if seen >= 8000 else 0.0)

    document = compare_curves(run(1, samples), run(2, samples, top1=slower))
    assert document["verdict"] == "differ"
    assert document["parted_at_samples"] == 8000
    assert "top1" in document["parted_on"]
    assert document["max_diff"]["top1_diff"] == pytest.approx(0.05)
    assert "8000" in document["reason"]
    assert document["rows"][6]["outside"] == []
    assert "top1" in document["rows"][7]["outside"]


def test_loss_is_compared_relatively() -> None:
    samples = [1000 * k for k in range(1, 6)]
    b = run(2, samples)
    for evaluation in b["evaluations"]:
        evaluation["eval_loss"] *= 1.2
    document = compare_curves(run(1, samples), b)
    assert document["verdict"] == "differ"
    assert document["parted_on"] == ["eval_loss"]
    assert document["max_diff"]["eval_loss_rel_diff"] == pytest.approx(0.2 / 1.1)


def test_non_overlapping_ranges_are_undecided() -> None:
    document = compare_curves(run(1, [1000, 2000, 3000]), run(2, [4000, 5000]))
    assert document["verdict"] == "undecided"
    assert "do not overlap" in document["reason"]
    assert document["rows"] == []


def test_a_single_evaluation_is_undecided() -> None:
    document = compare_curves(run(1, [1000, 2000]), run(2, [1500]))
    assert document["verdict"] == "undecided"
    assert "run b has 1 evaluation" in document["reason"]


def test_top5_absent_on_one_side_is_not_compared() -> None:
    samples = [1000, 2000, 3000]
    document = compare_curves(run(1, samples), run(2, samples, top5=False))
    assert document["verdict"] == "agree"
    assert document["metrics"] == ["top1", "eval_loss"]
    assert "run b" in document["not_compared"]["top5"]


def test_table_renders_rows_and_verdict() -> None:
    samples = [1000 * k for k in range(1, 4)]
    table = isoaccuracy_table(compare_curves(run(1, samples), run(2, samples)))
    console = Console(width=200, record=True)
    console.print(table)
    text = console.export_text()
    assert "run1 vs run2" in text and "agree" in text and "2,000" in text
    undecided = compare_curves(run(1, [1000]), run(2, samples))
    console.print(isoaccuracy_table(undecided))
    assert "undecided" in console.export_text()


def test_negative_tolerance_is_refused() -> None:
    samples = [1000, 2000]
    with pytest.raises(ValueError, match="tolerance_top1"):
        compare_curves(run(1, samples), run(2, samples), tolerance_top1=-0.1)
    assert compare_curves(run(1, samples), run(2, samples), tolerance_top1=0)["verdict"] == "agree"
