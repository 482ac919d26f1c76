"""The cheap verbs start without the heavy libraries (issue 35, "Fast to start").

The verbs run one after another in one fresh interpreter (this test process already holds
torch), through ``trainperf.cli.main``; after each, torch and scipy.stats must still be
unimported: importing either again at module level costs a second or more of every
``--help``. benchmarks/startup.py times them.
"""

from __future__ import annotations

import json
import subprocess
import sys

from report_fixture import build

HEAVY = ("torch", "scipy.stats")
VERBS = ("--help", "suites", "results", "compare", "pareto", "scaling", "run nosuchsuite")

PROBE = """
import json, sys
from trainperf.cli import main
seen = []
for args in json.loads(sys.argv[1]):
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code
    seen.append([code, [m for m in sys.argv[2:] if m in sys.modules]])
print(json.dumps(seen), file=sys.stderr)
"""


def test_the_cheap_verbs_import_neither_torch_nor_scipy_stats(tmp_path):
    db = tmp_path / "two.db"
    build(db)
    runs = [v.split() + ([] if v in ("--help", "suites") else ["--db", str(db)]) for v in VERBS]
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(runs), *HEAVY],
        capture_output=True,
        text=True,
        timeout=120,
    )
    seen = json.loads(proc.stderr.strip().splitlines()[-1])
    for verb, (code, heavy) in zip(VERBS, seen, strict=True):
        assert heavy == [], f"trainperf {verb} imported {heavy}"
        assert code == (2 if verb.startswith("run") else 0), (verb, proc.stderr)
