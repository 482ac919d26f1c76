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
