"""Runs cases, each in its own child process, and stores every result as it arrives.

The parent never imports a model or touches a device: a case that exhausts memory,
segfaults or hangs takes only its own process down. Protocol with trainperf.worker:
the case as JSON in a file, the result as JSON in another; the child's stderr goes to a
file whose tail is kept when the child dies without a result.

Statuses added here: ``crashed`` (exited or was killed without writing a result: the exit
code or signal and the tail of stderr are kept) and ``timeout`` (ran past the case's
``timeout_s``: the child's whole process group is killed).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from trainperf.benchmark import RESULT_SCHEMA
from trainperf.case import Case
from trainperf.store import Store

STDERR_TAIL_CHARS = 4000


def worker_command(case_path: Path, result_path: Path) -> list[str]:
    """The child's command line: this interpreter running trainperf.worker."""
    return [sys.executable, "-m", "trainperf.worker", str(case_path), str(result_path)]


def run_in_child(case: Case, workdir: Path) -> dict[str, Any]:
    """Run one case in a fresh process and return its result document."""
    case_path, result_path = workdir / "case.json", workdir / "result.json"
    stderr_path = workdir / "stderr.txt"
    case_path.write_text(json.dumps(case.model_dump()))
    result_path.unlink(missing_ok=True)
    with stderr_path.open("wb") as stderr:
        # A new session makes the child the leader of its own process group, so a hung
        # case can be killed with everything it started (compiler workers, loaders).
        child = subprocess.Popen(
            worker_command(case_path, result_path),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
        try:
            returncode = child.wait(timeout=case.timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(child)
            return _failure(
                case, "timeout", f"no result after {case.timeout_s:g} s: killed", stderr_path
            )
    if result_path.exists():
        return json.loads(result_path.read_text())
    if returncode < 0:
        how = f"killed by signal {signal.Signals(-returncode).name}"
    else:
        how = f"exited with code {returncode} without writing a result"
    return _failure(case, "crashed", how, stderr_path)


def _kill_group(child: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group may have exited already
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def _failure(case: Case, status: str, message: str, stderr_path: Path) -> dict[str, Any]:
    tail = stderr_path.read_text(errors="replace")[-STDERR_TAIL_CHARS:]
    return {
        "result_schema": RESULT_SCHEMA,
        "status": status,
        "case": case.model_dump(),
        "device": None,
        "metrics": {},
        "error": {"type": status, "message": message, "stderr_tail": tail},
    }


def run_cases(
    cases: Sequence[Case],
    store: Store,
    system: dict[str, Any],
    *,
    on_start: Callable[[int, Case], None] = lambda i, c: None,
    on_result: Callable[[int, dict[str, Any]], None] = lambda i, r: None,
    label: str | None = None,
) -> list[dict[str, Any]]:
    """Run ``cases`` one after another, storing each result as soon as it is known."""
    run_id = store.start_run(system, label)
    results = []
    with tempfile.TemporaryDirectory(prefix="trainperf-") as tmp:
        for index, case in enumerate(cases):
            on_start(index, case)
            result = run_in_child(case, Path(tmp))
            result["id"] = store.add_result(run_id, system["fingerprint"], result)
            result["run_id"] = run_id
            result["system"] = system
            results.append(result)
            on_result(index, result)
    return results
