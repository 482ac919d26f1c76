"""The largest-batch search: doubling then bisection, and what a probe's result means."""

import json

import pytest

from trainperf.case.spec import make_case
from trainperf.launch.maxbatch import (
    PROBE_STEPS,
    Probe,
    SearchFailed,
    memory_key,
    probe_case,
    probe_verdict,
    search,
)


def fits_up_to(largest, tried=None):
    def fits(batch_size):
        if tried is not None:
            tried.append(batch_size)
        ok = batch_size <= largest
        return Probe(batch_size, ok, "ok" if ok else "oom")

    return fits


@pytest.mark.parametrize("largest", [1, 2, 3, 5, 37, 64, 1000])
def test_search_finds_the_exact_largest_batch(largest):
    tried = []
    found = search(fits_up_to(largest, tried), start=1, limit=65536)
    assert found.batch_size == largest
    assert [p.batch_size for p in found.probes] == tried
    # doubling then bisection: about two probes per power of two of the answer
    assert len(tried) <= 2 * largest.bit_length() + 1
    assert found.note == ""


def test_search_order_is_doubling_then_bisection():
    tried = []
    search(fits_up_to(37, tried))
    assert tried == [1, 2, 4, 8, 16, 32, 64, 48, 40, 36, 38, 37]


def test_search_from_a_start_above_the_answer_bisects_down():
    found = search(fits_up_to(5), start=16)
    assert found.batch_size == 5


def test_nothing_fits_and_the_limit():
    found = search(fits_up_to(0))
    assert found.batch_size is None and "batch 1 does not fit" in found.note
    capped = search(fits_up_to(10**9), limit=100)
    assert capped.batch_size == 100 and "reached the limit of 100" in capped.note
    with pytest.raises(ValueError, match="start must be between 1"):
        search(fits_up_to(3), start=200, limit=100)


def test_probe_verdicts():
    assert probe_verdict({"status": "ok"}, 8).fits
    oom = probe_verdict({"status": "oom", "error": {"message": "CUDA out of memory"}}, 8)
    assert not oom.fits and oom.message == "CUDA out of memory"
    killed = {"status": "crashed", "error": {"message": "killed by signal SIGKILL"}}
    assert not probe_verdict(killed, 8).fits  # the kernel's OOM killer
    with pytest.raises(
        SearchFailed, match="probe at batch 8 ended crashed: killed by signal SIGSEGV"
    ):
        probe_verdict({"status": "crashed", "error": {"message": "killed by signal SIGSEGV"}}, 8)
    with pytest.raises(SearchFailed, match="ended error"):
        probe_verdict({"status": "error", "error": {"message": "bad"}}, 8)


def test_probe_case_and_memory_key():
    template = make_case(model="resnet18", batch_size=1, image_size=32, steps="adaptive")
    probe = probe_case(template, 64)
    assert probe.batch_size == 64 and probe.steps == PROBE_STEPS and probe.timeout_s > 0
    # batch, steps and timeout do not change the memory settings; precision does
    assert memory_key(probe) == memory_key(template)
    assert memory_key(template.model_copy(update={"precision": "bf16"})) != memory_key(template)


def test_search_limit_of_a_batch_and_of_a_sequence_length():
    from trainperf.launch.maxbatch import DEFAULT_LIMIT, NotALanguageModel, search_limit
    from trainperf.models import look_up

    image = make_case(model="resnet18", batch_size=1, image_size=32)
    assert search_limit(image, "batch_size", None) == DEFAULT_LIMIT
    assert search_limit(image, "batch_size", 100) == 100
    with pytest.raises(NotALanguageModel):
        search_limit(image, "seq_len", None)
    language = make_case(model="llama-tiny", batch_size=2, seq_len=1)
    longest = look_up("llama-tiny").max_size
    assert search_limit(language, "seq_len", None) == longest
    assert search_limit(language, "seq_len", 16) == 16
    assert search_limit(language, "seq_len", longest * 2) == longest


def test_a_batch_answer_is_stored_and_a_sequence_answer_names_its_probes(tmp_path):
    from trainperf.launch.maxbatch import MaxBatch, longest_sequence, store_answer
    from trainperf.store.database import Store

    template = make_case(model="resnet18", batch_size=1, image_size=32)
    found = MaxBatch(8, [Probe(8, True, "ok"), Probe(16, False, "oom")])
    record = {"fingerprint": "f" * 16, "hostname": "h"}
    with Store(tmp_path / "r.db") as store:
        document = store_answer(store, record, template, found)
        stored = store.max_batch(record["fingerprint"], memory_key(template))
    assert document["batch_size"] == 8 and document["system"] == "f" * 16
    assert isinstance(document["id"], int) and stored["batch_size"] == 8
    sequence = longest_sequence(found, template)
    assert sequence["seq_len"] == 8 and sequence["stored"] is False
    assert [p["seq_len"] for p in sequence["probes"]] == [8, 16]
    assert all("batch_size" not in p for p in sequence["probes"])


def test_the_maxbatch_verb_stores_and_prints_the_answer(tmp_path, run_cli):
    db = tmp_path / "r.db"
    common = ["maxbatch", "cifarnet", "--image-size", 16, "--device", "cpu", "--db", db]
    code, out, err = run_cli([*common, "--limit", 2])
    assert code == 0, err
    assert (
        out == "largest batch that trains: 2 (reached the limit of 2; no larger batch was tried)\n"
    )
    assert "searching the largest batch of cifarnet" in err
    assert "  batch 1: fits" in err and "  batch 2: fits" in err
    code, out, err = run_cli([*common, "--limit", 1, "--json"])
    document = json.loads(out)
    assert code == 0 and document["batch_size"] == 1 and isinstance(document["id"], int)
    assert document["case"]["model"] == "cifarnet" and [
        p["batch_size"] for p in document["probes"]
    ] == [1]


def test_a_start_above_the_limit_is_refused(tmp_path, run_cli):
    db = tmp_path / "r.db"
    code, _, err = run_cli(["maxbatch", "cifarnet", "--start", 9, "--limit", 8, "--db", db])
    assert code == 2 and "--start 9 is above --limit 8" in err
    assert not db.exists()
