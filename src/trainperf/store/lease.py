"""Leases: a sweep claims a suite case before measuring it, so that a concurrent sweep of
the same suite on the same database skips it instead of measuring it a second time.

A lease (table ``leases``, store schema 7) names its owner: the sweep, the host, the pid
and that process's start time. It holds while its owner lives: on the owner's host, while
a process of that pid and start time exists (the start time tells a reused pid from the
owner); from another host, which cannot see the process, until the owner has not renewed
it for ``EXPIRY_S``. The owner renews it before each run of the case and gives it up when
the case has its result or the sweep ends. Within the owner's own process, a lease holds
while its sweep measures (``Owner.done``): a sweep that ended without giving its leases up
(its database could not be written, trainperf.store.recovery) frees them for the next sweep of a
process that lives on, a notebook's.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import Any

import psutil

# A lease not renewed for this long is taken over when its owner's host cannot be checked:
# longer than any one run (renewals come before each run), short enough to recover a crash.
EXPIRY_S = 24 * 3600.0
# How long a sweep whose remaining cases are all leased by others waits before looking again.
POLL_S = 5.0
# psutil's process start times are rounded (to 1/100 s on Linux): allow for it.
_START_TOLERANCE_S = 1.0
# The sweeps of this process that measure: the pid cannot tell them from those that ended.
_MEASURING: set[str] = set()


@dataclass(frozen=True)
class Owner:
    """Who holds a lease: a sweep of one process on one host."""

    sweep_id: str
    host: str
    pid: int
    pid_started: float

    @classmethod
    def this_process(cls, sweep_id: str) -> Owner:
        """The owner of a sweep of this process that starts measuring (until ``done``)."""
        pid = psutil.Process().pid
        _MEASURING.add(sweep_id)
        return cls(sweep_id, socket.gethostname(), pid, psutil.Process(pid).create_time())

    def done(self) -> None:
        """The sweep measures no more: its leases hold no more, given up or not."""
        _MEASURING.discard(self.sweep_id)


def is_live(lease: dict[str, Any], now: float | None = None) -> bool:
    """Whether the owner of ``lease`` (a ``leases`` row) may still be measuring its case."""
    if lease["host"] != socket.gethostname():
        now = time.time() if now is None else now
        return now - lease["renewed_at"] < EXPIRY_S
    try:
        started = psutil.Process(lease["pid"]).create_time()
    except psutil.NoSuchProcess:  # zombies included: the owner has ended
        return False
    except psutil.AccessDenied:  # it exists; its start time is hidden: assume the owner
        return True
    if abs(started - lease["pid_started"]) >= _START_TOLERANCE_S:
        return False
    return lease["pid"] != os.getpid() or lease["sweep_id"] in _MEASURING
