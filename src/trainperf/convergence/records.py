"""Time-to-accuracy runs in the results store (table ``train_runs``, schema v5).

A run is stored when it starts (status ``running``) and updated after every evaluation, so
an interrupted or killed run keeps what it reached; the final status replaces ``running``:
``ok`` (finished: target reached or epoch limit), ``aborted`` (stopped by the user),
``timeout``, ``crashed``, ``oom``, ``diverged`` (the training loss stopped being finite) or
``error``.

``config_key`` groups the runs that repeat one configuration (every field except the seed
and the logging paths): the olympic mean of ``trainperf train --runs`` is taken over them.
A field added since runs were first stored (``ADDED_TRAIN_FIELDS``: optimizer, momentum,
weight decay, nodes) counts only away from the value every earlier run trained with, so an
old run and a new one of the same configuration share their key.
The SQL lives in ``trainperf.store.database`` (``Store.add_train_run`` and its siblings),
like that of every other table; this module says what a run is and how runs are grouped.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from trainperf.case.stored import ADDED_TRAIN_FIELDS
from trainperf.store.database import Store

NOT_IN_KEY = ("seed", "mllog")


def config_key(config: dict[str, Any]) -> str:
    """16 hex of SHA-256 over the configuration's fields that define it (module doc)."""
    added = ADDED_TRAIN_FIELDS.items()
    kept = {k: v for k, v in config.items() if k not in NOT_IN_KEY and (k, v) not in added}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


def start_run(
    store: Store,
    system: dict[str, Any],
    config: dict[str, Any],
    identity: tuple[str, str] | None = None,
) -> int:
    """Register a run that is starting; return its id. ``identity``: the (uid,
    created_at) of the row another store holds for it (``Store.add_train_run``)."""
    return store.add_train_run(system, config, config_key(config), identity)
