"""The Flax zoo (trainperf.models.flax_zoo) against the PyTorch zoo it mirrors: parameter counts,
forward FLOPs, output shapes, the torch layers it reimplements, and the tasks' losses."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from torch import nn
from torch.nn import functional as F

from trainperf import models
from trainperf.jax import tasks
from trainperf.jax.flops import forward_flops
from trainperf.models import flax_zoo as flax_models
from trainperf.models.flax_zoo import layers
from trainperf.models.flops import count_flops, count_parameters
from trainperf.models.spec import (
    CausalLM,
    ImageClassification,
    MultipleChoice,
    SpanExtraction,
    Task,
)

NAMES = flax_models.names()
BATCH = 2
SEQ_LEN = 16

# Upper bound of XLA's element-wise FLOPs (which torch's counter leaves out) as a share of
# the matmul and convolution FLOPs, per family, at the sizes of _size (the measured share
# in the comments). One FLOP per element per add, multiply, max or compare: batch and layer norm
# ~7, dropout's threefry bits ~39, BERT's exact GELU 66 (XLA expands erf into a
# polynomial; GPT-2's tanh GELU 8), LRN and pooling windows 3-9 per element.
ELEMENTWISE_SHARE = {
    "cifarnet": 0.02,  # 1.1%
    "alexnet": 0.01,  # 0.4%
    "resnet": 0.02,  # 0.7-1.3%
    "vgg": 0.01,  # 0.1%
    "bert": 0.03,  # 2.1%: GELU's erf and dropout on 12 layers
    "gpt2": 0.01,  # 0.6%
}
# Run for real (every model runs abstractly): the required models, each 4-7 s here, eager
# initialisation mostly; by default those that together hold every kind of layer (LRN and
# ceil-mode pools, batch norm, dropout and the replicating adaptive pool, attention).
REAL_FORWARD = ["cifarnet", "alexnet", "resnet18", "resnet50", "vgg16", "bert-squad", "gpt2-small"]
SLOW_REAL_FORWARD = {"alexnet", "resnet50", "bert-squad"}


def _size(spec: models.ModelSpec) -> int:
    return SEQ_LEN if spec.is_language_model else max(spec.min_size, 32)


def _marked_slow(names: list[str], slow: set[str]) -> list:
    return [pytest.param(name, marks=pytest.mark.slow) if name in slow else name for name in names]


@functools.cache
def _abstract(name: str) -> nnx.Module:
    # Shared by the tests that only read it: the deep ResNets take seconds to trace.
    return flax_models.abstract(name)


def _abstract_forward(model: nnx.Module, inputs: jax.Array) -> jax.ShapeDtypeStruct:
    graphdef, state = nnx.split(model)
    return jax.eval_shape(lambda state: nnx.merge(graphdef, state)(inputs), state)


def _expected_outputs(task: Task, size: int) -> tuple[int, ...]:
    match task:
        case ImageClassification():
            return (BATCH, task.num_classes)
        case MultipleChoice():
            return (BATCH, task.num_choices)
        case SpanExtraction():
            return (BATCH, size, 2)
        case CausalLM():
            return (BATCH, size, task.vocab_size)
    raise AssertionError(task)


def _classes(task: Task, size: int) -> int:
    """How many values each cross-entropy of the task chooses among."""
    match task:
        case ImageClassification():
            return task.num_classes
        case MultipleChoice():
            return task.num_choices
        case SpanExtraction():
            return size
        case CausalLM():
            return task.vocab_size
    raise AssertionError(task)


# --- parameters and registry ---------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_parameter_count_equals_pytorch(name: str) -> None:
    with torch.device("meta"):
        expected, _ = count_parameters(models.get(name).build())
    assert flax_models.count_params(_abstract(name)) == expected


def test_registry_is_the_pytorch_zoo_in_its_order() -> None:
    required = {"cifarnet", "alexnet", "resnet18", "resnet50", "vgg16", "bert-squad", "gpt2-small"}
    assert required <= set(NAMES)
    assert [name for name in models.names() if name in NAMES] == NAMES
    assert all(flax_models.has(name) for name in NAMES)
    assert not flax_models.has("googlenet")


def test_model_without_flax_version_names_the_available_ones() -> None:
    with pytest.raises(flax_models.NoFlaxModel) as error:
        flax_models.build("googlenet", rngs=nnx.Rngs(0))
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("model 'googlenet' has no Flax version (framework jax)")
    assert message.endswith("available " + ", ".join(NAMES))


def test_bf16_computes_in_bf16_with_float32_parameters() -> None:
    for name in ("resnet18", "gpt2-small"):
        model = nnx.eval_shape(
            lambda name=name: flax_models.build(name, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
        )
        params = jax.tree.leaves(nnx.state(model, nnx.Param))
        assert {leaf.dtype for leaf in params} == {jnp.dtype(jnp.float32)}
        spec = models.get(name)
        inputs, _ = tasks.example_batch(spec.task, BATCH, _size(spec), jax.random.key(0))
        assert _abstract_forward(model, inputs).dtype == jnp.bfloat16


# --- FLOPs -----------------------------------------------------------------------------


def _padding_tap_flops(spec: models.ModelSpec, size: int) -> float:
    """2 x the multiply-accumulates of the zoo's convolutions whose input tap falls in the
    padding, per sample: torch counts them, XLA does not (trainperf.jax.flops)."""
    with torch.device("meta"):
        net = spec.build().eval()  # one sample: batch norm's running statistics
    taps = 0.0

    def count(conv: nn.Conv2d, inputs: tuple[torch.Tensor], output: torch.Tensor) -> None:
        nonlocal taps
        full = valid = 1
        for axis in range(2):
            length, out = inputs[0].shape[2 + axis], output.shape[2 + axis]
            kernel, stride = conv.kernel_size[axis], conv.stride[axis]
            pad, dilation = conv.padding[axis], conv.dilation[axis]
            full *= out * kernel
            valid *= sum(
                0 <= o * stride - pad + t * dilation < length
                for o in range(out)
                for t in range(kernel)
            )
        per_tap = 2 * conv.out_channels * conv.in_channels // conv.groups
        taps += per_tap * (full - valid)

    for module in net.modules():
        if isinstance(module, nn.Conv2d):
            module.register_forward_hook(count)
    inputs, _ = spec.task.example_batch(1, size, "meta")
    net(inputs)
    return taps


# The deepest ResNets' blocks are ResNet-50's (their parameter counts are checked above);
# tracing them takes 7-15 s here: jax 0.10's Tracer.sharding probe, which nnx.BatchNorm's
# statistics update triggers, walks the whole trace so far (quadratic; jax PR #40041).
DEEP = {"resnet101", "resnet152"}
# What nnx's Module.eval() sets, for a view of a shared module.
EVALUATION = {"deterministic": True, "use_running_average": True}


@pytest.mark.parametrize("name", _marked_slow(NAMES, DEEP))
def test_forward_flops_are_pytorch_count_without_padding_plus_elementwise(name: str) -> None:
    spec = models.get(name)
    size = _size(spec)
    torch_flops = count_flops(spec, size).fwd_flops_per_sample
    matmul_flops = BATCH * (torch_flops - _padding_tap_flops(spec, size))
    ratio = forward_flops(name, BATCH, size) / matmul_flops
    assert 1.0 < ratio < 1.0 + ELEMENTWISE_SHARE[spec.family]


# --- forward shapes --------------------------------------------------------------------


@pytest.mark.parametrize("name", _marked_slow(REAL_FORWARD, SLOW_REAL_FORWARD))
def test_real_forward_has_the_task_shapes_and_a_sane_first_loss(name: str) -> None:
    spec = models.get(name)
    size = _size(spec)
    model = flax_models.build(name, rngs=nnx.Rngs(params=0, dropout=1))
    inputs, targets = tasks.example_batch(spec.task, BATCH, size, jax.random.key(2))
    graphdef, state = nnx.split(model)
    outputs = jax.jit(lambda state, inputs: nnx.merge(graphdef, state)(inputs))(state, inputs)
    assert outputs.shape == _expected_outputs(spec.task, size)
    assert bool(jnp.isfinite(outputs).all())
    # The family's initialisation starts near chance: loss about ln(number of classes).
    chance = math.log(_classes(spec.task, size))
    assert 0.6 * chance < float(tasks.loss(spec.task, outputs, targets)) < 1.5 * chance


@pytest.mark.parametrize("name", NAMES)
def test_abstract_forward_has_the_task_shapes(name: str) -> None:
    spec = models.get(name)
    inputs, _ = tasks.example_batch(spec.task, BATCH, _size(spec), jax.random.key(0))
    # Evaluation mode: the same shapes, and no statistics update to trace (see DEEP).
    model = nnx.view(_abstract(name), **EVALUATION, raise_if_not_found=False)
    outputs = _abstract_forward(model, inputs)
    assert outputs.shape == _expected_outputs(spec.task, _size(spec))


# --- torch's layers --------------------------------------------------------------------

# (ours on NHWC, torch's on NCHW): every pooling and normalisation the zoo uses.
LAYERS = {
    "max_pool_ceil": (
        lambda x: layers.max_pool(x, 3, 2, ceil_mode=True),
        lambda x: F.max_pool2d(x, 3, 2, ceil_mode=True),
    ),
    "avg_pool_ceil": (
        lambda x: layers.avg_pool(x, 3, 2, ceil_mode=True),
        lambda x: F.avg_pool2d(x, 3, 2, ceil_mode=True),
    ),
    "max_pool_floor": (lambda x: layers.max_pool(x, 3, 2), lambda x: F.max_pool2d(x, 3, 2)),
    "max_pool_padded": (
        lambda x: layers.max_pool(x, 3, 2, padding=1),
        lambda x: F.max_pool2d(x, 3, 2, padding=1),
    ),
    "max_pool_2x2": (lambda x: layers.max_pool(x, 2, 2), lambda x: F.max_pool2d(x, 2, 2)),
    "adaptive_7": (
        lambda x: layers.adaptive_avg_pool(x, 7),
        lambda x: F.adaptive_avg_pool2d(x, 7),
    ),
    "adaptive_6": (
        lambda x: layers.adaptive_avg_pool(x, 6),
        lambda x: F.adaptive_avg_pool2d(x, 6),
    ),
    "lrn_3": (
        lambda x: layers.local_response_norm(x, 3, 1e-2, 0.75),
        lambda x: F.local_response_norm(x, 3, alpha=1e-2, beta=0.75),
    ),
    "lrn_4": (
        lambda x: layers.local_response_norm(x, 4, 1e-3, 0.75),
        lambda x: F.local_response_norm(x, 4, alpha=1e-3, beta=0.75),
    ),
}


def _nhwc(x: torch.Tensor) -> np.ndarray:
    return x.detach().permute(0, 2, 3, 1).numpy()


@pytest.mark.parametrize("layer", list(LAYERS))
def test_layer_values_and_gradients_match_torch(layer: str) -> None:
    ours, theirs = LAYERS[layer]

    @jax.jit
    def value_and_gradient(inputs: jax.Array, weights: jax.Array) -> tuple[jax.Array, ...]:
        outputs, pull_back = jax.vjp(ours, inputs)
        return outputs, *pull_back(weights)

    # 3: smaller than the adaptive pools' maps (replication); 8 and 14: ceil mode's partial
    # last window, uneven adaptive windows, and even ones (14 -> 7).
    for size in (3, 8, 14):
        generator = torch.Generator().manual_seed(size)
        x = (torch.randn(2, 5, size, size, generator=generator) * 3).requires_grad_()
        expected = theirs(x)
        weights = torch.randn(expected.shape, generator=generator)
        expected.backward(weights)
        outputs, gradient = value_and_gradient(_nhwc(x), _nhwc(weights))
        np.testing.assert_allclose(outputs, _nhwc(expected), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(gradient, _nhwc(x.grad), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("is_causal", [False, True])
def test_attention_is_torchs_on_the_fused_projection_with_dropout_in_training(
    is_causal: bool,
) -> None:
    batch, seq_len, heads, head_dim = 2, 5, 3, 4
    width = heads * head_dim
    qkv = torch.randn(batch, seq_len, 3 * width, generator=torch.Generator().manual_seed(0))
    q, k, v = qkv.view(batch, seq_len, 3, heads, head_dim).permute(2, 0, 3, 1, 4).unbind(0)
    context = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    expected = context.transpose(1, 2).reshape(batch, seq_len, width).numpy()
    attention = layers.Attention(heads, 0.5, is_causal=is_causal, rngs=nnx.Rngs(0))
    inputs = jnp.asarray(qkv.numpy())
    trained = [np.asarray(attention(inputs)) for _ in range(2)]
    attention.eval()
    np.testing.assert_allclose(attention(inputs), expected, rtol=1e-5, atol=1e-6)
    # Dropout: other values, and a fresh mask at each call.
    assert not np.allclose(trained[0], expected)
    assert not np.allclose(trained[0], trained[1])


# --- tasks -----------------------------------------------------------------------------

TASKS = [
    ImageClassification(num_classes=7),
    MultipleChoice(vocab_size=50, num_choices=4),
    SpanExtraction(vocab_size=50),
    CausalLM(vocab_size=11),
]


@pytest.mark.parametrize("task", TASKS, ids=lambda task: type(task).__name__)
def test_loss_equals_the_pytorch_tasks(task: Task) -> None:
    size = 6
    shape = _expected_outputs(task, size)
    outputs = torch.randn(shape, generator=torch.Generator().manual_seed(0)) * 3
    _, targets = tasks.example_batch(task, BATCH, size, jax.random.key(3))
    expected = task.loss(outputs, torch.from_numpy(np.array(targets)).long())
    ours = tasks.loss(task, jnp.asarray(outputs.numpy()), targets)
    assert ours.dtype == jnp.float32
    assert float(ours) == pytest.approx(float(expected), rel=1e-5)
    # bfloat16 outputs are cast before the softmax: the loss stays float32.
    assert tasks.loss(task, jnp.asarray(outputs.numpy(), jnp.bfloat16), targets).dtype == (
        jnp.float32
    )


@pytest.mark.parametrize("task", TASKS, ids=lambda task: type(task).__name__)
def test_example_batch_has_the_pytorch_tasks_shapes_and_ranges(task: Task) -> None:
    size = 6
    inputs, targets = tasks.example_batch(task, 64, size, jax.random.key(4))
    theirs_inputs, theirs_targets = task.example_batch(64, size, "cpu")
    if isinstance(task, ImageClassification):
        assert inputs.shape == (64, size, size, 3) and inputs.dtype == jnp.float32
        assert int(targets.max()) < task.num_classes
    else:
        assert inputs.shape == tuple(theirs_inputs.shape) and inputs.dtype == jnp.int32
        assert int(inputs.max()) < task.vocab_size
    assert targets.shape == tuple(theirs_targets.shape) and targets.dtype == jnp.int32
    assert int(targets.min()) >= 0
    if isinstance(task, CausalLM):
        assert bool((targets[:, :-1] == inputs[:, 1:]).all())
        assert bool((targets[:, -1] == inputs[:, 0]).all())
    if isinstance(task, SpanExtraction):
        assert int(targets.max()) < size


def test_unknown_task_type_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match="Task"):
        tasks.loss(Task(), jnp.zeros((2, 3)), jnp.zeros((2,), jnp.int32))
    with pytest.raises(TypeError, match="Task"):
        tasks.example_batch(Task(), 2, 4, jax.random.key(0))
