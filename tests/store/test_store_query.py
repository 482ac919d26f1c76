"""Results read by one filter, in SQL, streamed (trainperf.store.query; issue 34, items 1-3):
every flag selects what it says in every verb, bad values are one line, `results --json`
lists each system once and per-step lists only with --steps, the documents are read as
they are consumed, and an import looks up only the keys it refers to."""

import json
import sqlite3
from datetime import datetime

import pytest

from report_fixture import build
from trainperf.store import exchange
from trainperf.store import query as store_query
from trainperf.store import rows as store_rows
from trainperf.store.database import Store
from trainperf.store.query import STEP_LISTS, FilterError, ResultFilter

DAYS = ("2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04", "2026-11-05")
VERBS = ("results", "compare", "scaling", "pareto", "report", "export")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """The two-system fixture with its results spread over five days (one written with
    another UTC offset) and a third of them in the suite 'nightly': (path, facts)."""
    path = tmp_path_factory.mktemp("lab") / "lab.db"
    facts = build(path, hostile_model=False)
    db = sqlite3.connect(path)
    for (number,) in db.execute("SELECT id FROM results").fetchall():
        when = f"{DAYS[(number * 3) % 5]}T12:00:00+00:00"
        suite = "nightly" if number % 3 == 0 else None
        db.execute(
            "UPDATE results SET created_at = ?, suite = ? WHERE id = ?", (when, suite, number)
        )
    # 2026-11-03T23:00Z written from a clock two hours ahead of UTC
    db.execute("UPDATE results SET created_at = '2026-11-04T01:00:00+02:00' WHERE id = 1")
    db.commit()
    db.close()
    return path, facts


def stored(path):
    """Every result as plain facts, read with SQL of the test's own (the oracle)."""
    db = sqlite3.connect(path)
    rows = db.execute(
        "SELECT r.id, r.uid, r.system, s.hostname, r.model, r.status, r.created_at, r.suite,"
        " r.metrics_json FROM results r JOIN systems s ON s.fingerprint = r.system"
    ).fetchall()
    db.close()
    names = ("id", "uid", "system", "hostname", "model", "status", "created_at", "suite")
    facts = []
    for row in rows:
        fact = dict(zip(names, row[:-1], strict=True))
        fact["time"] = datetime.fromisoformat(fact["created_at"])
        fact["samples_per_s"] = json.loads(row[-1]).get("samples_per_s_median")
        facts.append(fact)
    return facts


def expected(path, keep=lambda r: True, key=lambda r: (r["time"], r["id"]), limit=None):
    chosen = sorted((r for r in stored(path) if keep(r)), key=key)
    return [r["uid"] for r in chosen[:limit]]


def listed(run_cli, path, *flags):
    code, out, err = run_cli(["results", "--json", "--db", path, *flags])
    assert code == 0, err
    return [r["uid"] for r in json.loads(out)["results"]]


def test_the_default_order_is_oldest_first_whatever_the_order_stored(lab, run_cli):
    path, _ = lab
    uids = listed(run_cli, path)
    assert uids == expected(path) and len(uids) == len(stored(path))
    assert uids != [r["uid"] for r in sorted(stored(path), key=lambda r: r["id"])]


def test_each_flag_selects_what_it_says(lab, run_cli):
    path, facts = lab
    host_b, fp_a = facts["hostnames"]["b"], facts["systems"]["a"]
    since = datetime.fromisoformat("2026-11-04T00:00:00+00:00")
    cases = [
        (["--system", host_b], lambda r: r["hostname"] == host_b),
        (["-s", fp_a], lambda r: r["system"] == fp_a),
        (["--system", f"{host_b},{fp_a}"], lambda r: True),
        (["-m", "cifarnet"], lambda r: r["model"] == "cifarnet"),
        (
            ["--model", "cifarnet", "-m", "resnet18"],
            lambda r: r["model"] in ("cifarnet", "resnet18"),
        ),
        (["--status", "ok"], lambda r: r["status"] == "ok"),
        (["--status", "oom,timeout"], lambda r: r["status"] in ("oom", "timeout")),
        (["--since", "2026-11-04"], lambda r: r["time"] >= since),
        (["--since", "2026-11-04T02:00+02:00"], lambda r: r["time"] >= since),
        (["--suite", "nightly"], lambda r: r["suite"] == "nightly"),
    ]
    for flags, keep in cases:
        want = expected(path, keep)
        assert want, flags  # the fixture has results for each
        assert listed(run_cli, path, *flags) == want, flags
    # The result written at 01:00+02:00 on the 4th is from the 3rd in UTC.
    assert stored(path)[0]["uid"] not in listed(run_cli, path, "--since", "2026-11-04")


def test_filters_combine_and_limit_applies_after_sorting(lab, run_cli):
    path, facts = lab
    host_b = facts["hostnames"]["b"]

    def speed(r):
        return (r["samples_per_s"] is None, -(r["samples_per_s"] or 0), r["time"], r["id"])

    both = listed(run_cli, path, "--status", "ok", "--system", host_b, "--sort", "-samples_per_s")
    assert both == expected(path, lambda r: r["status"] == "ok" and r["hostname"] == host_b, speed)
    fastest = listed(run_cli, path, "--sort", "-samples_per_s", "--limit", "3")
    assert fastest == expected(path, key=speed, limit=3)
    newest = listed(run_cli, path, "--sort", "-created_at", "--limit", "2")
    assert newest == expected(path, key=lambda r: (r["time"], r["id"]))[::-1][:2]
    by_model = listed(run_cli, path, "--sort", "model", "--status", "ok")
    model_key = lambda r: (r["model"], r["time"], r["id"])  # noqa: E731
    assert by_model == expected(path, lambda r: r["status"] == "ok", model_key)
    assert listed(run_cli, path, "--model", "nosuchmodel") == []


def test_every_verb_selects_the_same_results(lab, run_cli, tmp_path):
    path, facts = lab
    flags = ["--system", facts["hostnames"]["b"], "--since", "2026-11-02", "-m", "cifarnet"]
    chosen = listed(run_cli, path, *flags)
    ids = {r["uid"]: r["id"] for r in stored(path)}
    chosen_ids = {ids[uid] for uid in chosen}
    ok_ids = {ids[uid] for uid in listed(run_cli, path, *flags, "--status", "ok")}
    assert len(ok_ids) > 1 and len(chosen_ids) > len(ok_ids)

    code, _, err = run_cli(["export", tmp_path / "x.json", "--db", path, *flags])
    assert code == 0, err
    document = json.loads((tmp_path / "x.json").read_text())
    assert [r["uid"] for r in document["results"]] == chosen
    code, _, err = run_cli(["export", tmp_path / "x.csv", "--db", path, *flags])
    assert code == 0, err
    lines = (tmp_path / "x.csv").read_text().splitlines()[1:]
    assert [int(line.split(",")[0]) for line in lines] == [ids[uid] for uid in chosen]

    def run_json(verb, *more):
        code, out, err = run_cli([verb, "--db", path, "--json", *flags, *more])
        assert code == 0, err
        return json.loads(out)

    compared = run_json("compare")
    found = {e["result_id"] for c in compared["cases"] for e in c["per_system"].values()}
    assert found - {None} <= chosen_ids
    rows = run_json("scaling")["rows"]
    assert rows and {r["result_id"] for r in rows} <= ok_ids
    fronts = run_json("pareto")["fronts"]
    assert fronts and {p["result_id"] for f in fronts for p in f["points"]} <= ok_ids
    summary = run_json("report", "--out", tmp_path / "site")
    assert summary["results"] == len(chosen) and summary["systems"] == 1


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--status", "great"], "--status 'great' is not a status of a result: allowed ok,"),
        (["--since", "yesterday"], "--since 'yesterday' is not an ISO 8601 date or time"),
        (["--sort", "speed"], "--sort 'speed' is not valid: allowed created_at, model"),
        (["--limit", "0"], "positive integer"),
        (["--suite", " "], "--suite is empty"),
        (["--system", "nowhere"], "no system 'nowhere' in "),
    ],
)
def test_a_bad_filter_is_one_line_and_exit_2_in_every_verb(
    lab, run_cli, tmp_path, verb, flags, message
):
    path, _ = lab
    args = [verb, "--db", path, *flags]
    if verb == "export":
        args.insert(1, tmp_path / "x.json")
    if verb == "report":
        args += ["--out", tmp_path / "site"]
    code, out, err = run_cli(args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err, err
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_the_filter_is_checked_when_made():
    with pytest.raises(FilterError, match="--status 'fine'"):
        ResultFilter(status=("fine",))
    with pytest.raises(FilterError, match="expected a tuple of names"):
        ResultFilter(model="resnet50")
    with pytest.raises(FilterError, match="UTC offset"):
        ResultFilter(since=datetime(2026, 11, 1))
    with pytest.raises(FilterError, match="--limit must be a positive integer"):
        ResultFilter(limit=True)
    parsed = ResultFilter.parse(system=["a,b", "a"], status=["OK"], since="2026-11-01T09:30")
    assert parsed.system == ("a", "b") and parsed.status == ("ok",)
    assert parsed.since.isoformat() == "2026-11-01T09:30:00+00:00"
    assert parsed.words() == "--system a,b --status ok --since 2026-11-01T09:30:00+00:00"
    assert ResultFilter().ok_only().status == ("ok",)
    assert ResultFilter(status=("oom",)).ok_only().status == ("oom",)  # then no ok result


def test_results_json_lists_each_system_once_and_steps_only_when_asked(lab, run_cli):
    path, facts = lab
    code, out, err = run_cli(["results", "--json", "--db", path])
    assert code == 0, err
    document = json.loads(out)
    assert list(document) == ["systems", "results", "sweeps"]
    assert set(document["systems"]) == set(facts["systems"].values())
    assert set(document["sweeps"]) == {r["sweep_id"] for r in document["results"]}
    for fingerprint, record in document["systems"].items():
        assert record["fingerprint"] == fingerprint and record["hostname"]
    assert {r["system"] for r in document["results"]} == set(document["systems"])
    runs = [run for r in document["results"] for run in r["runs"]]
    assert runs and not any(key in run["metrics"] for run in runs for key in STEP_LISTS)

    code, out, err = run_cli(["results", "--json", "--per-step", "--db", path])
    assert code == 0, err
    full = json.loads(out)
    with Store(path) as store:  # every field as stored, the system record apart
        as_stored = store.results()
    assert [r | {"system": r["system"]["fingerprint"]} for r in as_stored] == full["results"]
    assert any("step_s" in run["metrics"] for r in full["results"] for run in r["runs"])
    for short, whole in zip(document["results"], full["results"], strict=True):
        for run, whole_run in zip(short["runs"], whole["runs"], strict=True):
            kept = {k: v for k, v in whole_run["metrics"].items() if k not in STEP_LISTS}
            assert run["metrics"] == kept  # cut in SQL, nothing else touched
        assert short | {"runs": []} == whole | {"runs": []}

    code, out, _ = run_cli(["results", "--json", "--db", path, "-s", facts["systems"]["a"]])
    assert list(json.loads(out)["systems"]) == [facts["systems"]["a"]]
    code, _, err = run_cli(["results", "--per-step", "--db", path])
    assert code == 2 and "--per-step goes with --json" in err


def test_documents_are_read_as_they_are_consumed(lab, run_cli, monkeypatch):
    """`results --json` writes each result before the next chunk is read."""
    path, _ = lab
    monkeypatch.setattr(store_query, "CHUNK", 2)
    reads = []
    documents = store_query.documents

    def counted(*args, **kwargs):
        reads.append(len(args[1]))
        return documents(*args, **kwargs)

    monkeypatch.setattr(store_query, "documents", counted)
    written = []

    class Out:
        def write(self, text):
            written.append(('"runs":' in text, len(reads)))  # a result, or other text

    from trainperf.store.results_json import write_results

    with Store.read_only(path) as store:
        selection = store.select(runs=True)
        assert reads == []  # selected: ids only, nothing decoded yet
        count = write_results(selection, Out())
    assert count == len(selection) > 4 and sum(reads) == count
    results_written = 0
    for is_result, chunks_read in written:
        results_written += is_result
        assert chunks_read <= results_written // 2 + 1
    assert results_written == count


def test_a_store_is_read_in_place_not_copied(lab, monkeypatch):
    path, _ = lab

    def refuse(*args):
        raise AssertionError("copied")

    monkeypatch.setattr(Store, "copy_of", classmethod(refuse))
    with Store.read_only(path) as store:
        (main,) = [row[2] for row in store.db.execute("PRAGMA database_list") if row[1] == "main"]
        assert main == str(path.resolve())
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            store.add_system({"fingerprint": "x", "hostname": "x"})


def test_an_import_into_a_full_store_reads_no_stored_result(lab, tmp_path, monkeypatch):
    """References to rows already in the store are looked up by key, in SQL."""
    path, facts = lab
    target = tmp_path / "target.db"
    target.write_bytes(path.read_bytes())
    with Store(target) as store:
        document = exchange.export_document(store)
    result = next(r for r in document["results"] if r["system"] == facts["systems"]["a"])
    runs = [
        dict(run, uid="f" * 32) for run in document["runs"] if run["result_uid"] == result["uid"]
    ]
    partial = dict(document, systems=[], sweeps=[], results=[], micro=[], max_batch=[])
    partial |= {"train_runs": [], "runs": runs[:1]}  # its system, sweep and result: in target

    def refuse(*args, **kwargs):
        raise AssertionError("a stored result was decoded")

    monkeypatch.setattr(store_query, "result_document", refuse)
    monkeypatch.setattr(Store, "results", refuse)
    statements = []
    with Store(target) as store:
        store.db.set_trace_callback(statements.append)
        summary = exchange.import_document(store, partial)
    assert summary.added["runs"] == 1
    reads = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    assert reads and not any("_json" in s or "*" in s for s in reads), reads


def test_an_export_of_a_filter_stands_on_its_own(lab, tmp_path):
    path, facts = lab
    chosen = ResultFilter(model=("cifarnet",), status=("ok",), system=(facts["systems"]["b"],))
    with Store.read_only(path) as store:
        document = exchange.export_document(store, chosen)
        expected_uids = [r["uid"] for r in store.select(chosen)]
    assert [r["uid"] for r in document["results"]] == expected_uids
    assert {run["result_uid"] for run in document["runs"]} == set(expected_uids)
    assert document["micro"] and {m["system"] for m in document["micro"]} == {facts["systems"]["b"]}
    with Store(tmp_path / "alone.db") as store:
        summary = exchange.import_document(store, json.loads(json.dumps(document)))
    assert summary.added["results"] == len(expected_uids)


def test_a_chunk_decoded_at_once_gives_each_row_its_own_values(lab):
    path, _ = lab
    db = sqlite3.connect(path)
    db.row_factory = sqlite3.Row
    rows = db.execute("SELECT * FROM runs ORDER BY id").fetchall()
    db.close()
    assert any(row["error_json"] is None for row in rows)
    one_by_one = [store_rows.row_document(row) for row in rows]
    together = store_rows.decoded_columns(rows)
    pairs = zip(rows, together, strict=True)
    assert [store_rows.row_document(row, values) for row, values in pairs] == one_by_one
    assert store_rows.decoded_columns([]) == []


def test_compare_of_two_sources_filters_both(lab, run_cli, tmp_path):
    path, _ = lab
    with Store.read_only(path) as store:
        exported = tmp_path / "a.json"
        exported.write_text(json.dumps(exchange.export_document(store)))
    flags = ["-m", "resnet18", "--status", "ok"]
    code, out, err = run_cli(["compare", exported, path, "--json", *flags])
    assert code == 0, err
    cases = json.loads(out)["cases"]
    assert cases and {c["case"]["model"] for c in cases} == {"resnet18"}
    statuses = {e["status"] for c in cases for e in c["per_system"].values()}
    assert statuses == {"ok"}
    code, _, err = run_cli(["compare", exported, path, "-m", "nosuchmodel"])
    assert code == 2 and f"no results in {exported} matching --model nosuchmodel" in err
