"""The document of ``trainperf results --json``, written as it is read.

    {"systems": {FINGERPRINT: system record (as ``trainperf system --json``), ...},
     "results": [{id, uid, sweep_id, created_at, status, result_schema, case, device,
                  metrics, error, suite, suite_version, case_key,
                  system: FINGERPRINT,
                  runs: [{id, uid, sweep_id, system, created_at, result_uid,
                          suite_version, case_key, run_number, status, result_schema,
                          case, device, metrics, error}, ...]}, ...]}

Each system of the results listed appears once, under its fingerprint, and each result
names it (``document["systems"][result["system"]]["hostname"]``). The results come in
``--sort`` order, chosen by the filter (``trainperf.store_query``); a run's per-step lists
(``STEP_LISTS``: ``step_s``, ``warmup_step_s``, ...) are there only with ``--steps``. The
results are written one per line as they are read from the database
(``strict_json.write_object``), so that a store of any size is listed in bounded memory.
"""

from __future__ import annotations

from typing import TextIO

from trainperf import strict_json
from trainperf.store_query import Selection


def write_results(selection: Selection, out: TextIO) -> int:
    """Write the document of ``selection`` to ``out``; return the number of results."""
    systems = {
        fingerprint: selection.systems[fingerprint] for fingerprint in selection.fingerprints
    }
    results = ({**r, "system": r["system"]["fingerprint"]} for r in selection)
    return strict_json.write_object(out, [("systems", systems), ("results", results)])["results"]
