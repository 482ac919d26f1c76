"""The child process that measures one case:
``python -m trainperf.launch.worker CASE.json RESULT.json``.

The parent (trainperf.launch.runner) writes the case as JSON, starts this module in a fresh
process, and reads RESULT.json back; only the parent touches the database. The result is
written atomically (temporary file, then rename), so a worker killed mid-write leaves no
half a result: the parent then records the case as crashed from the exit status.

A JAX case's worker starts JAX's backend before it imports torch, and never initialises
torch's CUDA; a PyTorch case's worker never imports jax: each framework's CUDA libraries
are the ones its process loads (trainperf.system.jax_environment).

Result statuses decided here (trainperf.case.outcome makes every result document): ``ok``,
``oom`` (device or host memory exhausted, detected from the exception) and ``error`` (any
other exception, with its type, message and traceback). ``crashed`` and ``timeout`` can
only be seen from outside, by the parent.

The worker dies with its parent (trainperf.parallel.lifeline). Under torchrun (a ddp case) every
rank runs this module: rank 0 gathers the measurements and writes RESULT.json. A rank that
fails writes its own result next to it (RESULT.json.rankN) and exits with code 1, so that
torchrun ends the job at once instead of leaving the other ranks waiting in a collective.
Each rank also keeps a one-line PHASE file (RESULT.json.phase.rankN: building, measuring,
...), and dumps its Python stack into RESULT.json.stack[.rankN] on SIGUSR1 (faulthandler:
it works while the main thread is stuck in C code): before killing a case that ran out of
time, the runner asks for these to say where each process was stuck.
"""

from __future__ import annotations

import faulthandler
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from trainperf.case.modes import launch_kind
from trainperf.case.outcome import Outcome
from trainperf.core import strict_json
from trainperf.core.fileio import write_atomic
from trainperf.micro import KINDS as MICRO_KINDS
from trainperf.parallel.group import Ranks
from trainperf.parallel.lifeline import STACK_SIGNAL, die_with_parent
from trainperf.parallel.torchrun import torchrun_rank


def measure(
    case_dict: dict[str, Any], on_phase: Callable[[str], None] = lambda phase: None
) -> dict[str, Any] | None:
    """Run the case and return the whole result document, whatever happens inside.

    None on a rank other than 0 of a distributed case that ran well (rank 0 reports).
    """

    def benchmark() -> dict[str, Any] | None:
        if launch_kind(case_dict) == "jax":
            # Before trainperf.case.spec imports torch: JAX loads its own CUDA libraries first.
            from trainperf.system.jax_environment import start_jax

            start_jax()
        from trainperf.case.spec import Case

        case = Case.model_validate(case_dict)
        if case.launch == "jax":
            from trainperf.jax.benchmark import run_jax_case

            return run_jax_case(case, on_phase)
        if case.launch == "torchrun":
            from trainperf.step.rank_case import run_distributed_case

            return run_distributed_case(case, on_phase)
        from trainperf.step.benchmark import run_case

        return run_case(case, on_phase)

    return guarded(case_dict, benchmark)


def guarded(
    case_dict: dict[str, Any], body: Callable[[], dict[str, Any] | None]
) -> dict[str, Any] | None:
    """The result document of ``body()`` (its keys merged in, status ok) or of its failure."""
    try:
        outcome = body()
        if outcome is None:
            return None
        return Outcome.ok(case_dict, outcome).document()
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a recorded result
        if isinstance(exc, KeyboardInterrupt):
            raise
        failure = Outcome.from_exception(case_dict, exc)
        rank = torchrun_rank()
        return (failure if rank is None else failure.on_rank(rank)).document()


def _micro(document: dict[str, Any], workdir: Path) -> dict[str, Any] | None:
    from trainperf.micro import run_document as run_micro

    return guarded(document, lambda: run_micro(document, workdir))


def _profile(document: dict[str, Any], workdir: Path) -> dict[str, Any] | None:
    from trainperf.case.spec import Case
    from trainperf.profile.breakdown import profile_case

    def profile() -> dict[str, Any] | None:
        case = Case.model_validate(document["case"])
        if case.launch == "torchrun":  # every rank profiles; rank 0 reports
            from trainperf.profile.ranks import run_distributed_profile

            return run_distributed_profile(case, document["steps"], document["warmup"])
        return profile_case(case, document["steps"], document["warmup"])

    return guarded(document["case"], profile)


def _train(document: dict[str, Any], workdir: Path) -> dict[str, Any] | None:
    from trainperf.convergence.job import run_training

    return guarded(document["config"], lambda: run_training(document, workdir))


def _equivalence(document: dict[str, Any], workdir: Path) -> dict[str, Any] | None:
    from trainperf.launch.equivalence import run_part

    return guarded(document["case"], lambda: run_part(document, workdir))


# What the child runs for a document of each ``kind``, returning the result document;
# ``workdir`` is the job's folder. A document without a kind is a benchmark case.
JOBS: dict[str, Callable[[dict[str, Any], Path], dict[str, Any] | None]] = {
    **dict.fromkeys(MICRO_KINDS, _micro),
    "profile": _profile,
    "train": _train,
    "equivalence": _equivalence,
}


def run_document(
    document: dict[str, Any], workdir: Path, on_phase: Callable[[str], None] = lambda phase: None
) -> dict[str, Any] | None:
    """The result document of ``document`` (a case, or a job of a kind in JOBS), whatever
    happens inside; None on a rank other than 0 that ran well."""
    kind = document.get("kind")
    if kind is None:
        return measure(document, on_phase)
    if kind in JOBS:
        return JOBS[kind](document, workdir)

    def unknown() -> NoReturn:
        raise ValueError(f"unknown job kind '{kind}': allowed {', '.join(JOBS)}")

    return guarded(document, unknown)


def write_atomically(path: Path, document: dict[str, Any]) -> None:
    """Write ``document`` as JSON: the runner reads the whole file or none of it."""
    write_atomic(path, strict_json.dumps(document))


def rank_file(result_path: Path, rank: int, kind: str = "") -> Path:
    """Where rank ``rank`` writes its failure (kind "") or its phase (kind "phase")."""
    infix = f".{kind}" if kind else ""
    return result_path.with_name(f"{result_path.name}{infix}.rank{rank}")


def dump_stack_on_request(path: Path) -> None:
    """Write this process's Python stack to ``path`` when it receives STACK_SIGNAL."""
    handle = path.open("w")  # kept open for the life of the process
    # all_threads: the kernel may hand the signal to a thread of torch or gloo, not to the
    # main thread, and the current thread alone would then show no Python frame.
    faulthandler.register(STACK_SIGNAL, file=handle, all_threads=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m trainperf.launch.worker CASE.json RESULT.json", file=sys.stderr)
        return 2
    die_with_parent()
    case_path, result_path = Path(args[0]), Path(args[1])
    document = json.loads(case_path.read_text())
    rank = torchrun_rank()
    dump_stack_on_request(
        rank_file(result_path, rank, "stack")
        if rank is not None
        else result_path.with_name(result_path.name + ".stack")
    )

    def on_phase(phase: str) -> None:
        if rank is not None:
            rank_file(result_path, rank, "phase").write_text(phase)

    result = run_document(document, result_path.parent, on_phase)
    if rank is None:
        write_atomically(result_path, result)  # type: ignore[arg-type]
        return 0
    if result is None:
        if Ranks.from_env().local_rank == 0:
            # This node's trainperf hears that the result lives with rank 0, on another node.
            follower = {"follower": True, "rank": rank, "case": document.get("case", document)}
            write_atomically(result_path, follower)
        return 0
    write_atomically(result_path if rank == 0 else rank_file(result_path, rank), result)
    # A failed rank must end the job: torchrun stops the other ranks when one exits non-zero.
    return 0 if result["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
