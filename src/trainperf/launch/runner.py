"""Runs one job (a run of a case, a micro-benchmark, a training run) in a child process.

The parent never measures in its own process: a case that exhausts memory, segfaults or
hangs takes only its own child down. Protocol with trainperf.launch.worker: the job as JSON in a
file, the result as JSON in another; the child's stderr goes to a file whose tail is kept
when the child dies without a result. The sweep over many cases is trainperf.launch.sweep.

The child's environment is this process's, with what the job adds (a JAX case's:
trainperf.system.jax_environment) and ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=0`` for every job, so that
float32 math is the case's precision's (trainperf.case.precision) in NVIDIA's containers too.

Statuses added here: ``crashed`` (exited or was killed without writing a result: the exit
code or signal and the tail of stderr are kept) and ``timeout`` (ran past the case's
``timeout_s``, or when it has none a generous default from its step policy,
``Case.run_timeout_s``: the child's whole process group is killed).

Interruption: SIGINT (Ctrl-C) and SIGTERM only raise a flag (``StopFlag``). The parent
polls it while it waits for the child, kills the child's process group and raises
``Interrupted``. If the parent itself is killed (SIGKILL), the child follows it (the
worker asks the kernel for that, see trainperf.launch.worker), and the next trainperf removes
the job directory it left (``job_directory``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from trainperf.case.outcome import Outcome
from trainperf.case.precision import FP32_MATH_ENV
from trainperf.case.spec import Case
from trainperf.core import strict_json
from trainperf.parallel.lifeline import PARENT_PID_ENV, STACK_SIGNAL
from trainperf.store.lease import Owner, is_live

STDERR_TAIL_CHARS = 4000
# How often the parent looks at the child and the interrupt flag while it waits.
POLL_S = 0.25
# How long the workers get to write their stacks before a timed-out case is killed.
STACK_WAIT_S = 1.0
# Temporary job directories: their name prefix, and the file naming the process that owns one.
TEMP_PREFIX = "trainperf-"
OWNER_FILE = "owner.json"


class Interrupted(Exception):  # noqa: N818 - it names what happened, like KeyboardInterrupt
    """The sweep was asked to stop (SIGINT or SIGTERM); the running child has been killed."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopFlag:
    """Set by SIGINT/SIGTERM while a sweep runs; a second signal stops at once."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def raise_if_set(self) -> None:
        if self.signum is not None:
            raise Interrupted(self.signum)

    def _handle(self, signum: int, frame: object) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopFlag]:
        """Route SIGINT and SIGTERM to this flag (main thread only) for the duration."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


@contextlib.contextmanager
def job_directory() -> Iterator[Path]:
    """A fresh temporary directory (``trainperf-*``) for the job files of one command,
    removed when it ends.

    A trainperf killed with SIGKILL runs no ``finally`` and leaves its directory behind, so
    the directory names its owner (OWNER_FILE) and each new one first removes those whose
    owner is gone (``remove_stale_directories``)."""
    remove_stale_directories()
    with tempfile.TemporaryDirectory(prefix=TEMP_PREFIX) as tmp:
        owner = Owner.this_process(sweep_id="")
        (Path(tmp) / OWNER_FILE).write_text(
            json.dumps({"host": owner.host, "pid": owner.pid, "pid_started": owner.pid_started})
        )
        yield Path(tmp)


def remove_stale_directories(root: Path | None = None) -> list[Path]:
    """Remove the ``trainperf-*`` directories in ``root`` (the system's temporary folder)
    whose owner process has ended; return them. A directory without an owner file, of
    another host, or of a process still alive (or that cannot be inspected) is kept."""
    removed = []
    for path in Path(root or tempfile.gettempdir()).glob(TEMP_PREFIX + "*"):
        try:
            owner = json.loads((path / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # no owner recorded (another tool, or one being made): not ours to judge
        if owner.get("host") == socket.gethostname() and not _owner_alive(owner):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _owner_alive(owner: dict[str, Any]) -> bool:
    """Whether the owner (host, pid, pid_started) lives, as a lease's owner is judged."""
    try:
        return is_live(owner)
    except (psutil.Error, KeyError, TypeError, ValueError):
        return True  # a file we cannot read as an owner: keep the directory


def worker_command(case_path: Path, result_path: Path) -> list[str]:
    """The child's command line: this interpreter running trainperf.launch.worker."""
    return [sys.executable, "-m", "trainperf.launch.worker", str(case_path), str(result_path)]


@dataclass(frozen=True)
class ChildJob:
    """How a child job runs: one process, or torchrun over processes per node x nodes."""

    torchrun: bool = False
    processes_per_node: int = 1
    nodes: int = 1
    timeout_s: float | None = None
    job_id: str = "trainperf"  # the rendezvous id: the same on every node of one job
    # Variables added to the child's environment (a JAX case's platform, CPU devices and
    # on-demand allocation: trainperf.system.jax_environment).
    env: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of_case(cls, case: Case) -> ChildJob:
        from trainperf.system.jax_environment import worker_environment

        digest = hashlib.sha256(case.model_dump_json().encode()).hexdigest()[:12]
        return cls(
            case.launch == "torchrun",
            case.devices,
            case.nodes,
            case.run_timeout_s,
            f"trainperf-{digest}",
            tuple(worker_environment(case).items()),
        )

    @classmethod
    def of_training(cls, config: dict[str, Any], timeout_s: float | None) -> ChildJob:
        """A ``trainperf train`` run (trainperf.case.training.TrainConfig as a dict): under
        torchrun above one process in all; its rendezvous id the same on every node."""
        digest = hashlib.sha256(strict_json.dumps(config, sort_keys=True).encode()).hexdigest()[:12]
        devices, nodes = config["devices"], config["nodes"]
        return cls(devices * nodes > 1, devices, nodes, timeout_s, f"trainperf-train-{digest}")


def child_environment(job: ChildJob) -> dict[str, str]:
    """The child's environment: this process's, with the variables that let the case's
    precision alone decide float32 math (trainperf.case.precision.FP32_MATH_ENV), the job's own
    (a JAX case's, trainperf.system.jax_environment) and this process's id (the lifeline)."""
    return os.environ | FP32_MATH_ENV | dict(job.env) | {PARENT_PID_ENV: str(os.getpid())}


def child_command(
    job: ChildJob, case_path: Path, result_path: Path, rendezvous: str | None = None
) -> list[str]:
    """The worker itself, or torchrun running one worker per process."""
    if not job.torchrun:
        return worker_command(case_path, result_path)
    from trainperf.parallel.torchrun import torchrun_command

    return torchrun_command(
        [str(case_path), str(result_path)],
        job.processes_per_node,
        job.nodes,
        rendezvous,
        job.job_id,
    )


def run_in_child(
    case: Case, workdir: Path, stop: StopFlag | None = None, rendezvous: str | None = None
) -> dict[str, Any]:
    """Run one case in a fresh process (or torchrun job) and return its result document.

    Raises ``Interrupted`` (after killing the child's process tree) when ``stop`` is set.
    """
    return run_job(case.model_dump(), ChildJob.of_case(case), workdir, stop, rendezvous)


def run_job(
    document: dict[str, Any],
    job: ChildJob,
    workdir: Path,
    stop: StopFlag | None = None,
    rendezvous: str | None = None,
    on_poll: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Run the worker on ``document`` (a case, or a job naming its ``kind``) as ``job``
    says, within its timeout; return the result document.

    ``on_poll`` is called every ``POLL_S`` while the child runs (a long training run's
    parent reads its progress there)."""
    stop = stop or StopFlag()
    case_path, result_path = workdir / "case.json", workdir / "result.json"
    stderr_path = workdir / "stderr.txt"
    case_path.write_text(strict_json.dumps(document))
    for stale in workdir.glob("result.json*"):
        stale.unlink()
    deadline = time.monotonic() + job.timeout_s if job.timeout_s else None
    what = document.get("case", document)  # what a failure result describes
    env = child_environment(job)
    with stderr_path.open("wb") as stderr:
        # A new session makes the child the leader of its own process group, so a hung
        # case can be killed with everything it started (compiler workers, loaders).
        child = subprocess.Popen(
            child_command(job, case_path, result_path, rendezvous),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
            env=env,
        )
        try:
            returncode = _wait(child, deadline, stop, on_poll)
            if returncode is None:  # out of time: ask the workers where they are stuck
                _request_stacks(child)
        finally:
            if child.poll() is None:  # interrupted, timed out, or the parent failed
                _kill_tree(child)
    if returncode is None:
        message = f"no result after {job.timeout_s:g} s: killed" + _where_stuck(result_path)
        return _failure(Outcome.timeout, what, message, stderr_path)
    if job.torchrun and returncode != 0:
        # The first rank that failed is the cause; the others fail after it (their peer is
        # gone), and rank 0 may have written that second-hand error as RESULT.json.
        cause = _torchrun_root_cause(stderr_path)
        if cause is not None:
            rank, code = cause
            own = result_path if rank == 0 else result_path.with_name(f"result.json.rank{rank}")
            if own.exists() and code >= 0:
                return json.loads(own.read_text())
            return _failure(Outcome.crashed, what, _rank_ended(rank, code), stderr_path)
    if result_path.exists():
        return json.loads(result_path.read_text())
    failed_ranks = sorted(workdir.glob("result.json.rank*"), key=lambda p: int(p.suffix[5:]))
    if failed_ranks:
        return json.loads(failed_ranks[0].read_text())
    return _failure(Outcome.crashed, what, _how_it_ended(returncode), stderr_path)


def _how_it_ended(returncode: int) -> str:
    if returncode < 0:
        return f"killed by signal {signal.Signals(-returncode).name}"
    return f"exited with code {returncode} without writing a result"


def _torchrun_root_cause(stderr_path: Path) -> tuple[int, int] | None:
    """(rank, exit code) of the first failed rank, from torchrun's "Root Cause" report."""
    text = stderr_path.read_text(errors="replace")
    if "Root Cause" not in text:
        return None
    cause = text[text.rfind("Root Cause") :]
    rank = re.search(r"rank\s*:\s*(\d+)", cause)
    code = re.search(r"exitcode\s*:\s*(-?\d+)", cause)
    return (int(rank[1]), int(code[1])) if rank and code else None


def _rank_ended(rank: int, code: int) -> str:
    return f"rank {rank} " + (
        f"killed by signal {signal.Signals(-code).name}"
        if code < 0
        else f"exited with code {code} without writing a result"
    )


def _request_stacks(child: subprocess.Popen) -> None:
    """Send the stack-dump signal to every worker process of the child, and wait a moment."""
    try:
        processes = [psutil.Process(child.pid), *psutil.Process(child.pid).children(True)]
    except psutil.NoSuchProcess:
        return
    for process in processes:
        # Only workers handle the signal; for others (torchrun's agent) it would be fatal.
        with contextlib.suppress(psutil.Error):
            command = process.cmdline()
            # torchrun's own command line names the worker module too: leave the agent be,
            # or it dies and its ranks die with it before they can write their stacks.
            if "trainperf.launch.worker" in command and "torch.distributed.run" not in command:
                process.send_signal(STACK_SIGNAL)
    time.sleep(STACK_WAIT_S)


def _innermost_frame(stack_text: str) -> str | None:
    """'flakynets.py:22 in forward' from a faulthandler dump (innermost frame first)."""
    match = re.search(r'File "([^"]+)", line (\d+) in (\S+)', stack_text)
    if not match:
        return None
    return f"{match[1]}:{match[2]} in {match[3]}"


def _where_stuck(result_path: Path) -> str:
    """Where each process was when time ran out, from stack dumps and phase files.

    A rank whose innermost frame is inside torch waits for the others (in a collective or
    the backward that all-reduces); one stuck in other code is named as the cause.
    """
    stacks = {
        (int(p.suffix[5:]) if p.suffix.startswith(".rank") else None): p.read_text()
        for p in result_path.parent.glob("result.json.stack*")
    }
    phases = {
        int(p.suffix[5:]): p.read_text() for p in result_path.parent.glob("result.json.phase.rank*")
    }
    frames = {rank: _innermost_frame(text) for rank, text in stacks.items()}
    if None in frames:  # one process
        return f"; stuck at {frames[None]}" if frames[None] else ""
    parts = []
    stuck = sorted(r for r, f in frames.items() if f and "/torch/" not in f)
    waiting = sorted(r for r, f in frames.items() if f and "/torch/" in f)
    for rank in stuck:
        parts.append(f"rank {rank} stuck at {frames[rank]}")
    if waiting:
        parts.append(f"rank {', '.join(map(str, waiting))} waiting inside torch")
    silent = sorted(set(phases) - set(frames) | {r for r, f in frames.items() if not f})
    parts += [f"rank {r} in phase {phases.get(r, 'unknown')}" for r in silent]
    return "; " + "; ".join(parts) if parts else ""


def _wait(
    child: subprocess.Popen,
    deadline: float | None,
    stop: StopFlag,
    on_poll: Callable[[], None] | None = None,
) -> int | None:
    """The child's exit code, or None past the deadline; raises Interrupted on a stop."""
    while True:
        stop.raise_if_set()
        if on_poll is not None:
            on_poll()
        timeout = POLL_S if deadline is None else min(POLL_S, deadline - time.monotonic())
        if timeout <= 0:
            return None
        with contextlib.suppress(subprocess.TimeoutExpired):
            return child.wait(timeout=timeout)


def _kill_tree(child: subprocess.Popen) -> None:
    """Kill the child's process group and every descendant: torchrun starts each rank in
    a session of its own, out of reach of the group."""
    try:
        descendants = psutil.Process(child.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        descendants = []
    with contextlib.suppress(ProcessLookupError):  # the group may have exited already
        os.killpg(child.pid, signal.SIGKILL)
    for process in descendants:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    child.wait()
    psutil.wait_procs(descendants, timeout=10)


def _failure(
    made: Callable[[dict[str, Any], str, str], Outcome],
    case: dict[str, Any],
    message: str,
    stderr_path: Path,
) -> dict[str, Any]:
    """The document of a child that ended without a result: ``made`` is Outcome.crashed or
    Outcome.timeout, given the tail of the child's stderr."""
    tail = stderr_path.read_text(errors="replace")[-STDERR_TAIL_CHARS:]
    return made(case, message, tail).document()
