"""Does trainperf's JAX case cost anything? Its measured throughput vs a bare hand-written jit loop.

Both train the same Flax model of trainperf's zoo with the same optimizer and batch size:
- trainperf: the step of ``trainperf.jax.step.build_jax_step`` (compiled ahead of time)
  measured by ``trainperf.measure.timed_steps.measure_steps`` with ``fixed:0:N`` and the
  timer of a JAX case (``trainperf.measure.timer.InFlightTimer``: the host waits for a step
  once two later ones are queued), summarized by ``trainperf.measure.stats`` as a case is:
  its ``samples_per_s_mean``;
- bare: the loop a JAX user writes, independently here: ``nnx.split`` the model, a
  ``jax.jit`` update (value_and_grad, optax, buffers donated), N steps dispatched back to
  back (JAX runs them asynchronously) with one ``block_until_ready`` at the end.

So the ratio holds everything trainperf adds: waiting for each step while two later ones
are queued (which a bare loop need not do), the timer's clock reads and the policy's
checks. Blocks of N steps alternate ABBA, which cancels what a shared machine adds. Prints
per pair the ratio trainperf / bare; the median must be >= 0.97 (exit code 1 otherwise).

    python benchmarks/jax_overhead.py [--model cifarnet --batch-size 32 --size 32]
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

import jax
import optax
from flax import nnx

from common import abba, overhead_parser, pair_line
from trainperf import models
from trainperf.case.spec import make_case
from trainperf.jax import tasks
from trainperf.jax.step import JaxTrainingStep, build_jax_step, optimizer_of
from trainperf.measure.policy import FixedPolicy
from trainperf.measure.stats import summarize
from trainperf.measure.timed_steps import measure_steps
from trainperf.measure.timer import InFlightTimer
from trainperf.models import flax_zoo as flax_models

THRESHOLD = 0.97


class BareLoop:
    """A hand-written JAX training loop of ``spec`` in fp32, compiled on first use."""

    def __init__(self, spec: models.ModelSpec, batch_size: int, size: int) -> None:
        model = flax_models.build(spec.name, rngs=nnx.Rngs(params=0, dropout=1))
        model.train()
        graphdef, params, rest = nnx.split(model, nnx.Param, ...)
        optimizer = optimizer_of(spec)
        self.state = (params, rest, optimizer.init(params))
        self.inputs, self.targets = tasks.example_batch(
            spec.task, batch_size, size, jax.random.key(1)
        )
        self.batch_size = batch_size

        def loss_fn(params: Any, rest: Any, x: jax.Array, y: jax.Array) -> Any:
            net = nnx.merge(graphdef, params, rest)
            return tasks.loss(spec.task, net(x), y), nnx.state(net, nnx.Not(nnx.Param))

        def update(params: Any, rest: Any, opt_state: Any, x: jax.Array, y: jax.Array) -> Any:
            (loss, rest), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, rest, x, y)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), rest, opt_state, loss

        self.update = jax.jit(update, donate_argnums=(0, 1, 2))

    def block(self, steps: int) -> float:
        """Samples/s of ``steps`` steps dispatched back to back, waited for once."""
        jax.block_until_ready(self.state)
        start = time.perf_counter()
        state = self.state
        for _ in range(steps):
            *state, _loss = self.update(*state, self.inputs, self.targets)
        self.state = jax.block_until_ready(tuple(state))
        return self.batch_size * steps / (time.perf_counter() - start)


def harness_block(training: JaxTrainingStep, batch_size: int, steps: int) -> float:
    """The samples/s trainperf reports for ``steps`` measured steps."""
    timer = InFlightTimer(jax.block_until_ready)
    record = measure_steps(timer.timed(training.step), FixedPolicy(0, steps), timer)
    return summarize(record.step_s, batch_size).samples_per_s_mean


def main() -> int:
    args = overhead_parser(__doc__, steps=30, pairs=20).parse_args()

    spec = models.get(args.model)
    case = make_case(
        model=args.model,
        batch_size=args.batch_size,
        device=args.device,
        framework="jax",
        **{spec.size_name: args.size},
    )
    training = build_jax_step(spec, case)
    bare = BareLoop(spec, args.batch_size, training.size)
    for _ in range(args.warmup):  # compiles the bare loop; warms both
        jax.block_until_ready(training.step())  # the step returns once dispatched
        bare.block(1)

    ratios = []
    blocks = abba(
        args.pairs,
        lambda: bare.block(args.steps),
        lambda: harness_block(training, args.batch_size, args.steps),
    )
    for pair, plain, harness in blocks:
        ratios.append(harness / plain)
        print(pair_line(pair, plain, harness, {"trainperf/bare": harness / plain}), flush=True)
    median = statistics.median(ratios)
    print(
        f"{args.model} b{args.batch_size} @{args.size} on {args.device} (jax "
        f"{jax.__version__}), {args.pairs} pairs of {args.steps}-step blocks:"
    )
    print(
        f"  trainperf reported / bare jit loop = {median:.4f} (median; range "
        f"{min(ratios):.4f}..{max(ratios):.4f}); required >= {THRESHOLD}"
    )
    return 0 if median >= THRESHOLD else 1


if __name__ == "__main__":
    sys.exit(main())
