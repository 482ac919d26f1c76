"""The JAX backend: a Flax zoo, a ``jax.jit`` training step and data parallelism over a mesh.

Everything here imports jax, flax and optax; the rest of trainperf imports this package
only inside a case whose ``framework`` is ``jax`` (or a verb that asks for it), so a
PyTorch-only install never loads them. Two modules import jax only when called:
``environment`` (a JAX worker's variables, read by the runner for every case; ``start_jax``)
and ``inventory`` (run as a child process by `trainperf system`).
"""
