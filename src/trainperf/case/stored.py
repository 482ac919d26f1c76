"""How a case stored by an earlier trainperf reads today: the fields added since, with the
value every result stored before them had. Decided here, beside the case, and applied by
the store (trainperf.store.rows) and by suites (trainperf.case.suite).
"""

from __future__ import annotations

from typing import Any

# Case fields added after results were first stored, with the value every result stored
# before them had (trainperf.case.spec.Case's default): a stored case lacking one reads as that,
# so old and new results of one workload meet in comparisons and scaling baselines.
ADDED_CASE_FIELDS: dict[str, Any] = {
    "framework": "pytorch",
    "reshard_after_forward": True,
    "fsdp_reduce": "fp32",
    "activation_checkpointing": "none",
}


def as_stored_now(case: dict[str, Any]) -> dict[str, Any]:
    """A stored case with the fields added since it was stored (``ADDED_CASE_FIELDS``)."""
    return ADDED_CASE_FIELDS | case


# Fields of a time-to-accuracy run's configuration (trainperf.case.training.TrainConfig)
# that ``trainperf train`` began to store after runs were first stored, with the value every
# run stored before them trained with (the trainer's defaults then): a stored configuration
# lacking one reads as that, and its ``config_key`` (trainperf.convergence.records) counts
# it only away from that value, so old and new runs of one configuration stay one group.
ADDED_TRAIN_FIELDS: dict[str, Any] = {
    "optimizer": None,  # the model's own: SGD for the CNNs, AdamW for the language models
    "momentum": 0.9,
    "weight_decay": 5e-4,
    "nodes": 1,
}


def train_config_as_stored_now(config: dict[str, Any]) -> dict[str, Any]:
    """A stored training configuration with the fields added since (``ADDED_TRAIN_FIELDS``)."""
    return ADDED_TRAIN_FIELDS | config
