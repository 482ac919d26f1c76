"""The memory split of a case: the training state counted from its tensors, and what a
forward pass holds (on a CUDA device, read from a fake of torch.cuda's counters here)."""

import pytest
import torch
from torch import nn

from trainperf.measure.memory import forward_retained_bytes, memory_split, training_state_bytes


def trained_once(optimizer_class):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    optimizer = optimizer_class(model.parameters(), lr=0.1)

    def step():
        optimizer.zero_grad(set_to_none=True)
        model(torch.randn(3, 8)).sum().backward()
        optimizer.step()

    step()
    return model, optimizer, step


@pytest.mark.parametrize(
    ("optimizer_class", "buffers"), [(torch.optim.AdamW, 2), (torch.optim.SGD, 0)]
)
def test_training_state_is_counted_from_the_tensors(optimizer_class, buffers):
    model, optimizer, _ = trained_once(optimizer_class)
    params = sum(p.numel() for p in model.parameters())
    state = training_state_bytes(model, optimizer)
    assert state["mem_params_bytes"] == state["mem_grads_bytes"] == 4 * params
    # Adam's two moments (its 0-dimensional step counters are not counted); SGD without
    # momentum keeps nothing.
    assert state["mem_optimizer_bytes"] == buffers * 4 * params


def test_a_cpu_says_why_it_cannot_tell_the_activations():
    model, optimizer, step = trained_once(torch.optim.SGD)
    split = memory_split(model, optimizer, step, torch.device("cpu"))
    assert split["mem_activations_bytes"] is None
    assert "CUDA devices only" in split["mem_activations_absent"]


def test_on_cuda_the_forward_holds_what_was_allocated_between_its_hooks(monkeypatch):
    # A fake allocator counter: every read advances by 100 bytes, so the forward's pre-hook
    # and hook of the last forward read values 100 apart; synchronize does nothing here.
    counter = iter(range(0, 10_000, 100))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: next(counter))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    model, _, step = trained_once(torch.optim.SGD)
    retained, how = forward_retained_bytes(model, torch.device("cuda", 0), step)
    assert retained == 100 and "memory_allocated" in how
    assert not model._forward_hooks and not model._forward_pre_hooks  # removed again
