"""The child process that measures one case: ``python -m trainperf.worker CASE.json RESULT.json``.

The parent (trainperf.runner) writes the case as JSON, starts this module in a fresh
process, and reads RESULT.json back; only the parent touches the database. The result is
written atomically (temporary file, then rename), so a worker killed mid-write leaves no
half a result: the parent then records the case as crashed from the exit status.

Result statuses decided here: ``ok``, ``oom`` (device or host memory exhausted, detected
from the exception) and ``error`` (any other exception, with its type, message and
traceback). ``crashed`` and ``timeout`` can only be seen from outside, by the parent.

The worker dies with its parent: a sweep killed with SIGKILL cannot clean up, so each
worker asks Linux to send it SIGKILL when the parent goes (``prctl(PR_SET_PDEATHSIG)``)
instead of measuring on as an orphan and disturbing the next sweep.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

from trainperf.benchmark import RESULT_SCHEMA

# Messages by which PyTorch and the C++ allocators report exhausted memory.
_OOM_MARKERS = (
    "out of memory",
    "can't allocate memory",
    "not enough memory",
    "failed to allocate",
)


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says that device or host memory ran out."""
    import torch

    if isinstance(exc, torch.OutOfMemoryError | MemoryError):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(m in text for m in _OOM_MARKERS)


def measure(case_dict: dict[str, Any]) -> dict[str, Any]:
    """Run the case and return the whole result document, whatever happens inside."""
    result: dict[str, Any] = {"result_schema": RESULT_SCHEMA, "case": case_dict}
    try:
        from trainperf.benchmark import run_case
        from trainperf.case import Case

        outcome = run_case(Case.model_validate(case_dict))
        result |= {"status": "ok", **outcome, "error": None}
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a recorded result
        if isinstance(exc, KeyboardInterrupt):
            raise
        status = "oom" if is_out_of_memory(exc) else "error"
        result |= {
            "status": status,
            "metrics": {},
            "error": {
                "type": type(exc).__name__,
                "message": _oom_sentence(exc) if status == "oom" else _first_line(exc),
                "traceback": traceback.format_exc()[-8000:],
            },
        }
    return result


def _oom_sentence(exc: BaseException) -> str:
    """From the sentence that says memory ran out: allocator messages often start with a
    C++ assertion ('[enforce fail at alloc_cpu.cpp:117] err == 0. DefaultCPUAllocator: ...')."""
    line = _first_line(exc)
    lowered = line.lower()
    found = [lowered.find(m) for m in _OOM_MARKERS if m in lowered]
    if not found:
        return line
    start = line.rfind(". ", 0, min(found))
    return line[start + 2 :] if start >= 0 else line


def _first_line(exc: BaseException, limit: int = 500) -> str:
    """The first line of an exception's message, cut to ``limit`` characters."""
    lines = str(exc).strip().splitlines()
    return lines[0][:limit] if lines else ""


def write_atomically(path: Path, document: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(document))
    os.replace(tmp, path)


# prctl option from <linux/prctl.h>: signal to deliver when the parent process dies.
PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Have the kernel kill this process when the runner that started it dies (Linux)."""
    parent = os.environ.get("TRAINPERF_PARENT_PID")
    if parent is None or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return  # not fatal: the worker still ends when its case does
    if os.getppid() != int(parent):  # the parent died before the request took effect
        os._exit(1)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m trainperf.worker CASE.json RESULT.json", file=sys.stderr)
        return 2
    die_with_parent()
    case_path, result_path = Path(args[0]), Path(args[1])
    result = measure(json.loads(case_path.read_text()))
    write_atomically(result_path, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
