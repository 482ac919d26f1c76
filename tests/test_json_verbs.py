"""Every verb that prints JSON, and every export, gives strict JSON (RFC 8259) on a store
holding every kind trainperf keeps (issue "Results that survive the trip": `results`,
`scaling`, `export` and `run --runs 2 --json` printed Infinity)."""

import csv
import io

import pytest

import store_kinds
from trainperf.core.strict_json import loads

# Each verb's arguments; "{db}" and "{out}" are filled in. `models --json` (half a minute
# over the whole zoo) is run by tests/test_cli.py, under the same strict encoder: the tests
# set TRAINPERF_STRICT_JSON, so a non-finite number raises wherever it is written.
READING_VERBS = [
    "results --json",
    "scaling --json",
    "pareto --json",
    "pareto --all --json",
    "compare --json",
    "compare --json --group-by none",
    "compare {db} {db} --json",
    "report --json --out {out}",
    "isoaccuracy 1 3 --json",
    "predict -m cifarnet --devices 1,2 -b 2 --intra pcie4 --calibrate {db} --json",
    "predict -m resnet50 --device v100-sxm2-16gb --devices 1,8,64 --intra nvlink2 --inter ib-edr "
    "-b 64 --json",
    "system --json",
    "suites --json",
    "catalog --json",
]


@pytest.fixture(scope="module")
def full_store(tmp_path_factory):
    return store_kinds.build(tmp_path_factory.mktemp("full") / "kinds.db", store_kinds.FULL)


def _args(template, **paths):
    return template.format(**paths).split()


@pytest.mark.parametrize("verb", READING_VERBS)
def test_every_json_verb_prints_strict_json(full_store, tmp_path, run_cli, verb):
    args = _args(verb, db=full_store, out=tmp_path / "report")
    if verb.split()[0] not in ("predict", "system", "models", "suites", "catalog"):
        args += ["--db", full_store]
    code, out, err = run_cli(args)
    assert code == 0, err
    document = loads(out)  # NaN or Infinity raise here
    assert document


def test_both_exports_and_import_json_are_strict(full_store, tmp_path, run_cli):
    exported, table = tmp_path / "all.json", tmp_path / "all.csv"
    for file in (exported, table):
        code, _, err = run_cli(["export", "--db", full_store, file])
        assert code == 0, err
    document = loads(exported.read_text())
    assert document["format_version"] >= 4
    rows = list(csv.DictReader(io.StringIO(table.read_text())))
    assert rows and not any(v in ("inf", "nan", "-inf") for row in rows for v in row.values())
    code, out, err = run_cli(["import", exported, "--db", tmp_path / "copy.db", "--json"])
    assert code == 0, err
    assert loads(out)["added"]["results"] == len(document["results"])


def test_a_short_case_of_two_runs_prints_strict_json(tmp_path, run_cli):
    """The issue's first example: two runs of one measured step each."""
    code, out, err = run_cli(
        "run -m cifarnet -b 2 --image-size 16 --steps fixed:1:2 --runs 2 --json --db "
        + str(tmp_path / "r.db")
    )
    assert code == 0, err
    (result,) = loads(out)["results"]
    for run in result["runs"]:
        assert run["metrics"]["samples_per_s_ci95"] is None
        assert "only 1 measured step" in run["metrics"]["ci95_absent_reason"]
    for verb in ("results --json", "scaling --json"):
        code, out, err = run_cli(verb.split() + ["--db", tmp_path / "r.db"])
        assert code == 0, err
        loads(out)
