"""Time-to-accuracy runs in the results store (table ``train_runs``, schema v5).

A run is stored when it starts (status ``running``) and updated after every evaluation, so
an interrupted or killed run keeps what it reached; the final status replaces ``running``:
``ok`` (finished: target reached or epoch limit), ``aborted`` (stopped by the user),
``timeout``, ``crashed``, ``oom`` or ``error``.

``config_key`` groups the runs that repeat one configuration (every field except the seed
and the logging paths): the olympic mean of ``trainperf train --runs`` is taken over them.
The SQL lives in ``trainperf.store`` (``Store.add_train_run`` and its siblings), like that of
every other table; this module says what a run is and how runs are grouped.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from trainperf.store import Store

NOT_IN_KEY = ("seed", "mllog")


def config_key(config: dict[str, Any]) -> str:
    kept = {k: v for k, v in config.items() if k not in NOT_IN_KEY}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


def start_run(store: Store, system: dict[str, Any], config: dict[str, Any]) -> int:
    """Register a run that is starting; return its id."""
    return store.add_train_run(system, config, config_key(config))


def update_run(
    store: Store,
    run_id: int,
    evaluations: list[dict[str, Any]],
    *,
    status: str | None = None,
    reached: bool = False,
    time_to_target_s: float | None = None,
    metrics: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
) -> None:
    """Record the evaluations so far and, when the run has ended, its outcome."""
    store.update_train_run(
        run_id,
        evaluations,
        status=status,
        reached=reached,
        time_to_target_s=time_to_target_s,
        metrics=metrics,
        error=error,
    )


def load_runs(store: Store, key: str | None = None) -> list[dict[str, Any]]:
    """Stored runs, oldest first; only those of one configuration when ``key`` is given."""
    return store.train_runs(key)


def load_run(store: Store, ref: str) -> dict[str, Any] | None:
    """The run with id ``ref`` (a number) or uid (or a unique uid prefix of 6+ hex)."""
    return store.train_run(ref)
