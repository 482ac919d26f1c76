"""BERT and GPT-2 of the zoo: exact sizes, a training step on CPU, causality, size limits."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from trainperf.models import bert, gpt2
from trainperf.models.spec import ModelSpec, SizeError

SPECS: dict[str, ModelSpec] = {spec.name: spec for spec in bert.SPECS + gpt2.SPECS}


def count_parameters(model: nn.Module) -> int:
    # parameters() yields a shared Parameter once, so a tied head is counted once.
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(
    ("name", "expected"),
    [("bert-swag", 109_483_009), ("bert-squad", 108_893_186), ("gpt2-small", 124_439_808)],
)
def test_parameter_count_is_exact(name: str, expected: int) -> None:
    # On the meta device the full-size networks cost no memory and no initialisation time.
    with torch.device("meta"):
        model = SPECS[name].build()
    assert count_parameters(model) == expected


def test_bert_base_with_pooler_matches_reference_count() -> None:
    with torch.device("meta"):
        backbone = bert.bert_base()
    assert count_parameters(backbone) == 109_482_240


def test_squad_model_has_no_pooler() -> None:
    # An unused pooler would leave parameters without gradients under DDP.
    with torch.device("meta"):
        model = SPECS["bert-squad"].build()
    assert model.bert.pooler is None


def test_gpt2_output_layer_is_tied_to_token_embedding() -> None:
    with torch.device("meta"):
        model = SPECS["gpt2-small"].build()
    assert model.lm_head.weight is model.wte.weight


@pytest.mark.parametrize(
    ("name", "output_shape"),
    [("bert-swag", (2, 4)), ("bert-squad", (2, 16, 2)), ("gpt2-small", (2, 16, 50257))],
)
def test_one_training_step_on_cpu(name: str, output_shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    spec = SPECS[name]
    model = spec.build()
    inputs, targets = spec.example_batch(2, seq_len=16)

    outputs = model(inputs)
    loss = spec.loss(outputs, targets)
    loss.backward()

    assert outputs.shape == output_shape
    assert torch.isfinite(loss)
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert not missing, f"parameters without a gradient: {missing}"


def test_gpt2_logits_do_not_depend_on_later_tokens() -> None:
    torch.manual_seed(0)
    spec = SPECS["gpt2-small"]
    model = spec.build().eval()
    ids, _ = spec.example_batch(1, seq_len=12)
    changed = ids.clone()
    changed[0, 8] = (ids[0, 8] + 1) % spec.task.vocab_size

    with torch.no_grad():
        before, after = model(ids), model(changed)

    torch.testing.assert_close(after[:, :8], before[:, :8], rtol=0, atol=1e-5)
    assert not torch.allclose(after[:, 8:], before[:, 8:])


@pytest.mark.parametrize(
    ("name", "too_long"), [("bert-swag", 513), ("bert-squad", 513), ("gpt2-small", 1025)]
)
def test_seq_len_above_maximum_raises(name: str, too_long: int) -> None:
    spec = SPECS[name]
    assert spec.max_size == too_long - 1
    spec.example_batch(1, seq_len=too_long - 1)  # the maximum itself is accepted
    with pytest.raises(SizeError):
        spec.example_batch(1, seq_len=too_long)


@pytest.mark.parametrize(("name", "shape"), [("bert-squad", (1, 513)), ("gpt2-small", (1, 1025))])
def test_model_rejects_inputs_longer_than_its_position_table(
    name: str, shape: tuple[int, ...]
) -> None:
    # Without the check, slicing the position table would fail later with a shape error.
    with torch.device("meta"):
        model = SPECS[name].build()
        ids = torch.zeros(shape, dtype=torch.long)
    with pytest.raises(SizeError):
        model(ids)
