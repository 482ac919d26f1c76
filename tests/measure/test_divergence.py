"""A loss that stops being finite: where it happened, found after the window."""

import math

import pytest
import torch

from trainperf.measure.divergence import Diverged, LossWatch, earliest
from trainperf.measure.policy import FixedPolicy
from trainperf.measure.timed_steps import measure_steps
from trainperf.measure.timer import HostTimer


def _watched(losses: list[float], warmup: int = 2) -> LossWatch:
    values = iter(losses)
    watch = LossWatch()
    measure_steps(
        lambda: torch.tensor(next(values)),
        FixedPolicy(warmup, len(losses) - warmup - 1),
        HostTimer(),
        losses=watch,
    )
    watch.add(torch.tensor(next(values)))  # the final step, outside the timing
    return watch


@pytest.mark.parametrize(
    ("at", "where"),
    [(None, None), (1, ("warm-up", 2)), (4, ("measured", 3)), (7, ("final", 1))],
)
def test_the_first_non_finite_loss_is_placed_in_its_phase(at, where):
    losses = [1.0] * 8
    if at is not None:
        losses[at:] = [math.nan] * (8 - at)
    found = _watched(losses).first_non_finite()
    if where is None:
        assert found is None
    else:
        assert (found["phase"], found["step"], found["loss"]) == (*where, "nan")


def test_check_raises_diverged_naming_the_step_and_rank():
    watch = _watched([1.0, 1.0, 1.0, math.inf, 2.0, 2.0, 2.0, 2.0])
    with pytest.raises(Diverged, match="became inf at measured step 2 on rank 3") as info:
        watch.check(rank=3)
    assert info.value.details() == {"phase": "measured", "step": 2, "loss": "inf", "rank": 3}


def test_numbers_from_other_frameworks_are_checked_too():
    watch = LossWatch()
    for value in (1.0, 0.5, -math.inf):
        watch.add(value)  # a JAX step returns an array; a float stands in for one
    watch.end_warmup()
    assert watch.first_non_finite() == {"phase": "warm-up", "step": 3, "loss": "-inf"}


def test_the_earliest_rank_wins_and_a_tie_goes_to_the_lowest_rank():
    late = {"phase": "measured", "step": 5, "loss": "nan"}
    early = {"phase": "measured", "step": 2, "loss": "nan"}
    assert earliest([None, late, early, early]) == early | {"rank": 2}
    assert earliest([None, {"phase": "warm-up", "step": 9, "loss": "nan"}, early])["rank"] == 1
    assert earliest([None, None]) is None


def test_losses_of_any_shape_and_dtype_are_checked_alike():
    # 0-d losses of mixed dtypes are stacked as they are; one of shape (1,) takes the
    # per-loss path: the same answer either way.
    zero_d = [torch.tensor(1.0), torch.tensor(2.0, dtype=torch.bfloat16), torch.tensor(math.inf)]
    shaped = [torch.tensor([1.0]), *zero_d[1:]]
    for losses in (zero_d, shaped):
        watch = LossWatch()
        for loss in losses:
            watch.add(loss)
        assert watch.first_non_finite() == {"loss": "inf", "phase": "measured", "step": 3}
