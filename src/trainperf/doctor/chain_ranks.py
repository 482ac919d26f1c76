"""The 2-process all_reduce of ``trainperf doctor`` (chain.all_reduce): its ranks, and
the parent that starts them and never waits on them for ever.

The ranks are started as torchrun starts a distributed case's ranks, without its agent
(which would import torch a third time, a second or two on a small machine): each is a
child process with torchrun's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT`` on a free loopback port), tied to its
parent (trainperf.parallel.lifeline), and joins the group as a case's rank does
(trainperf.parallel.group.RankGroup: nccl on GPUs, gloo on CPUs). Rank r contributes a
tensor of r + 1 everywhere; every element of the result must be 1 + 2 + ... + world.

Each rank prints two lines on stdout, ``TRAINPERF_DOCTOR {json}``: ``ready`` once torch is
imported, ``done`` with the result. The parent allows ``start_timeout_s`` for the ranks to
be ready (importing torch from a cold page cache can take tens of seconds) and then
``collective_timeout_s`` for the group to form and the all_reduce to return; past either,
the ranks are killed and the outcome says which wait ran out: a hang is a failure,
never a doctor that hangs.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, Any

WORLD = 2
ELEMENTS = 1024
START_TIMEOUT_S = 60.0
COLLECTIVE_TIMEOUT_S = 10.0
MARK = "TRAINPERF_DOCTOR "
DEVICE_ENV = "TRAINPERF_DOCTOR_DEVICE"  # cpu, or auto: nccl when there is a GPU per rank
RANK_COMMAND = "from trainperf.doctor.chain_ranks import rank_main; rank_main()"


def expected_sum(world: int) -> float:
    """1 + 2 + ... + world: what every element holds after the all_reduce."""
    return world * (world + 1) / 2


@dataclass(frozen=True)
class RanksOutcome:
    """What the ranks reported (``reports``, rank order), or why they did not
    (``error``; ``hung``: a wait ran out and the ranks were killed)."""

    world: int
    reports: list[dict[str, Any]] = field(default_factory=list)
    elapsed_s: float = 0.0
    error: str | None = None
    hung: bool = False


def rank_main() -> None:
    """One rank: import torch, join the group, all_reduce r + 1, report (run by the parent
    as ``python -c RANK_COMMAND``)."""
    from trainperf.parallel.lifeline import die_with_parent

    die_with_parent()
    started = time.monotonic()
    import torch
    import torch.distributed as dist

    from trainperf.parallel.group import RankGroup, Ranks

    ranks = Ranks.from_env()
    device_type = os.environ.get(DEVICE_ENV, "auto")
    if device_type == "auto":
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        device_type = "cuda" if gpus >= ranks.local_world_size else "cpu"
    _say("ready", ranks.rank, import_s=time.monotonic() - started)
    joined = time.monotonic()
    with RankGroup(device_type, timeout_s=COLLECTIVE_TIMEOUT_S) as group:
        tensor = torch.full((ELEMENTS,), float(ranks.rank + 1), device=group.device)
        begin = time.monotonic()
        dist.all_reduce(tensor)
        if device_type == "cuda":
            torch.cuda.synchronize(group.device)
        all_reduce_s = time.monotonic() - begin
        _say(
            "done",
            ranks.rank,
            backend=group.backend,
            device=str(group.device),
            min=float(tensor.min()),
            max=float(tensor.max()),
            join_s=begin - joined,
            all_reduce_s=all_reduce_s,
        )


def _say(event: str, rank: int, **values: Any) -> None:
    print(MARK + json.dumps({"event": event, "rank": rank, **values}), flush=True)


def free_port() -> int:
    """A TCP port free on the loopback interface now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RanksLaunch:
    """``world`` ranks started now; ``collect()`` waits for their reports, ``close()`` for
    their exit (or ``with``). ``command`` replaces the rank's command line (tests: a rank
    that hangs or crashes)."""

    def __init__(
        self,
        world: int = WORLD,
        *,
        device: str = "auto",
        command: Sequence[str] | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
        collective_timeout_s: float = COLLECTIVE_TIMEOUT_S,
    ) -> None:
        from trainperf.parallel.lifeline import PARENT_PID_ENV

        self.world = world
        self.start_timeout_s, self.collective_timeout_s = start_timeout_s, collective_timeout_s
        self.started = time.monotonic()
        self._lines: queue.Queue[tuple[int, str | None]] = queue.Queue()
        self._logs = {rank: deque(maxlen=8) for rank in range(world)}
        port = str(free_port())
        argv = list(command) if command is not None else [sys.executable, "-c", RANK_COMMAND]
        self.procs: list[subprocess.Popen[str]] = []
        for rank in range(world):
            env = os.environ | {
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "WORLD_SIZE": str(world),
                "LOCAL_WORLD_SIZE": str(world),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": port,
                DEVICE_ENV: device,
                PARENT_PID_ENV: str(os.getpid()),
            }
            proc = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            self.procs.append(proc)
            threading.Thread(target=self._read, args=(rank, proc.stdout), daemon=True).start()

    def _read(self, rank: int, stream: IO[str]) -> None:
        for line in stream:
            self._lines.put((rank, line))
        self._lines.put((rank, None))

    def collect(self) -> RanksOutcome:
        """Every rank's ``done`` report, or the first thing that went wrong (then the ranks
        are killed at once)."""
        outcome = None
        try:
            outcome = self._collect()
            return outcome
        finally:
            if outcome is None or outcome.error is not None:
                self.close(kill=True)

    def _collect(self) -> RanksOutcome:
        ready: set[int] = set()
        done: dict[int, dict[str, Any]] = {}
        deadline = self.started + self.start_timeout_s
        while len(done) < self.world:
            try:
                rank, line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return self._hung(ready)
            if line is None:
                if rank not in done:
                    code = self.procs[rank].wait()
                    log = " | ".join(self._logs[rank]) or "no output"
                    return self._outcome(error=f"rank {rank} exited ({code}) early: {log}")
                continue
            if not line.startswith(MARK):
                self._logs[rank].append(line.strip()[:300])
                continue
            report = json.loads(line[len(MARK) :])
            if report["event"] == "ready":
                ready.add(rank)
                if len(ready) == self.world:
                    deadline = time.monotonic() + self.collective_timeout_s
            else:
                done[rank] = report
        return self._outcome(reports=[done[rank] for rank in range(self.world)])

    def _hung(self, ready: set[int]) -> RanksOutcome:
        if len(ready) < self.world:
            missing = ", ".join(str(r) for r in range(self.world) if r not in ready)
            what = f"rank(s) {missing} did not start within {self.start_timeout_s:g} s"
        else:
            what = (
                f"the all_reduce did not return within {self.collective_timeout_s:g} s "
                "of every rank starting"
            )
        return self._outcome(error=f"{what}: killed (a hang)", hung=True)

    def _outcome(self, **kw: Any) -> RanksOutcome:
        return RanksOutcome(self.world, elapsed_s=time.monotonic() - self.started, **kw)

    def close(self, kill: bool = False) -> None:
        """End the ranks: kill them (each by its own pid), or first give them a few
        seconds to leave the group after their report."""
        for proc in self.procs:
            if not kill:
                try:
                    proc.wait(timeout=5.0)
                    continue
                except subprocess.TimeoutExpired:
                    pass
            proc.kill()
            proc.wait()

    def __enter__(self) -> RanksLaunch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(kill=exc[0] is not None)
