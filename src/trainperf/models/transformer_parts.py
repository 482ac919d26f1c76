"""Pieces BERT and GPT-2 (trainperf.models.bert, trainperf.models.gpt2) compute alike.

Both follow Hugging Face's layouts: learned position tables, one fused q/k/v projection
whose heads go to ``scaled_dot_product_attention`` whole, and the same N(0, 0.02)
initialisation. Only the computation is shared here; each model keeps its own modules, so
its parameter names (state_dict keys) and counts are its own.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from trainperf.models.spec import SizeError

INIT_STD = 0.02  # initializer_range of the BERT and GPT-2 configurations


def refuse_past_positions(seq_len: int, max_positions: int, model_name: str) -> None:
    """Raise SizeError for a sequence longer than a learned position table: there is no
    row for its later tokens, and the error says so before a shape mismatch would."""
    if seq_len > max_positions:
        raise SizeError(f"seq_len {seq_len} exceeds {model_name}'s {max_positions} positions")


def fused_qkv_attention(
    qkv: nn.Linear, x: torch.Tensor, heads: int, dropout_p: float, is_causal: bool
) -> torch.Tensor:
    """Self-attention of ``x`` (B, L, hidden) through one fused q/k/v projection: the
    context (B, L, hidden) with the heads merged again, before the output projection.

    The projection's output splits as (3, heads, head_dim), which is how the fused weight
    stacks HF's separate query, key and value weights."""
    batch, seq_len, hidden = x.shape
    stacked = qkv(x).view(batch, seq_len, 3, heads, hidden // heads)
    q, k, v = stacked.permute(2, 0, 3, 1, 4).unbind(0)
    context = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=is_causal)
    return context.transpose(1, 2).reshape(batch, seq_len, hidden)


def init_normal_weights(model: nn.Module) -> nn.Module:
    """Hugging Face's ``_init_weights`` for BERT and GPT-2, on every submodule in order:
    N(0, 0.02) linear and embedding weights, zero biases, unit LayerNorms. Returns
    ``model``, so that a factory can build and initialise in one expression."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=INIT_STD)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=INIT_STD)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
    return model
