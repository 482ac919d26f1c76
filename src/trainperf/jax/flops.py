"""FLOPs of a Flax zoo model's forward pass, as XLA's cost analysis counts them.

``forward_flops`` lowers one forward pass (training mode: batch statistics, dropout) of
the network built under ``nnx.eval_shape``, so no weight is allocated and the largest
models cost only their tracing, and reads the ``flops`` of XLA's HLO cost analysis
(``HloCostAnalysis``) of the *lowered*, unoptimised program (``Lowered.cost_analysis``):
nothing is compiled, and the count is the program's, whatever fusions or rewrites a
backend would make (the compiled CPU program counts bfloat16 converts as FLOPs, for one).
Where jax cannot analyse a lowered program (it answers None for backends behind the PJRT
C API, such as the CUDA plugin), the compiled program's analysis is used instead.

What XLA counts, against trainperf.models.flops (torch's FlopCounterMode, the
convention of MFU):

- matmuls (``dot``, attention's two included): 2 x multiply-accumulates, as torch;
- convolutions: 2 x the multiply-accumulates whose input tap falls inside the input,
  padding excluded; torch counts the whole kernel at every output position. The deficit
  is the share of kernel taps in the padding: nothing for unpadded convolutions,
  1 - (3H - 2)^2 / (3H)^2 for a 3x3 convolution with padding 1 on an H x H map (18% on
  ResNet's 7x7 last stage, 89% on a 1x1 map). Whole networks: ResNet-50 at 224 counts
  2.4% less than torch, ResNet-18 at 32 41% less, VGG-16 at 32 15% less;
- element-wise work that torch does not count: one FLOP per element per add, multiply,
  max or compare (ReLU, biases, residuals, batch and layer norm ~7 per element, pooling
  windows, dropout's threefry bits ~39, BERT's exact GELU 66 as XLA expands erf into a
  polynomial), transcendentals (exp, tanh, pow) apart, not in ``flops``; and the small
  matmuls of trainperf.models.flax_zoo.layers.adaptive_avg_pool. Embedding lookups count 0.

So XLA's count of a zoo model is torch's, less the convolutions' padding taps, plus the
element-wise work: 0.1% (VGG) to 2.1% (BERT) more at small sizes (checked for every model
by tests/jaxbackend/test_flax_zoo.py); dropout on the attention probabilities grows as
the square of the sequence: 3.4% for BERT at 384 tokens, 3.2% for GPT-2 at 1024.
"""

from __future__ import annotations

from typing import Any

import jax
from flax import nnx

from trainperf import models as torch_zoo
from trainperf.jax.tasks import example_batch
from trainperf.models import flax_zoo as flax_models


def forward_flops(name: str, batch_size: int, size: int) -> float | None:
    """XLA's FLOPs for one training-mode forward pass of ``batch_size`` samples at image
    size or sequence length ``size`` (None when the backend reports none)."""
    spec = torch_zoo.get(name)
    size = spec.resolve_size(size)
    model = flax_models.abstract(name)
    model.train()
    graphdef, state = nnx.split(model)
    inputs, _ = jax.eval_shape(
        lambda: example_batch(spec.task, batch_size, size, jax.random.key(0))
    )

    def forward(state: nnx.State, inputs: jax.Array) -> jax.Array:
        return nnx.merge(graphdef, state)(inputs)

    lowered = jax.jit(forward).lower(state, inputs)
    return xla_flops(lowered) or xla_flops(lowered.compile())


def xla_flops(program: Any) -> float | None:
    """FLOPs XLA's cost analysis gives a lowered or compiled program (None when it gives
    none).

    jax has returned a dict, or a list of one dict per program, over its versions.
    """
    analysis = program.cost_analysis()
    if isinstance(analysis, list | tuple):
        analysis = analysis[0] if analysis else None
    flops = (analysis or {}).get("flops")
    return float(flops) if flops is not None and flops > 0 else None
