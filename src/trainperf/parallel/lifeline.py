"""Child processes that end with their parent, so a killed sweep leaves nothing running.

A sweep killed with SIGKILL cannot clean up. Each worker, and the torchrun agent of a
distributed case, asks Linux to send it SIGKILL when its parent dies
(``prctl(PR_SET_PDEATHSIG)``) instead of measuring on as an orphan and disturbing the next
sweep. The parent's pid comes in ``TRAINPERF_PARENT_PID``: if the parent is already gone
when the request is made, the process exits at once.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PARENT_PID_ENV = "TRAINPERF_PARENT_PID"
# The signal by which a parent asks its children for their Python stacks (a child that ran
# out of time says where it was stuck before it is killed; trainperf.launch.worker).
STACK_SIGNAL = signal.SIGUSR1
# prctl option from <linux/prctl.h>: signal to deliver when the parent process dies.
PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Have the kernel kill this process when the process that started it dies (Linux)."""
    parent = os.environ.get(PARENT_PID_ENV)
    if parent is None or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return  # not fatal: the process still ends when its case does
    if os.getppid() != int(parent):  # the parent died before the request took effect
        os._exit(1)
