"""Llama-style decoders (Touvron et al. 2023; Llama 3, Grattafiori et al. 2024).

A pre-normalised decoder-only transformer: RMSNorm before each sublayer, rotary position
embeddings (RoPE) on queries and keys, grouped-query attention (``kv_heads`` key/value
heads shared by ``heads / kv_heads`` query heads each), a SwiGLU feed-forward layer
(``w2(silu(w1 x) * w3 x)``), a final RMSNorm and an output layer, untied from the token
embedding except in the small Llama 3.2 models. No biases anywhere.

The shapes are those Meta published (the models' ``params.json``); the parameter counts
are the published totals: Llama 3 8B 8,030,261,248, Llama 3 70B 70,553,706,496, Llama 3.2
1B 1,235,814,400 (tied). ``llama-tiny`` is the same architecture at a size a CPU trains in
a test. Attention goes to a fused kernel in every precision (``trainperf.models.attention.attend``:
the grouped key/value heads repeated for a kernel that needs equal heads, as fp32 and TF32
on a GPU do). RoPE is applied in the real "rotate half" form (as Hugging Face's Llama does; Meta's
reference pairs neighbouring channels as complex numbers: the same arithmetic on permuted
channels); Llama 3.1/3.2's long-context frequency scaling is left out (it changes no cost).

``init_weights(seed)`` draws every parameter as a whole tensor, in a fixed order, from one
CPU generator seeded with ``seed``, and copies it to the parameter's device, or into this
rank's shard of it when the parameter is a DTensor (sharded by FSDP2). So a model built on
the meta device, sharded, then materialised (``to_empty``) and initialised holds exactly
the weights one process builds with the same seed, and a seed means the same model on
every device: CUDA's generator (Philox) and the CPU's (Mersenne Twister) give different
numbers for one seed, so drawing on the device would make a GPU run start from other
weights than its CPU reference.
Initialisation follows Hugging Face's ``LlamaPreTrainedModel``: normal(0, 0.02) for the
embedding and every projection, ones for the norms.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from trainperf.models.attention import attend
from trainperf.models.spec import CausalLM, ModelSpec

INIT_STD = 0.02  # initializer_range of the published Llama configurations


@dataclass(frozen=True)
class LlamaConfig:
    """Sizes of a Llama-style decoder (Meta's params.json names in the comments)."""

    dim: int  # dim
    layers: int  # n_layers
    heads: int  # n_heads
    kv_heads: int  # n_kv_heads
    ffn_dim: int  # hidden size of the SwiGLU layer (from ffn_dim_multiplier, multiple_of)
    vocab_size: int = 128256
    max_seq_len: int = 8192
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    tie_embeddings: bool = False

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads


def rope_tables(
    seq_len: int, head_dim: int, theta: float, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotation angles, (L, head_dim): position p turns channel pair i
    by p / theta^(2i/head_dim) (Su et al., RoFormer, eq. 34)."""
    inverse = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim)
    angles = torch.outer(torch.arange(seq_len, device=device).float(), inverse)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x`` (B, heads, L, head_dim) rotated: x·cos + rotate_half(x)·sin."""
    first, second = x.chunk(2, dim=-1)
    rotated = torch.cat((-second, first), dim=-1)
    return (x * cos + rotated * sin).type_as(x)


class Attention(nn.Module):
    """Causal grouped-query self-attention with rotary positions."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = config.heads, config.kv_heads, config.head_dim
        self.wq = nn.Linear(config.dim, config.heads * self.head_dim, bias=False)
        self.wk = nn.Linear(config.dim, config.kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(config.dim, config.kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(config.heads * self.head_dim, config.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, seq_len, _ = x.shape
        q = self.wq(x).view(batch, seq_len, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(batch, seq_len, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(batch, seq_len, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        # Each key/value head serves heads/kv_heads query heads: grouped where the kernel
        # that runs takes them so, repeated where it does not (trainperf.models.attention).
        context = attend(q, k, v, is_causal=True)
        return self.wo(context.transpose(1, 2).reshape(batch, seq_len, -1))


class FeedForward(nn.Module):
    """SwiGLU (Shazeer 2020): w2(silu(w1 x) * w3 x)."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(config.dim, config.ffn_dim, bias=False)
        self.w2 = nn.Linear(config.ffn_dim, config.dim, bias=False)
        self.w3 = nn.Linear(config.dim, config.ffn_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    """x + attention(norm(x)), then + feed_forward(norm(x)): the unit FSDP shards and
    activation checkpointing recomputes."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(config.dim, eps=config.norm_eps)
        self.attention = Attention(config)
        self.ffn_norm = nn.RMSNorm(config.dim, eps=config.norm_eps)
        self.feed_forward = FeedForward(config)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(nn.Module):
    """Token ids (B, L) -> next-token logits (B, L, vocab)."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.dim)
        self.layers = nn.ModuleList(TransformerBlock(config) for _ in range(config.layers))
        self.norm = nn.RMSNorm(config.dim, eps=config.norm_eps)
        self.output = nn.Linear(config.dim, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        if not self.output.weight.is_meta:
            self.init_weights(torch.initial_seed())

    def init_weights(self, seed: int) -> None:
        """Every parameter drawn afresh from ``seed`` (module doc): the same weights
        whether the parameters are whole or this rank's shards."""
        from torch.distributed.tensor import DTensor, distribute_tensor

        generator = torch.Generator("cpu").manual_seed(seed)  # one seed, one model (doc)
        with torch.no_grad():
            for name, param in self.named_parameters():
                local = param.to_local() if isinstance(param, DTensor) else param
                full = torch.empty(param.shape, dtype=param.dtype)
                if name.endswith("norm.weight"):
                    full.fill_(1.0)
                else:
                    full.normal_(0.0, INIT_STD, generator=generator)
                full = full.to(local.device)
                if isinstance(param, DTensor):
                    # Every rank drew the same whole tensor: each keeps its shard, no traffic.
                    full = distribute_tensor(
                        full, param.device_mesh, param.placements, src_data_rank=None
                    )
                param.copy_(full)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        seq_len = ids.shape[-1]
        x = self.tok_embeddings(ids)
        cos, sin = rope_tables(seq_len, self.config.head_dim, self.config.rope_theta, x.device)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.output(self.norm(x))


def palm_flops_per_token(config: LlamaConfig, params: int, seq_len: int) -> float:
    """Training FLOPs per token, PaLM's appendix B (Chowdhery et al. 2022), as torchtitan
    and nanoGPT compute MFU: 6·N + 12·l·h·q·T. N counts the parameters that multiply
    (the token embedding is a lookup, left out unless it is also the output layer); the
    second term is attention's QKᵀ and AV products over the full L×L (no causal halving)."""
    embedding = 0 if config.tie_embeddings else config.vocab_size * config.dim
    attention = 12 * config.layers * config.heads * config.head_dim * seq_len
    return 6 * (params - embedding) + attention


# Published shapes: Meta's params.json of each model (dim, n_layers, n_heads, n_kv_heads;
# the SwiGLU width from ffn_dim_multiplier and multiple_of, as the reference code computes it).
CONFIGS: dict[str, LlamaConfig] = {
    "llama-tiny": LlamaConfig(
        dim=64, layers=2, heads=4, kv_heads=2, ffn_dim=192, vocab_size=512, max_seq_len=2048
    ),
    "llama3.2-1b": LlamaConfig(
        dim=2048,
        layers=16,
        heads=32,
        kv_heads=8,
        ffn_dim=8192,
        max_seq_len=131072,
        tie_embeddings=True,
    ),
    "llama3-8b": LlamaConfig(dim=4096, layers=32, heads=32, kv_heads=8, ffn_dim=14336),
    "llama3-70b": LlamaConfig(dim=8192, layers=80, heads=64, kv_heads=8, ffn_dim=28672),
}
NATURAL_SEQ_LEN = {"llama-tiny": 256}  # the others: 8192, Llama 3's pre-training length
DESCRIPTIONS = {
    "llama-tiny": "Llama-style decoder at test size (2 layers, d 64, GQA 4/2 heads)",
    "llama3.2-1b": "Llama 3.2 1B (16 layers, d 2048, GQA 32/8, tied output), 8192 tokens",
    "llama3-8b": "Llama 3 8B (32 layers, d 4096, GQA 32/8), 8192 tokens",
    "llama3-70b": "Llama 3 70B (80 layers, d 8192, GQA 64/8), 8192 tokens",
}


def _factory(config: LlamaConfig):
    def build() -> Llama:
        return Llama(config)

    return build


SPECS = [
    ModelSpec(
        name=name,
        family="llama",
        task=CausalLM(vocab_size=config.vocab_size),
        factory=_factory(config),
        natural_size=NATURAL_SEQ_LEN.get(name, 8192),
        min_size=1,
        max_size=config.max_seq_len,
        optimizer="adamw",
        description=DESCRIPTIONS[name],
    )
    for name, config in CONFIGS.items()
]
