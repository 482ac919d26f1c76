"""GPT-2 small (Radford et al. 2019), a decoder-only language model trained on next tokens.

The layout and the parameter count (124,439,808) follow Hugging Face's ``GPT2LMHeadModel``:
pre-LayerNorm blocks, a final LayerNorm, and an output layer that shares its weight with
the token embedding. HF stores its projections as ``Conv1D`` (a transposed linear); plain
``nn.Linear`` holds the same numbers of weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from trainperf.models.spec import CausalLM, ModelSpec
from trainperf.models.transformer_parts import (
    INIT_STD,
    fused_qkv_attention,
    init_normal_weights,
    refuse_past_positions,
)


@dataclass(frozen=True)
class GPT2Config:
    """Sizes of a GPT-2 model; the defaults are GPT-2 small (117M in the paper's count)."""

    vocab_size: int = 50257
    max_positions: int = 1024
    layers: int = 12
    heads: int = 12
    hidden: int = 768
    ln_eps: float = 1e-5
    dropout: float = 0.1


class CausalSelfAttention(nn.Module):
    """Multi-head attention in which each token sees only itself and the tokens before it."""

    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        self.heads = config.heads
        self.dropout_p = config.dropout
        self.qkv = nn.Linear(config.hidden, 3 * config.hidden)
        self.proj = nn.Linear(config.hidden, config.hidden)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # is_causal instead of a mask tensor: the fused kernels build the triangle themselves.
        dropout_p = self.dropout_p if self.training else 0.0
        context = fused_qkv_attention(self.qkv, x, self.heads, dropout_p, is_causal=True)
        return self.dropout(self.proj(context))


class MLP(nn.Module):
    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        self.up = nn.Linear(config.hidden, 4 * config.hidden)
        self.down = nn.Linear(4 * config.hidden, config.hidden)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # GPT-2 was trained with the tanh approximation of GELU (HF's "gelu_new").
        return self.dropout(self.down(F.gelu(self.up(x), approximate="tanh")))


class Block(nn.Module):
    """Pre-LayerNorm block: each sublayer reads a normalised copy; the residual adds raw."""

    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.hidden, eps=config.ln_eps)
        self.attention = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.hidden, eps=config.ln_eps)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2LMHeadModel(nn.Module):
    """Token ids (B, L) -> next-token logits (B, L, vocab)."""

    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        self.max_positions = config.max_positions
        self.wte = nn.Embedding(config.vocab_size, config.hidden)
        self.wpe = nn.Embedding(config.max_positions, config.hidden)
        self.dropout = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.ln_f = nn.LayerNorm(config.hidden, eps=config.ln_eps)
        self.lm_head = nn.Linear(config.hidden, config.vocab_size, bias=False)
        self._init_weights(config)
        # Tied after initialisation, so the embedding keeps its N(0, 0.02) draw. One
        # Parameter in two places: parameters() yields it once, and it is counted once.
        self.lm_head.weight = self.wte.weight

    def _init_weights(self, config: GPT2Config) -> None:
        init_normal_weights(self)
        # GPT-2 paper, section 2.3: the projections that write into the residual stream are
        # scaled by 1/sqrt(N), N the number of residual additions (two per block), so the
        # stream's variance does not grow with depth.
        residual_std = INIT_STD / math.sqrt(2 * config.layers)
        for block in self.blocks:
            nn.init.normal_(block.attention.proj.weight, std=residual_std)
            nn.init.normal_(block.mlp.down.weight, std=residual_std)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        seq_len = ids.shape[-1]
        refuse_past_positions(seq_len, self.max_positions, "GPT-2")
        # Slicing the position table is the lookup of positions 0..L-1 without an index tensor.
        x = self.dropout(self.wte(ids) + self.wpe.weight[:seq_len])
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def gpt2_small(dropout: float = 0.1) -> GPT2LMHeadModel:
    """GPT-2 small with its output layer tied to the token embedding (124,439,808 parameters)."""
    return GPT2LMHeadModel(GPT2Config(dropout=dropout))


SPECS = [
    ModelSpec(
        name="gpt2-small",
        family="gpt2",
        task=CausalLM(vocab_size=GPT2Config().vocab_size),
        factory=gpt2_small,
        natural_size=1024,
        min_size=1,
        max_size=GPT2Config().max_positions,
        optimizer="adamw",
        description="GPT-2 small (12 layers, d 768), next-token prediction on 1024 tokens",
    ),
]
