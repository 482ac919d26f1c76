"""trainperf: how fast, and how efficiently, a machine trains neural networks.

The public Python API for notebooks and scripts:
- ``trainperf.models``: the zoo (``names()``, ``get(name)`` -> spec with ``build``,
  ``example_batch`` and ``loss``);
- ``trainperf.case.spec.make_case`` and ``trainperf.step.benchmark.run_case``: measure one case in
  this process;
- ``trainperf.models.flops.analyse``: parameters, FLOPs and gradient bytes of a model;
- ``trainperf.store.database.Store``: the SQLite results database.

Submodules are imported on use, so ``import trainperf`` stays cheap (no torch import).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("trainperf")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"
