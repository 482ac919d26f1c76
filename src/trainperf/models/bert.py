"""BERT-base (uncased), the encoder of Devlin et al. 2019, with the SWAG and SQuAD heads.

The layout and the parameter count follow Hugging Face's ``BertModel`` (109,482,240
parameters for encoder + pooler), which is what the fine-tuning benchmarks measured:
``BertForMultipleChoice`` on SWAG and ``BertForQuestionAnswering`` on SQuAD.

Inputs are token ids only. The token types (all zero) and the attention mask (all ones)
that a fine-tuning script would pass are implied rather than built each step: a mask-free
``scaled_dot_product_attention`` is what lets the GPU pick its fused flash kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from trainperf.models.spec import ModelSpec, MultipleChoice, SpanExtraction, Task
from trainperf.models.transformer_parts import (
    fused_qkv_attention,
    init_normal_weights,
    refuse_past_positions,
)


@dataclass(frozen=True)
class BertConfig:
    """Sizes of a BERT encoder; the defaults are BERT-base uncased."""

    vocab_size: int = 30522
    hidden: int = 768
    layers: int = 12
    heads: int = 12
    intermediate: int = 3072
    max_positions: int = 512
    token_types: int = 2
    ln_eps: float = 1e-12
    dropout: float = 0.1


class BertEmbeddings(nn.Module):
    """Word + position + token-type embeddings, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.max_positions = config.max_positions
        self.word = nn.Embedding(config.vocab_size, config.hidden)
        self.position = nn.Embedding(config.max_positions, config.hidden)
        # Two rows as in the checkpoint, though only row 0 (segment A) is ever used here.
        self.token_type = nn.Embedding(config.token_types, config.hidden)
        self.norm = nn.LayerNorm(config.hidden, eps=config.ln_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        seq_len = ids.shape[-1]
        refuse_past_positions(seq_len, self.max_positions, "BERT")
        # Positions 0..L-1 and token type 0 for every token: slicing the tables is the same
        # lookup (and the same gradient) without an index tensor per step.
        x = self.word(ids) + self.position.weight[:seq_len] + self.token_type.weight[0]
        return self.dropout(self.norm(x))


class SelfAttention(nn.Module):
    """Bidirectional multi-head attention with BERT's post-LayerNorm residual."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.heads = config.heads
        self.dropout_p = config.dropout
        # One fused projection instead of HF's separate query/key/value: the same weights
        # (3 x (768x768 + 768)) in one matmul.
        self.qkv = nn.Linear(config.hidden, 3 * config.hidden)
        self.out = nn.Linear(config.hidden, config.hidden)
        self.dropout = nn.Dropout(config.dropout)
        self.norm = nn.LayerNorm(config.hidden, eps=config.ln_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # No mask: every sequence is full length, so no padding to hide.
        dropout_p = self.dropout_p if self.training else 0.0
        context = fused_qkv_attention(self.qkv, x, self.heads, dropout_p, is_causal=False)
        return self.norm(x + self.dropout(self.out(context)))


class FeedForward(nn.Module):
    """The position-wise MLP (exact erf GELU, as BERT was trained) with its residual."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.up = nn.Linear(config.hidden, config.intermediate)
        self.down = nn.Linear(config.intermediate, config.hidden)
        self.dropout = nn.Dropout(config.dropout)
        self.norm = nn.LayerNorm(config.hidden, eps=config.ln_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.dropout(self.down(F.gelu(self.up(x)))))


class BertLayer(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.attention = SelfAttention(config)
        self.feed_forward = FeedForward(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.feed_forward(self.attention(x))


class BertModel(nn.Module):
    """The encoder: (..., L) token ids -> (..., L, hidden) states and the pooled first token.

    ``add_pooler=False`` leaves the pooler out entirely (as HF does for question answering):
    a pooler whose output no loss reads would hold parameters without gradients, which
    DistributedDataParallel rejects unless told to search for unused parameters each step.
    """

    def __init__(self, config: BertConfig, add_pooler: bool = True) -> None:
        super().__init__()
        self.embeddings = BertEmbeddings(config)
        self.layers = nn.ModuleList(BertLayer(config) for _ in range(config.layers))
        self.pooler = nn.Linear(config.hidden, config.hidden) if add_pooler else None

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Hidden states (B, L, hidden) and, with a pooler, tanh(dense(first token)) (B, hidden)."""
        x = self.embeddings(ids)
        for layer in self.layers:
            x = layer(x)
        pooled = None if self.pooler is None else torch.tanh(self.pooler(x[:, 0]))
        return x, pooled


class BertForMultipleChoice(nn.Module):
    """SWAG: each (context, ending) pair is encoded alone; one score per choice."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.bert = BertModel(config, add_pooler=True)
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(config.hidden, 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Token ids (B, choices, L) -> scores (B, choices)."""
        batch, choices, seq_len = ids.shape
        _, pooled = self.bert(ids.reshape(batch * choices, seq_len))
        return self.classifier(self.dropout(pooled)).view(batch, choices)


class BertForQuestionAnswering(nn.Module):
    """SQuAD: a start and an end logit for every token of the passage."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.bert = BertModel(config, add_pooler=False)
        self.span = nn.Linear(config.hidden, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Token ids (B, L) -> start/end logits (B, L, 2)."""
        hidden, _ = self.bert(ids)
        return self.span(hidden)


def bert_base(dropout: float = 0.1, add_pooler: bool = True) -> BertModel:
    """The bare BERT-base encoder (109,482,240 parameters with the pooler)."""
    return init_normal_weights(BertModel(BertConfig(dropout=dropout), add_pooler=add_pooler))


def bert_swag(dropout: float = 0.1) -> BertForMultipleChoice:
    """BERT-base with the multiple-choice head (109,483,009 parameters)."""
    return init_normal_weights(BertForMultipleChoice(BertConfig(dropout=dropout)))


def bert_squad(dropout: float = 0.1) -> BertForQuestionAnswering:
    """BERT-base with the span head and no pooler (108,893,186 parameters)."""
    return init_normal_weights(BertForQuestionAnswering(BertConfig(dropout=dropout)))


def _fine_tuning_spec(
    name: str, task: Task, factory: Callable[[], nn.Module], natural_size: int, description: str
) -> ModelSpec:
    """A BERT-base fine-tuning case: the two differ in head, task and length, and share
    the rest (the family, AdamW, any length the position table holds)."""
    return ModelSpec(
        name=name,
        family="bert",
        task=task,
        factory=factory,
        natural_size=natural_size,
        min_size=1,
        max_size=BertConfig().max_positions,
        optimizer="adamw",
        description=description,
    )


SPECS = [
    _fine_tuning_spec(
        "bert-swag",
        MultipleChoice(vocab_size=BertConfig().vocab_size, num_choices=4),
        bert_swag,
        80,
        "BERT-base uncased fine-tuned on SWAG (4 choices, 80 tokens each)",
    ),
    _fine_tuning_spec(
        "bert-squad",
        SpanExtraction(vocab_size=BertConfig().vocab_size),
        bert_squad,
        384,
        "BERT-base uncased fine-tuned on SQuAD (span extraction, 384 tokens)",
    ),
]
