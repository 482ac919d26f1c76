"""BERT-base in Flax NNX with the SWAG and SQuAD heads, the mirror of trainperf.models.bert.

The sizes are the PyTorch module's ``BertConfig``; the layout is its own: word, position
and token-type embeddings (positions 0..L-1 and type 0, sliced from the tables), LayerNorm
(eps 1e-12) and dropout; twelve post-LayerNorm layers of bidirectional attention with one
fused qkv projection and an exact-erf GELU MLP; a tanh pooler on the first token, built
only for multiple choice (SQuAD's model has none, as Hugging Face's). 109,483,009
parameters for SWAG, 108,893,186 for SQuAD. Initialisation N(0, 0.02), zero biases.

Dropout 0.1 on the embeddings, on the attention probabilities, on each sublayer's output
before its residual, and before SWAG's classifier, as the PyTorch module.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from trainperf.models.bert import BertConfig
from trainperf.models.flax_zoo.layers import Attention
from trainperf.models.spec import SizeError

INIT = {
    "kernel_init": nnx.initializers.normal(0.02),
    "bias_init": nnx.initializers.zeros_init(),
}


def _layer_norm(config: BertConfig, *, dtype: Any, rngs: nnx.Rngs) -> nnx.LayerNorm:
    return nnx.LayerNorm(config.hidden, epsilon=config.ln_eps, dtype=dtype, rngs=rngs)


class BertEmbeddings(nnx.Module):
    """Word + position + token-type embeddings, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig, *, dtype: Any, rngs: nnx.Rngs) -> None:
        embed = partial(
            nnx.Embed, dtype=dtype, embedding_init=nnx.initializers.normal(0.02), rngs=rngs
        )
        self.max_positions = config.max_positions
        self.word = embed(config.vocab_size, config.hidden)
        self.position = embed(config.max_positions, config.hidden)
        # Two rows as in the checkpoint, though only row 0 (segment A) is used.
        self.token_type = embed(config.token_types, config.hidden)
        self.norm = _layer_norm(config, dtype=dtype, rngs=rngs)
        self.dropout = nnx.Dropout(config.dropout, rngs=rngs)

    def __call__(self, ids: jax.Array) -> jax.Array:
        seq_len = ids.shape[-1]
        if seq_len > self.max_positions:
            raise SizeError(f"seq_len {seq_len} exceeds BERT's {self.max_positions} positions")
        x = self.word(ids)
        tables = self.position.embedding[:seq_len] + self.token_type.embedding[0]
        x = x + tables.astype(x.dtype)
        return self.dropout(self.norm(x))


class SelfAttention(nnx.Module):
    """Bidirectional multi-head attention with BERT's post-LayerNorm residual."""

    def __init__(self, config: BertConfig, *, dtype: Any, rngs: nnx.Rngs) -> None:
        self.qkv = nnx.Linear(config.hidden, 3 * config.hidden, dtype=dtype, rngs=rngs, **INIT)
        self.attention = Attention(config.heads, config.dropout, is_causal=False, rngs=rngs)
        self.out = nnx.Linear(config.hidden, config.hidden, dtype=dtype, rngs=rngs, **INIT)
        self.dropout = nnx.Dropout(config.dropout, rngs=rngs)
        self.norm = _layer_norm(config, dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.norm(x + self.dropout(self.out(self.attention(self.qkv(x)))))


class FeedForward(nnx.Module):
    """The position-wise MLP (exact erf GELU, as BERT was trained) with its residual."""

    def __init__(self, config: BertConfig, *, dtype: Any, rngs: nnx.Rngs) -> None:
        self.up = nnx.Linear(config.hidden, config.intermediate, dtype=dtype, rngs=rngs, **INIT)
        self.down = nnx.Linear(config.intermediate, config.hidden, dtype=dtype, rngs=rngs, **INIT)
        self.dropout = nnx.Dropout(config.dropout, rngs=rngs)
        self.norm = _layer_norm(config, dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        hidden = jax.nn.gelu(self.up(x), approximate=False)
        return self.norm(x + self.dropout(self.down(hidden)))


class BertLayer(nnx.Module):
    def __init__(self, config: BertConfig, *, dtype: Any, rngs: nnx.Rngs) -> None:
        self.attention = SelfAttention(config, dtype=dtype, rngs=rngs)
        self.feed_forward = FeedForward(config, dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.feed_forward(self.attention(x))


class BertModel(nnx.Module):
    """The encoder: (N, L) token ids -> (N, L, hidden) states; ``pooled`` the first token's
    tanh(dense(.)) (the pooler exists only with ``add_pooler``)."""

    def __init__(self, config: BertConfig, add_pooler: bool, *, dtype: Any, rngs: nnx.Rngs) -> None:
        self.embeddings = BertEmbeddings(config, dtype=dtype, rngs=rngs)
        self.layers = nnx.Sequential(
            *(BertLayer(config, dtype=dtype, rngs=rngs) for _ in range(config.layers))
        )
        hidden = config.hidden
        pooler = nnx.Linear(hidden, hidden, dtype=dtype, rngs=rngs, **INIT) if add_pooler else None
        self.pooler = pooler

    def __call__(self, ids: jax.Array) -> jax.Array:
        return self.layers(self.embeddings(ids))

    def pooled(self, hidden: jax.Array) -> jax.Array:
        return jnp.tanh(self.pooler(hidden[:, 0]))


class BertForMultipleChoice(nnx.Module):
    """SWAG: each (context, ending) pair encoded alone; one score per choice."""

    def __init__(self, dropout: float = 0.1, *, dtype: Any, rngs: nnx.Rngs) -> None:
        config = BertConfig(dropout=dropout)
        self.bert = BertModel(config, add_pooler=True, dtype=dtype, rngs=rngs)
        self.dropout = nnx.Dropout(config.dropout, rngs=rngs)
        self.classifier = nnx.Linear(config.hidden, 1, dtype=dtype, rngs=rngs, **INIT)

    def __call__(self, ids: jax.Array) -> jax.Array:
        """Token ids (B, choices, L) -> scores (B, choices)."""
        batch, choices, seq_len = ids.shape
        pooled = self.bert.pooled(self.bert(ids.reshape(batch * choices, seq_len)))
        return self.classifier(self.dropout(pooled)).reshape(batch, choices)


class BertForQuestionAnswering(nnx.Module):
    """SQuAD: a start and an end logit for every token of the passage."""

    def __init__(self, dropout: float = 0.1, *, dtype: Any, rngs: nnx.Rngs) -> None:
        config = BertConfig(dropout=dropout)
        self.bert = BertModel(config, add_pooler=False, dtype=dtype, rngs=rngs)
        self.span = nnx.Linear(config.hidden, 2, dtype=dtype, rngs=rngs, **INIT)

    def __call__(self, ids: jax.Array) -> jax.Array:
        """Token ids (B, L) -> start/end logits (B, L, 2)."""
        return self.span(self.bert(ids))


MODELS = {"bert-swag": BertForMultipleChoice, "bert-squad": BertForQuestionAnswering}
