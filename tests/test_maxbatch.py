"""The largest-batch search: doubling then bisection, and what a probe's result means."""

import pytest

from trainperf.case import make_case
from trainperf.maxbatch import (
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
