"""Every built-in suite's description against the cases it expands to (trainperf.case.claims)."""

from __future__ import annotations

import pytest

from trainperf.case import suite
from trainperf.case.claims import claim_problems, prose_facts

SWAG = """\
name: t
description: BERT-base on SWAG (4 choices x {seq} tokens) in fp32.
claims:
  - {{model: bert-swag, seq_len: {claimed}, precision: fp32}}
  - unchecked: ["4 choices"]
cases:
  - {{model: bert-swag, batch_size: 8{case_seq}}}
"""


def swag(seq: int = 80, claimed: int = 80, case_seq: str = "") -> suite.Suite:
    return suite.parse(SWAG.format(seq=seq, claimed=claimed, case_seq=case_seq))


@pytest.mark.parametrize("name", suite.BUILTIN)
def test_builtin_description_matches_its_cases(name):
    assert claim_problems(suite.resolve(name)) == []


def test_a_suite_as_written_holds():
    assert claim_problems(swag()) == []


def test_a_description_that_drifts_from_the_cases_fails():
    # The drift of issue 32: the prose said 128 tokens while bert-swag runs its natural 80.
    problems = claim_problems(swag(seq=128))
    assert problems == ["description: '128 tokens' (seq_len 128 of bert-swag) has no claim"]


def test_a_claim_the_cases_break_fails():
    # The case's seq_len unset resolves to the spec's natural 80; one set to 128 breaks it.
    assert claim_problems(swag(case_seq=", seq_len: 128")) == [
        "claims[0]: seq_len is 80, the cases run 128"
    ]
    assert claim_problems(swag(seq=128, claimed=128)) == [
        "claims[0]: seq_len is 128, the cases run 80"
    ]


def test_a_number_nothing_reads_fails_unless_listed():
    text = SWAG.format(seq=80, claimed=80, case_seq="").replace(
        "in fp32.", "in fp32 on 61 M parameters."
    )
    (problem,) = claim_problems(suite.parse(text))
    assert "the number 61" in problem
    listed = text.replace('["4 choices"]', '["4 choices", "61 M parameters"]')
    assert claim_problems(suite.parse(listed)) == []


def test_a_suite_without_claims_fails_and_scoped_facts_need_their_model():
    bare = suite.parse("name: t\ndescription: x\ncases: [{model: resnet50, batch_size: 1}]\n")
    assert claim_problems(bare) == ["no claims: state what the description says as claims"]
    scoped = (
        "name: t\ndescription: ResNet-18 at {} and ResNet-50 at {}.\nclaims:\n"
        "  - {{model: [resnet18, resnet50]}}\n"
        "  - {{where: {{model: resnet18}}, image_size: 64}}\n"
        "  - {{where: {{model: resnet50}}, image_size: 128}}\ncases:\n"
        "  - {{model: resnet18, batch_size: 1, image_size: 64}}\n"
        "  - {{model: resnet50, batch_size: 1, image_size: 128}}\n"
    )
    assert claim_problems(suite.parse(scoped.format("64x64", "128x128"))) == []
    # Both sizes are claimed, each for the other model: a size belongs to the model before it.
    swapped = claim_problems(suite.parse(scoped.format("128x128", "64x64")))
    assert swapped == [
        "description: '128x128' (image_size 128 of resnet18) has no claim",
        "description: '64x64' (image_size 64 of resnet50) has no claim",
    ]


def test_prose_reads_lists_ranges_and_keywords():
    facts = {
        (f, v)
        for f, v, _, _ in prose_facts(
            "DDP on 1, 2, 4 and 8 GPUs, batch sizes from 16 to 4096 and the largest batch that "
            "fits, 10 warm-up and 100 measured steps, bf16 with channels-last."
        )
    }
    assert facts == {
        ("parallel", "ddp"),
        *(("world", n) for n in (1, 2, 4, 8)),
        ("batch_size", 16),
        ("batch_size", 4096),
        ("batch_size", "max"),
        ("steps", "fixed:10:100"),
        ("precision", "bf16"),
        ("channels_last", True),
    }


def test_claims_leave_the_version_alone_and_are_checked_for_form():
    base = "name: t\ncases: [{model: resnet50, batch_size: 1}]\n"
    with_claims = base + "description: b 1\nclaims: [{batch_size: 1}]\n"
    assert suite.parse(base).version == suite.parse(with_claims).version
    with pytest.raises(suite.SuiteError, match="unknown claim field 'size'"):
        suite.parse(base + "claims: [{size: 1}]\n")
