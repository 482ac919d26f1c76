"""The JAX training step: a Flax model, optax, one ``jax.jit``-compiled update.

The step mirrors trainperf.step.training_step for PyTorch, so the two frameworks train the same
thing: the zoo's network (trainperf.models.flax_zoo, parameter counts equal to PyTorch's), the
optimizer the literature uses (SGD with momentum 0.9 for the CNNs, AdamW for the language
models, the same learning rates and torch's AdamW weight decay 0.01), one synthetic batch
made on the device(s) at build time and reused every step, ``grad_accum`` micro-batches
per optimizer step (their gradients averaged, as the PyTorch step does by dividing the
loss).

Functional form: the model is split once into its parameters and the rest of its state
(batch-norm statistics, dropout RNG counters: ``nnx.split``), and the compiled function
maps ``(params, rest, opt_state, inputs, targets)`` to the updated three and the loss,
donating the old buffers so that XLA updates them in place. This is Flax's own
recommendation for speed (``nnx.jit`` re-walks the module graph on every call).

Precision (trainperf.case.precision.JAX_PRECISIONS):
- fp32: float32 everywhere;
- tf32: float32 storage, TF32 tensor-core math for matmuls and convolutions;
- bf16: Flax's mixed precision: parameters and optimizer state in float32, the forward
  and backward computed in bfloat16 (the modules' ``dtype``), the loss in float32.
fp16 is not offered: it needs loss scaling, which neither jax nor optax provides.
Float32 math follows trainperf.case.precision.fp32_math, as PyTorch's step does: the step is
lowered under ``jax.default_matmul_precision("float32")`` (every dot and convolution of
the program at precision HIGHEST: IEEE), or ``"tensorfloat32"`` (HIGH: TF32) for tf32,
whatever JAX's default is (XLA's own runs float32 dots and convolutions in TF32 on GPUs of
compute capability 8.0 and later; a bfloat16 dot is bfloat16 at any setting).
``fp32_math`` is read back from the lowered program's precisions, not from the request.

Compilation happens ahead of time (``jit(...).lower(...).compile()``) and is timed on its
own (``compile_s``: tracing, lowering to StableHLO and XLA's compilation), so none of it can
fall into the measured window: the step calls the compiled executable, which never
recompiles (a call with other shapes raises instead). The step returns once it is
dispatched, as a JAX training loop's step does: JAX runs it asynchronously, and the
measured loop waits for it only through trainperf.measure.timer.InFlightTimer, with the
next steps already queued.

Data parallelism (parallel ``mesh``): a one-axis ``jax.sharding.Mesh`` over the case's
devices, the batch sharded along it and everything else replicated; XLA's SPMD partitioner
inserts the gradient all-reduce. Batch normalisation then normalises over the global batch
(XLA reduces its statistics across devices too), where PyTorch's DDP normalises each
device's share: the JAX step communicates a little more per step, as SyncBatchNorm would.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from trainperf.case.precision import fp32_math
from trainperf.case.spec import Case
from trainperf.jax import tasks
from trainperf.jax.flops import xla_flops
from trainperf.models import flax_zoo as flax_models
from trainperf.models.spec import ModelSpec
from trainperf.step.training_step import ADAMW_LR, SGD_LR, SGD_MOMENTUM

# torch.optim.AdamW's default weight decay (optax's default is 1e-4).
ADAMW_WEIGHT_DECAY = 0.01
# jax.default_matmul_precision for each float32 math (trainperf.case.precision.fp32_math), and
# back: the precision that the lowered program's dots and convolutions then carry.
MATMUL_PRECISION = {"ieee": "float32", "tf32": "tensorfloat32"}
PROGRAM_FP32_MATH = {"HIGHEST": "ieee", "HIGH": "tf32"}
# A dot_general's "precision = [A, B]", a convolution's "#stablehlo<precision A>" (StableHLO).
_PRECISION = re.compile(r"precision = \[(\w+), (\w+)\]|#stablehlo<precision (\w+)>")
COMPUTE_DTYPE = {"fp32": jnp.float32, "tf32": jnp.float32, "bf16": jnp.bfloat16}
DATA_AXIS = "data"


class DevicesMissing(RuntimeError):
    """Fewer devices visible to JAX than the case asks for."""


@dataclass
class JaxTrainingStep:
    """A ready-to-call step: ``step()`` dispatches one optimizer step and returns its loss,
    not waited for (the updated state is kept for the next call)."""

    step: Callable[[], jax.Array]
    devices: list[Any]
    size: int
    compile_s: float
    # XLA's cost analysis of the compiled step (per device: the partitioned program), or None.
    xla_flops_per_step: float | None
    # Bytes of the parameters and the optimizer state on each device (replicated), counted
    # from the arrays (0-dimensional counters left out, as the PyTorch side does).
    params_bytes: int = 0
    optimizer_bytes: int = 0
    # The math of the program's float32 dots and convolutions ("ieee", "tf32"), or None
    # when their precisions are not all HIGHEST or all HIGH (``program_fp32_math``).
    fp32_math: str | None = None


def optimizer_of(spec: ModelSpec) -> optax.GradientTransformation:
    """The spec's optimizer with the PyTorch step's hyper-parameters."""
    if spec.optimizer == "adamw":
        return optax.adamw(ADAMW_LR, weight_decay=ADAMW_WEIGHT_DECAY)
    return optax.sgd(SGD_LR, momentum=SGD_MOMENTUM)


def case_devices(case: Case) -> list[Any]:
    """The first ``case.devices`` JAX devices of the case's platform."""
    platform = "gpu" if case.device == "cuda" else "cpu"
    try:
        found = jax.devices(platform)
    except RuntimeError as exc:  # no such backend in this jaxlib
        raise DevicesMissing(
            f"JAX has no {platform} backend here ({exc}); for CUDA GPUs install 'jax[cuda12]'"
        ) from None
    if len(found) < case.devices:
        hint = (
            " (CPU devices: XLA_FLAGS=--xla_force_host_platform_device_count=N before jax "
            "starts; trainperf's runner sets it for the case's worker)"
            if platform == "cpu"
            else ""
        )
        raise DevicesMissing(
            f"the case needs {case.devices} {platform} devices; JAX sees {len(found)}{hint}"
        )
    return found[: case.devices]


def make_train_step(
    graphdef: Any,
    task: Any,
    optimizer: optax.GradientTransformation,
    grad_accum: int,
) -> Callable[..., tuple[Any, Any, Any, jax.Array]]:
    """The pure update: (params, rest, opt_state, inputs, targets) -> the new three, loss."""

    def gradients(params: Any, rest: Any, inputs: jax.Array, targets: jax.Array) -> Any:
        """(loss, updated rest, gradients) of one micro-batch. The model is merged inside
        the traced function and differentiated with nnx's transform, which lets the
        forward update its batch statistics (jax.grad over a closure could not)."""
        model = nnx.merge(graphdef, params, rest)
        loss, grads = nnx.value_and_grad(lambda m: tasks.loss(task, m(inputs), targets))(model)
        return loss, nnx.state(model, nnx.Not(nnx.Param)), grads

    def train_step(
        params: Any, rest: Any, opt_state: Any, inputs: jax.Array, targets: jax.Array
    ) -> tuple[Any, Any, Any, jax.Array]:
        if grad_accum == 1:
            loss, rest, grads = gradients(params, rest, inputs, targets)
        else:
            # The parameters ride in the loop's carry, unchanged: nnx may only merge values
            # of the loop's own trace.
            def micro_batch(_: int, carry: Any) -> Any:
                params, total, rest, loss_sum = carry
                loss, rest, grads = gradients(params, rest, inputs, targets)
                return params, jax.tree.map(jnp.add, total, grads), rest, loss_sum + loss

            zeros = jax.tree.map(jnp.zeros_like, params)
            carry = (params, zeros, rest, jnp.zeros((), jnp.float32))
            _, total, rest, loss_sum = jax.lax.fori_loop(0, grad_accum, micro_batch, carry)
            grads = jax.tree.map(lambda g: g / grad_accum, total)
            loss = loss_sum / grad_accum
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), rest, opt_state, loss

    return train_step


def build_jax_step(spec: ModelSpec, case: Case) -> JaxTrainingStep:
    """Model, optimizer and synthetic batch on the case's devices, compiled ahead of time."""
    devices = case_devices(case)
    size = spec.resolve_size(getattr(case, spec.size_name))
    dtype = COMPUTE_DTYPE[case.precision]

    def initialised() -> nnx.Module:
        rngs = nnx.Rngs(params=case.seed, dropout=case.seed + 1)
        return flax_models.build(spec.name, dtype=dtype, rngs=rngs)

    with jax.default_device(devices[0]):
        # Initialisation compiled as one program: run eagerly, every initialiser would be
        # compiled on its own (seconds for a ResNet on a CPU).
        model = nnx.jit(initialised)()
        model.train()
        graphdef, params, rest = nnx.split(model, nnx.Param, ...)
        optimizer = optimizer_of(spec)
        opt_state = jax.jit(optimizer.init)(params)
        # Weak scaling: device_batch on each device; the one array holds them all.
        batch = case.device_batch * len(devices)
        inputs, targets = tasks.example_batch(spec.task, batch, size, jax.random.key(case.seed + 1))

    mesh = Mesh(devices, (DATA_AXIS,))
    replicated = NamedSharding(mesh, PartitionSpec())
    sharded = NamedSharding(mesh, PartitionSpec(DATA_AXIS))
    state = jax.device_put((params, rest, opt_state), replicated)
    inputs, targets = jax.device_put((inputs, targets), sharded)

    train_step = make_train_step(graphdef, spec.task, optimizer, case.grad_accum)
    state_shardings = jax.tree.map(lambda _: replicated, state)
    jitted = jax.jit(
        train_step,
        in_shardings=(*state_shardings, sharded, sharded),
        out_shardings=(*state_shardings, replicated),
        donate_argnums=(0, 1, 2),
    )
    started = time.perf_counter()
    with jax.default_matmul_precision(MATMUL_PRECISION[fp32_math(case.precision)]):
        lowered = jitted.lower(*state, inputs, targets)
        compiled = lowered.compile()
    compile_s = time.perf_counter() - started

    current = list(state)

    def step() -> jax.Array:
        *updated, loss = compiled(*current, inputs, targets)
        current[:] = updated
        return loss

    def nbytes(tree: Any) -> int:
        return sum(leaf.nbytes for leaf in jax.tree.leaves(tree) if leaf.ndim > 0)

    return JaxTrainingStep(
        step,
        devices,
        size,
        compile_s,
        xla_flops(compiled),
        params_bytes=nbytes(params),
        optimizer_bytes=nbytes(opt_state),
        fp32_math=program_fp32_math(lowered.as_text()),
    )


def program_fp32_math(program: str) -> str | None:
    """The float32 math that a StableHLO program asks of XLA: "ieee" when every dot and
    convolution carries precision HIGHEST, "tf32" when every one carries HIGH, else None
    (DEFAULT leaves it to XLA, mixed ones are not one math)."""
    found = {name for match in _PRECISION.finditer(program) for name in match.groups() if name}
    modes = {PROGRAM_FP32_MATH.get(name) for name in found}
    return modes.pop() if len(modes) == 1 else None
