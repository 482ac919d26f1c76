"""The memory split of a case: the training state counted from its tensors, and the
activations a step keeps for its backward, counted from autograd's saved tensors."""

import pytest
import torch
from torch import nn

from trainperf.measure.memory import memory_split, saved_activation_bytes, training_state_bytes


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


def test_the_activations_are_what_autograd_saves_on_every_device():
    """Linear 1 saves its input (3x8) and ReLU its output (3x16, which Linear 2 saves too:
    one storage); the weights they save are parameters, not activations. Measured alike on
    a CPU, where no allocator counts live bytes."""
    model, optimizer, step = trained_once(torch.optim.SGD)
    split = memory_split(model, optimizer, step)
    assert split["mem_activations_bytes"] == 4 * (3 * 8 + 3 * 16)
    assert "saved_tensors_hooks" in split["mem_activations_source"]


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)) + x


@pytest.mark.parametrize("checkpointing", ["none", "full", "selective"])
def test_checkpointed_blocks_count_what_they_keep(checkpointing):
    """Inside ``torch.utils.checkpoint`` no outer hook sees a save: a full checkpoint keeps
    its block's input, a selective one also the outputs of the operators it keeps (the
    matrix multiplies here); counted from the blocks themselves."""
    from trainperf.models.blocks import kept_op_packets
    from trainperf.parallel.fsdp import apply_checkpointing

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ModuleList([Block(), Block()]))
    apply_checkpointing(model, checkpointing, "blocks")
    blocks = list(model[1]) if checkpointing != "none" else []
    kept = kept_op_packets() if checkpointing == "selective" else frozenset()

    def step() -> None:
        x = model[0](torch.randn(3, 8))
        for block in model[1]:
            x = block(x)
        x.sum().backward()

    measured, how = saved_activation_bytes(model, step, blocks, kept)
    first = 3 * 8  # the first linear's input: saved outside the blocks
    block_saves = {"none": 2 * 3 * 16, "full": 3 * 16, "selective": 2 * 3 * 16}
    # none: each block's linear input and ReLU output (its own storage, the sum's other
    # operand is the input); full: each block's input; selective: the input and the addmm
    # output of each block.
    assert measured == 4 * (first + 2 * block_saves[checkpointing])
    assert ("checkpointed" in how) == (checkpointing != "none")
