"""The JAX backend: a Flax zoo, a ``jax.jit`` training step and data parallelism over a mesh.

Everything here imports jax, flax and optax; the rest of trainperf imports this package
only inside a case whose ``framework`` is ``jax`` (or a verb that asks for it), so a
PyTorch-only install never loads them.
"""
