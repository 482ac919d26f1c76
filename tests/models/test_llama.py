"""The Llama family: published parameter counts, PaLM FLOPs against the flop counter, GQA
and causality, and an initialisation that does not depend on where the weights live."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from trainperf import models
from trainperf.models.flops import count_flops, count_parameters
from trainperf.models.llama import CONFIGS, palm_flops_per_token

# Totals Meta published (model cards; Hugging Face's safetensors index of each model).
PUBLISHED = {
    "llama3.2-1b": 1_235_814_400,
    "llama3-8b": 8_030_261_248,
    "llama3-70b": 70_553_706_496,
}


@pytest.mark.parametrize(("name", "expected"), PUBLISHED.items())
def test_parameter_count_is_the_published_total(name, expected):
    with torch.device("meta"):
        model = models.get(name).build()
    assert count_parameters(model) == (expected, expected)


def test_only_the_small_llama_3_2_ties_its_output_layer():
    with torch.device("meta"):
        tied, untied = models.get("llama3.2-1b").build(), models.get("llama3-8b").build()
    assert tied.output.weight is tied.tok_embeddings.weight
    assert untied.output.weight is not untied.tok_embeddings.weight


@pytest.mark.parametrize(("name", "seq_len"), [("llama-tiny", 64), ("llama3-8b", 512)])
def test_flop_counter_equals_the_palm_formula_less_the_norm_weights(name, seq_len):
    # PaLM's 6N counts every parameter as multiplied; the counter sees the matmuls, so the
    # two differ by the RMSNorm weights (element-wise) and nothing else.
    spec = models.get(name)
    with torch.device("meta"):
        model = spec.build()
    params = count_parameters(model)[0]
    norms = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.RMSNorm))
    counted = count_flops(spec, seq_len).train_flops_per_sample / seq_len
    palm = palm_flops_per_token(CONFIGS[name], params, seq_len)
    assert counted == pytest.approx(palm - 6 * norms, rel=1e-9)


def test_grouped_query_attention_has_fewer_key_value_heads():
    model = models.get("llama-tiny").build()
    attention = model.layers[0].attention
    config = CONFIGS["llama-tiny"]
    assert attention.wq.out_features == config.heads * config.head_dim
    assert attention.wk.out_features == config.kv_heads * config.head_dim < config.dim


def test_a_token_sees_only_the_tokens_before_it():
    spec = models.get("llama-tiny")
    model = spec.build().eval()
    ids, _ = spec.example_batch(1, seq_len=12)
    changed = ids.clone()
    changed[0, 8] = (changed[0, 8] + 1) % CONFIGS["llama-tiny"].vocab_size
    with torch.no_grad():
        before, after = model(ids), model(changed)
    assert torch.allclose(before[0, :8], after[0, :8])
    assert not torch.allclose(before[0, 8:], after[0, 8:])


def test_rotary_positions_make_order_matter():
    # Without positions, causal attention over a repeated token is the same everywhere.
    spec = models.get("llama-tiny")
    model = spec.build().eval()
    with torch.no_grad():
        logits = model(torch.full((1, 6), 7))
    assert not torch.allclose(logits[0, 1], logits[0, 5])


def test_one_training_step_lowers_the_loss_from_the_uniform_guess():
    spec = models.get("llama-tiny")
    torch.manual_seed(0)
    model = spec.build()
    ids, targets = spec.example_batch(4, seq_len=32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    first = spec.loss(model(ids), targets)
    assert first.item() == pytest.approx(torch.log(torch.tensor(512.0)).item(), abs=0.3)
    for _ in range(5):
        optimizer.zero_grad()
        loss = spec.loss(model(ids), targets)
        loss.backward()
        optimizer.step()
    assert loss.item() < first.item() - 0.5


def test_weights_depend_on_the_seed_only_and_a_meta_build_initialises_alike():
    spec = models.get("llama-tiny")
    torch.manual_seed(3)
    built = spec.build()
    with torch.device("meta"):
        late = spec.build()
    late.to_empty(device="cpu")
    late.init_weights(3)
    torch.manual_seed(4)
    other = spec.build()
    pairs = list(zip(built.parameters(), late.parameters(), strict=True))
    assert all(torch.equal(a, b) for a, b in pairs)
    assert not torch.equal(built.output.weight, other.output.weight)
    assert torch.equal(built.norm.weight, torch.ones_like(built.norm.weight))


class _FakeCudaGenerator(torch.Generator):
    """A generator of another device: what ``torch.Generator('cuda')`` would give on a GPU
    (Philox: other numbers for the same seed); here a CPU generator seeded otherwise."""

    def manual_seed(self, seed: int) -> torch.Generator:
        return super().manual_seed(seed + 1_000_003)


def test_the_same_seed_gives_the_same_weights_whatever_the_device(monkeypatch):
    """Weights are drawn from one CPU generator and copied to the parameter's device: a
    generator of the target device (CUDA's) would give other numbers for one seed, and the
    FSDP equivalence check (a GPU run against a CPU reference) would fail for that alone."""
    spec = models.get("llama-tiny")
    reference = spec.build()
    reference.init_weights(5)
    made, cpu_generator = [], torch.Generator

    def generator(device="cpu"):  # any device the code asks for gets "its own" numbers
        made.append(torch.device(device))
        return cpu_generator() if torch.device(device).type == "cpu" else _FakeCudaGenerator()

    monkeypatch.setattr(torch, "Generator", generator)
    with torch.device("meta"):  # parameters on another device than the CPU
        elsewhere = spec.build()
    elsewhere.init_weights(5)
    assert made and {d.type for d in made} == {"cpu"}  # not the parameters' device
    for target in ("cpu", "meta"):  # meta: a deferred build, materialised afterwards
        with torch.device(target):
            model = spec.build()
        model.to_empty(device="cpu")
        model.init_weights(5)
        pairs = zip(reference.parameters(), model.parameters(), strict=True)
        assert all(torch.equal(a, b) for a, b in pairs)


def test_sequence_length_is_bounded_by_the_configuration():
    with pytest.raises(models.SizeError, match="allowed 1..8192"):
        models.get("llama3-8b").resolve_size(8193)
