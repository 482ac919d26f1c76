"""The JAX side of trainperf.models.spec's tasks: synthetic batches and losses.

Batches have the PyTorch task's shapes and ranges, in JAX's layouts and dtypes: images
float32 NHWC (B, S, S, 3) from N(0, 1) with int32 labels; token ids int32 uniform over the
vocabulary. The losses are the PyTorch tasks' (torch's ``F.cross_entropy``, mean over its
rows): softmax cross-entropy on the outputs cast to float32 first, so a bfloat16 forward
still gets a float32 loss, as under torch's autocast.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from trainperf.models.spec import (
    CausalLM,
    ImageClassification,
    MultipleChoice,
    SpanExtraction,
    Task,
)

Batch = tuple[jax.Array, jax.Array]


def _unknown(task: Task) -> TypeError:
    return TypeError(f"the JAX backend has no version of task {type(task).__name__}")


def example_batch(task: Task, batch_size: int, size: int, key: jax.Array) -> Batch:
    """Synthetic ``(inputs, targets)`` of ``batch_size`` samples at image size or sequence
    length ``size``, drawn from ``key``."""
    inputs_key, targets_key = jax.random.split(key)

    def uniform(key: jax.Array, shape: tuple[int, ...], high: int) -> jax.Array:
        return jax.random.randint(key, shape, 0, high, dtype=jnp.int32)

    match task:
        case ImageClassification():
            images = jax.random.normal(inputs_key, (batch_size, size, size, 3), jnp.float32)
            return images, uniform(targets_key, (batch_size,), task.num_classes)
        case MultipleChoice():
            ids = uniform(inputs_key, (batch_size, task.num_choices, size), task.vocab_size)
            return ids, uniform(targets_key, (batch_size,), task.num_choices)
        case SpanExtraction():
            ids = uniform(inputs_key, (batch_size, size), task.vocab_size)
            return ids, uniform(targets_key, (batch_size, 2), size)
        case CausalLM():
            ids = uniform(inputs_key, (batch_size, size), task.vocab_size)
            # The next token of each position, as the PyTorch task's torch.roll.
            return ids, jnp.roll(ids, -1, axis=1)
    raise _unknown(task)


def _cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Mean softmax cross-entropy over every row of ``logits`` (last axis: the classes)."""
    return optax.softmax_cross_entropy_with_integer_labels(
        logits.astype(jnp.float32), labels
    ).mean()


def loss(task: Task, outputs: jax.Array, targets: jax.Array) -> jax.Array:
    """The training loss of one step, float32: ``loss(task, model(inputs), targets)``."""
    match task:
        case ImageClassification() | MultipleChoice() | CausalLM():
            return _cross_entropy(outputs, targets)
        case SpanExtraction():
            # outputs (B, L, 2): a distribution over positions for the start and the end.
            start = _cross_entropy(outputs[..., 0], targets[:, 0])
            end = _cross_entropy(outputs[..., 1], targets[:, 1])
            return (start + end) / 2
    raise _unknown(task)
