"""Where the wall-clock time to the target went: start-up, training, data loading, evaluation.

MLPerf's time to train starts at run start, after initialisation. A reader of "time to
accuracy" also wants the time a user waits, so a run reports, on rank 0 (its own clock,
not a maximum over ranks)::

    total_s        = startup_s + clock_s
    startup_s      = run start - process launch   (interpreter, torch, rendezvous, model,
                                                   loaders, DDP wrapping, the first barrier)
    data_loading_s = sum over epochs of the time blocked in next() on the training loader
    evaluation_s   = sum over evaluations of their time (their data loading included)
    training_s     = clock_s - data_loading_s - evaluation_s
                     (the steps: forward, backward, optimizer, the copy to the device,
                     and the bookkeeping between them)

``clock_s`` is MLPerf's time: to the evaluation that reached the target (``until``
"target"), or to the end of a run that did not (``until`` "end"). The four parts add up
to ``total_s``. A part that cannot be measured (the wall clock stepped back between launch
and run start) is null with ``<part>_absent_reason``, and so is the total.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

PARTS = ("startup_s", "training_s", "data_loading_s", "evaluation_s")


def time_split(
    startup_s: float,
    startup_from: str,
    clock_s: float,
    reached: bool,
    epochs: Sequence[dict[str, Any]],
    evaluations: Sequence[dict[str, Any]],
) -> dict[str, Any]:
    """The split (module doc) of a run whose epochs and evaluations all fall inside
    ``clock_s``; ``startup_from`` says where start-up began ("process launch", or
    "train() call" when the trainer was called without a launch time)."""
    data_s = sum(e["data_wait_s"] for e in epochs)
    evaluation_s = sum(e["eval_s"] for e in evaluations)
    split: dict[str, Any] = {
        "until": "target" if reached else "end",
        "measured_on": "rank 0",
        "startup_from": startup_from,
        "total_s": startup_s + clock_s,
        "startup_s": startup_s,
        "training_s": clock_s - data_s - evaluation_s,
        "data_loading_s": data_s,
        "evaluation_s": evaluation_s,
    }
    if startup_s < 0:
        back = f"{-startup_s:.3f} s"
        reason = f"the wall clock stepped back {back} between {startup_from} and run start"
        for key in ("total_s", "startup_s"):
            split[key] = None
            split[f"{key}_absent_reason"] = reason
    return split
