"""The equivalence check's training part, in one process (the two-rank run is in
tests/test_distributed.py)."""

import pytest
import torch

from trainperf.case.spec import make_case
from trainperf.launch import equivalence


@pytest.mark.parametrize(("precision", "scalers"), [("fp32", 0), ("fp16", 1)])
def test_sequential_part_repeats_itself_with_the_steps_precision(monkeypatch, precision, scalers):
    created = []
    scaler = torch.amp.GradScaler

    def spy(*args, **kwargs):
        created.append(args)
        return scaler(*args, **kwargs)

    monkeypatch.setattr(torch.amp, "GradScaler", spy)
    case = make_case(model="cifarnet", batch_size=4, image_size=16, precision=precision)
    losses, params = equivalence.train(case, 2, None)
    again, params_again = equivalence.train(case, 2, None)
    assert len(created) == 2 * scalers  # fp16 scales its loss, as the benchmark's step does
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))
    assert losses == again and torch.equal(params, params_again)
