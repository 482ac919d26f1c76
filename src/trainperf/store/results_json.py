"""The document of ``trainperf results --json``, written as it is read.

    {"systems": {FINGERPRINT: system record (as ``trainperf system --json``), ...},
     "results": [{id, uid, sweep_id, created_at, status, result_schema, case, device,
                  metrics, error, suite, suite_version, case_key,
                  system: FINGERPRINT,
                  runs: [{id, uid, sweep_id, system, created_at, result_uid,
                          suite_version, case_key, run_number, status, result_schema,
                          case, device, metrics, error}, ...]}, ...],
     "sweeps": {SWEEP_ID: {"doctor": the doctor's verdict on the machine as the sweep
                           started (trainperf.doctor), or null}, ...}}

Each system of the results listed appears once, under its fingerprint, and each result
names it (``document["systems"][result["system"]]["hostname"]``). The results come in
``--sort`` order, chosen by the filter (``trainperf.store.query``); a run's per-step lists
(``STEP_LISTS``: ``step_s``, ``warmup_step_s``, ...) are there only with ``--per-step``. The
results are written one per line as they are read from the database
(``strict_json.write_object``), so that a store of any size is listed in bounded memory;
the sweeps they name follow them, each once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TextIO

from trainperf.core import strict_json
from trainperf.store.query import Selection, doctor_verdicts


def write_results(selection: Selection, out: TextIO) -> int:
    """Write the document of ``selection`` to ``out``; return the number of results."""
    return strict_json.write_object(out, _fields(selection))["results"]


def _fields(selection: Selection) -> Iterator[tuple[str, Any]]:
    systems = {
        fingerprint: selection.systems[fingerprint] for fingerprint in selection.fingerprints
    }
    yield "systems", systems
    sweep_ids: dict[str, None] = {}

    def results() -> Iterator[dict[str, Any]]:
        for result in selection:
            sweep_ids[result["sweep_id"]] = None
            yield {**result, "system": result["system"]["fingerprint"]}

    yield "results", results()
    # after the results are written: the sweeps they named are known only then
    verdicts = doctor_verdicts(selection.connection, sweep_ids)
    yield "sweeps", {sweep_id: {"doctor": verdict} for sweep_id, verdict in verdicts.items()}
