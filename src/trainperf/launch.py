"""``python -m trainperf.launch TORCHRUN_ARGS...``: torchrun, tied to the trainperf parent.

The runner starts distributed cases through this wrapper. It sets the parent-death signal
(trainperf.lifeline), names itself as the parent of the ranks, and replaces itself with
torchrun (same pid: the death signal survives ``exec``). The ranks, started by torchrun in
sessions of their own, tie themselves to torchrun the same way, so killing the sweep at any
moment ends every rank.
"""

from __future__ import annotations

import os
import sys

from trainperf.lifeline import PARENT_PID_ENV, die_with_parent


def main() -> None:
    die_with_parent()
    os.environ[PARENT_PID_ENV] = str(os.getpid())  # torchrun will have this pid
    os.execv(sys.executable, [sys.executable, "-m", "torch.distributed.run", *sys.argv[1:]])


if __name__ == "__main__":
    main()
