"""Sharded data parallelism (FSDP2) and activation checkpointing: which models can be
wrapped, the refusals, checkpointed gradients, and real 2-rank gloo jobs on the CPU (the
measured case with its memory split and exposed collectives, and the sequential
equivalence of the sharded run)."""

import json
import textwrap

import pytest
import torch

from trainperf import models
from trainperf.case.spec import CaseError, DeviceKind, check_case, make_case
from trainperf.launch.maxbatch import memory_key
from trainperf.models.attention import AttentionPlan
from trainperf.models.blocks import find_blocks, probe_blocks
from trainperf.parallel.fsdp import apply_checkpointing, has_dropout
from trainperf.predict.memory import block_counts

CPU = {"cpu": DeviceKind(2)}
GPUS = {"cpu": DeviceKind(2), "cuda": DeviceKind(2, (9, 0))}
TINY = ["--seq-len", "32", "--device", "cpu", "--runs", "1"]


@pytest.mark.parametrize(
    ("name", "blocks", "count"),
    [
        ("llama-tiny", "layers", 2),
        ("gpt2-small", "blocks", 12),
        ("bert-squad", "bert.layers", 12),
        ("resnet50", None, 0),
        ("inception_v4", None, 0),  # its lists of parallel branches hold few weights
    ],
)
def test_the_repeated_blocks_of_a_transformer_are_found(name, blocks, count):
    with torch.device("meta"):
        found = find_blocks(models.get(name).build())
    assert (found[0] if found else None) == blocks
    assert (len(found[1]) if found else 0) == count


@pytest.mark.parametrize(
    ("fields", "capabilities", "message"),
    [
        ({"model": "resnet18", "parallel": "fsdp", "devices": 2}, CPU, "resnet18 has no repeated"),
        (
            {"model": "vgg16", "activation_checkpointing": "full"},
            CPU,
            "vgg16 has no repeated blocks",
        ),
        (
            {"model": "llama-tiny", "parallel": "dp", "devices": 2, "device": "cuda"}
            | {"activation_checkpointing": "full"},
            GPUS,
            "activation_checkpointing applies to parallel none, ddp or fsdp, not dp",
        ),
        (
            {"model": "llama-tiny", "devices": 2, "reshard_after_forward": False},
            CPU,
            "reshard_after_forward false applies to parallel fsdp, not ddp",
        ),
        (
            {"model": "llama-tiny", "parallel": "fsdp", "devices": 2, "fsdp_reduce": "bf16"},
            CPU,
            "fsdp_reduce bf16 needs precision bf16",
        ),
        (
            {"model": "llama-tiny", "parallel": "fsdp", "devices": 2, "precision": "fp16"},
            CPU,
            "precision fp16 with parallel fsdp is not supported",
        ),
    ],
)
def test_combinations_that_cannot_run_are_refused_in_one_line(fields, capabilities, message):
    with pytest.raises(CaseError, match=message) as info:
        check_case(make_case(batch_size=2, **fields), capabilities)
    assert "\n" not in str(info.value)


USER_NETS = """
    from torch import nn

    def convnet():
        return nn.Sequential(nn.Conv2d(3, 8, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                             nn.Linear(8, 10))

    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Linear(3, 8)
            self.blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))
            self.head = nn.Linear(8, 10)

        def forward(self, x):
            x = self.stem(x.mean((2, 3)))
            for block in self.blocks:
                x = block(x)
            return self.head(x)

    def stack():
        return Stack()

    def broken():
        raise RuntimeError("the user's bug")
"""


def test_a_users_network_is_probed_in_a_child_process(tmp_path, monkeypatch):
    (tmp_path / "shardnets.py").write_text(textwrap.dedent(USER_NETS))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "shardnets:convnet has no repeated blocks" in probe_blocks("shardnets:convnet")
    assert probe_blocks("shardnets:stack") is None
    # Its failure is the case's own, recorded by its worker: nothing is decided here.
    assert probe_blocks("shardnets:broken") is None
    case = make_case(model="shardnets:convnet", batch_size=2, parallel="fsdp", devices=2)
    with pytest.raises(CaseError, match="no repeated blocks"):
        check_case(case, CPU)


@pytest.mark.parametrize("mode", ["full", "selective"])
def test_checkpointed_blocks_give_the_gradients_of_the_plain_model(mode):
    spec = models.get("llama-tiny")
    ids, targets = spec.example_batch(2, seq_len=16)

    def gradients(checkpointing):
        torch.manual_seed(0)
        model = spec.build()
        apply_checkpointing(model, checkpointing, spec.name)
        spec.loss(model(ids), targets).backward()
        return [p.grad for p in model.parameters()]

    plain, checkpointed = gradients("none"), gradients(mode)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(plain, checkpointed, strict=True))


class _DropBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear, self.drop = torch.nn.Linear(16, 16), torch.nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.drop(torch.relu(self.linear(x)))


class _DropNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(_DropBlock() for _ in range(3))
        self.head = torch.nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x).sum()


@pytest.mark.parametrize("mode", ["full", "selective"])
def test_a_checkpointed_block_with_dropout_draws_the_masks_of_its_forward(mode):
    """The recomputed forward must draw the dropout masks the forward drew: without the
    random state preserved, the gradients are those of other masks."""
    x = torch.randn(4, 16)

    def gradients(checkpointing):
        torch.manual_seed(0)
        model = _DropNet()
        apply_checkpointing(model, checkpointing, "dropnet")
        torch.manual_seed(1)  # the masks' random state
        model(x).backward()
        return [p.grad for p in model.parameters()]

    plain, checkpointed = gradients("none"), gradients(mode)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(plain, checkpointed, strict=True))


def test_only_blocks_that_draw_random_numbers_pay_for_their_random_state():
    with torch.device("meta"):
        llama, gpt2 = models.get("llama-tiny").build(), models.get("gpt2-small").build()
    assert not has_dropout(llama.layers) and has_dropout(gpt2.blocks)
    assert has_dropout(_DropNet().blocks)


def test_sharding_options_have_their_own_memory_keys_and_labels():
    ddp = make_case(model="llama-tiny", batch_size=2, devices=2)
    fsdp = ddp.model_copy(update={"parallel": "fsdp"})
    checkpointed = fsdp.model_copy(update={"activation_checkpointing": "full"})
    assert len({memory_key(ddp), memory_key(fsdp), memory_key(checkpointed)}) == 3
    assert checkpointed.label() == "llama-tiny b2 fp32 cpu fsdp x2 ac-full"
    assert fsdp.processes == 2 and fsdp.replicas == 2


def test_a_sharded_checkpointed_case_measures_on_two_cpu_ranks(tmp_path, run_cli):
    # The command (batch left out: one sequence per device), kept short.
    code, out, _ = run_cli(
        ["run", "-m", "llama-tiny", "--parallel", "fsdp", "--devices", 2]
        + ["--activation-checkpointing", "full", "--steps", "fixed:1:4", *TINY]
        + ["--db", tmp_path / "r.db", "--json"]
    )
    (result,) = json.loads(out)["results"]
    assert code == 0, result["error"]
    m = result["metrics"]
    assert m["world_size"] == 2 and result["device"]["backend"] == "gloo"
    assert m["device_batch"] == 1 and m["global_batch"] == 2
    assert m["tokens_per_s_median"] == pytest.approx(m["samples_per_s_median"] * 32)
    assert m["mfu"] is None and "no training peak" in m["mfu_absent_reason"]
    # Each of the two ranks holds half of every weight (the tiny shapes split evenly),
    # gradient and AdamW moment.
    params = sum(p.numel() for p in models.get("llama-tiny").build().parameters())
    assert m["mem_params_bytes"] == m["mem_grads_bytes"] == 4 * params // 2
    assert m["mem_optimizer_bytes"] == 2 * 4 * params // 2
    # The activations each rank keeps for its backward, measured on this CPU: with full
    # checkpointing, what is saved outside the blocks and the inputs of every block, as
    # the memory predictor counts them (within 5%; both count the same tensors).
    counts = block_counts(models.get("llama-tiny"), 32, AttentionPlan("cpu"))
    predicted = (counts.saved_outside + counts.block_inputs).bytes("fp32")
    assert m["mem_activations_bytes"] == pytest.approx(predicted, rel=0.05)
    assert "checkpointed block" in m["mem_activations_source"]
    (run,) = result["runs"]
    for rank in run["metrics"]["ranks"]:
        assert rank["mem_params_bytes"] == m["mem_params_bytes"]
        assert rank["mem_activations_bytes"] == pytest.approx(predicted, rel=0.05)
    exposed = m["comm_exposed_all_gather_s"] + m["comm_exposed_reduce_scatter_s"]
    assert exposed == pytest.approx(m["comm_exposed_s"])
    assert m["compute_step_s_median"] > 0 and m["gather_free_step_s_median"] > 0


def test_each_rank_saves_the_activations_the_predictor_counts(tmp_path, run_cli):
    """llama-tiny under FSDP2 on 2 gloo ranks: the bytes autograd saves on each rank,
    measured, within 5% of the predictor's count for a rank (the CPU's flash attention:
    q, k, v grouped, the output and its logsumexp per layer; no L x L matrix)."""
    code, out, _ = run_cli(
        ["run", "-m", "llama-tiny", "--parallel", "fsdp", "--devices", 2, "--steps", "fixed:1:2"]
        + [*TINY, "--db", tmp_path / "r.db", "--json"]
    )
    (result,) = json.loads(out)["results"]
    assert code == 0, result["error"]
    counts = block_counts(models.get("llama-tiny"), 32, AttentionPlan("cpu"))
    predicted = (counts.saved_outside + counts.saved_in_blocks).bytes("fp32")
    (run,) = result["runs"]
    for rank in run["metrics"]["ranks"]:
        assert rank["mem_activations_bytes"] == pytest.approx(predicted, rel=0.05)
    assert result["metrics"]["attention_backend"] == "flash"


def test_the_sharded_run_is_sequentially_equivalent(run_cli):
    code, out, _ = run_cli(
        ["equivalence", "llama-tiny", "--devices", 2, "--parallel", "fsdp", "--steps", "fixed:0:3"]
        + ["--activation-checkpointing", "selective", "--seq-len", 16, "--device", "cpu"]
        + ["--json"]
    )
    m = json.loads(out)["metrics"]
    assert code == 0 and m["equivalent"] is True, m
    assert m["max_loss_diff"] <= 1e-5 and m["max_param_diff"] <= 1e-5
    assert m["parameters"] == sum(p.numel() for p in models.get("llama-tiny").build().parameters())


def test_the_longest_sequence_of_a_sharded_case_is_searched(tmp_path, run_cli):
    code, out, _ = run_cli(
        ["maxbatch", "llama-tiny", "--find", "seq-len", "--devices", 2, "--parallel", "fsdp"]
        + ["--limit", 64, "--start", 32, "--device", "cpu", "--db", tmp_path / "r.db", "--json"]
    )
    document = json.loads(out)
    assert code == 0 and document["seq_len"] == 64 and document["stored"] is False
    assert [p["seq_len"] for p in document["probes"]] == [32, 64]
    assert "no larger sequence length" in document["note"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--find", "seq-len", "--seq-len", "8"], "leave out --seq-len"),
        (["--find", "seq-len", "--image-size", "8"], "give seq_len, not image_size"),
    ],
)
def test_bad_max_fit_searches_exit_2(tmp_path, run_cli, args, message):
    code, _, err = run_cli(["maxbatch", "llama-tiny", *args, "--db", tmp_path / "r.db"])
    assert code == 2 and message in err
    assert not (tmp_path / "r.db").exists()


@pytest.mark.parametrize("reshard", [True, False])
def test_the_root_keeps_fsdp2s_default_and_the_blocks_the_cases_choice(monkeypatch, reshard):
    """The root's parameters are needed at once by the backward: FSDP2 leaves a root
    unsharded after its forward when ``reshard_after_forward`` is left to it (None), as
    torchtitan does; the blocks follow the case (a fake of fully_shard records the calls)."""
    import torch.distributed.device_mesh as device_mesh
    import torch.distributed.fsdp as fsdp_module

    from trainperf.parallel.fsdp import shard

    calls = []
    monkeypatch.setattr(fsdp_module, "fully_shard", lambda m, **kw: calls.append((m, kw)) or m)
    monkeypatch.setattr(device_mesh, "init_device_mesh", lambda *a, **kw: "mesh")
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda: 2)
    model = models.get("llama-tiny").build()
    shard(
        model,
        "llama-tiny",
        precision="fp32",
        reduce="fp32",
        reshard_after_forward=reshard,
        device=torch.device("cpu"),
    )
    *blocks, (root, root_options) = calls
    assert [m for m, _ in blocks] == list(model.layers) and root is model
    assert all(kw["reshard_after_forward"] is reshard for _, kw in blocks)
    assert "reshard_after_forward" not in root_options  # the library's default: None
