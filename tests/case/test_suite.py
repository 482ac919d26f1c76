"""Suite files: expansion, versions, and errors that name file, line and field."""

import textwrap

import pytest

from trainperf.case.spec import DeviceKind
from trainperf.case.suite import BUILTIN, SuiteError, builtin_path, load, parse, resolve

CPU_ONLY = {"cpu": DeviceKind(1)}
ONE_HOPPER = {"cpu": DeviceKind(1), "cuda": DeviceKind(1, (9, 0))}

GRID = """\
name: grid
description: a small grid
defaults:
  image_size: 32
  steps: "fixed:1:2"
  precision: fp32
cases:
  - {model: resnet18, batch_size: 8, precision: bf16}
matrix:
  model: [cifarnet, resnet18]
  batch_size: [4, 8, max]
  precision: [fp32, fp16]
exclude:
  - {model: cifarnet, batch_size: max}
"""


def suite_text(text):
    return textwrap.dedent(text)


def test_cases_then_matrix_product_with_defaults_and_exclusions():
    suite = parse(GRID, "grid.yaml")
    assert suite.name == "grid" and suite.description == "a small grid"
    assert len(suite.planned) == 1 + 2 * 3 * 2
    first = suite.planned[0]
    assert first.origin == "cases[0]" and first.line == 8
    assert first.fields["precision"] == "bf16"  # the case's own value beats the default
    assert first.fields["image_size"] == 32 and first.fields["steps"] == "fixed:1:2"
    matrix = suite.planned[1:]
    assert {(p.fields["model"], p.fields["batch_size"], p.fields["precision"]) for p in matrix} == {
        (m, b, p) for m in ("cifarnet", "resnet18") for b in (4, 8, "max") for p in ("fp32", "fp16")
    }
    excluded = [p for p in suite.planned if p.excluded_by]
    assert len(excluded) == 2
    assert all(p.fields["model"] == "cifarnet" and p.wants_max_batch for p in excluded)
    assert excluded[0].excluded_by == "exclude[0] (line 14)"
    assert len({p.key for p in suite.planned}) == len(suite.planned)


def test_check_gives_skip_reasons_for_exclusions_and_absent_hardware():
    text = GRID.replace(
        "  - {model: resnet18, batch_size: 8, precision: bf16}",
        "  - {model: resnet18, batch_size: 8, device: cuda}",
    )
    suite = parse(text, "grid.yaml")
    skips = suite.check(CPU_ONLY)
    cuda_case = suite.planned[0]
    assert "device 'cuda' is not available" in skips[cuda_case.key]
    assert sum("excluded by exclude[0]" in reason for reason in skips.values()) == 2
    assert cuda_case.key not in suite.check(ONE_HOPPER)


def test_max_batch_is_kept_until_resolved():
    planned = [p for p in parse(GRID, "g.yaml").planned if p.wants_max_batch][0]
    assert planned.label().startswith(f"{planned.fields['model']} bmax @32")
    assert planned.case(48).batch_size == 48
    with pytest.raises(ValueError, match="resolved"):
        planned.case()


def test_version_follows_content_not_layout():
    base = parse(GRID, "a.yaml")
    reformatted = "# a comment\n" + GRID.replace("a small grid", "other words").replace(
        "  - {model: resnet18, batch_size: 8, precision: bf16}",
        "  - model: resnet18\n    precision: bf16\n    batch_size: 8",
    )
    assert parse(reformatted, "b.yaml").version == base.version
    assert parse(GRID.replace("[4, 8, max]", "[4, 16, max]"), "c.yaml").version != base.version
    assert len(base.version) == 12


@pytest.mark.parametrize(
    "text,expected",
    [
        ("name: x\ncases: [\n  {model: resnet18\n", "bad.yaml:4: malformed YAML"),
        ("- just\n- a list\n", "bad.yaml:1: a suite is a mapping"),
        ("name: x\ncolour: red\ncases: []\n", "bad.yaml:2: colour: unknown suite field"),
        ("description: no name\ncases: [{model: resnet18, batch_size: 2}]\n", "name is required"),
        ("name: x\n", "bad.yaml:1: a suite needs 'cases', 'matrix' or both"),
        (
            "name: x\ncases:\n  - model: resnet18\n    batch_size: 2\n    colour: red\n",
            "bad.yaml:5: cases[0].colour: unknown case field 'colour'",
        ),
        (
            "name: x\ncases:\n  - {model: resnet18, batch_size: 2}\n  - model: resnet18\n"
            "    batch_size: eight\n",
            "bad.yaml:5: cases[1].batch_size: batch_size must be a positive integer, got 'eight'",
        ),
        (
            "name: x\ndefaults:\n  channels_last: maybe\n"
            "cases: [{model: resnet18, batch_size: 2}]\n",
            "bad.yaml:3: defaults.channels_last: channels_last must be true or false",
        ),
        ("name: x\nmatrix: {}\n", "bad.yaml:2: matrix: is empty"),
        (
            "name: x\nmatrix:\n  model: [resnet18]\n  batch_size: []\n",
            "bad.yaml:4: matrix.batch_size: is empty: give at least one value",
        ),
        (
            "name: x\nmatrix:\n  model: [resnet18]\n  batch_size: [2, 0]\n",
            "bad.yaml:4: matrix.batch_size[1]: batch_size must be a positive integer, got 0",
        ),
        (
            "name: x\nmatrix:\n  model: [resnet18]\n  batch_size: 4\n",
            "bad.yaml:4: matrix.batch_size: must be a list of values",
        ),
        (
            "name: x\ncases:\n  - {batch_size: 2}\n",
            "bad.yaml:3: cases[0]: case field 'model' is required",
        ),
        (
            "name: x\ncases: [{model: resnet18, batch_size: 2}]\nexclude:\n  - {model: vgg16}\n",
            "bad.yaml:4: exclude[0]: matches no case of the suite",
        ),
        (
            "name: x\ncases:\n  - {model: resnet18, batch_size: 2}\n"
            "  - {model: resnet18, batch_size: 2}\n",
            "bad.yaml:4: cases[1]: the case resnet18 b2 fp32 cpu appears twice",
        ),
    ],
)
def test_errors_name_file_line_and_field(text, expected):
    with pytest.raises(SuiteError) as info:
        parse(text, "bad.yaml")
    assert expected in str(info.value)
    assert "\n" not in str(info.value)


def test_a_case_that_can_never_run_fails_the_check_with_its_line():
    suite = parse(
        "name: x\ncases:\n  - {model: resnet18, batch_size: 2}\n"
        "  - {model: resnt18, batch_size: 2}\n",
        "s.yaml",
    )
    with pytest.raises(SuiteError, match=r"s.yaml:4: cases\[1\]: unknown model 'resnt18'"):
        suite.check(CPU_ONLY)


def test_files_and_names(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(GRID)
    assert resolve(str(path)).source == str(path)
    assert resolve("quick").name == "quick"
    with pytest.raises(SuiteError, match="unknown suite 'nope': give a YAML file or one of quick"):
        resolve("nope")
    with pytest.raises(SuiteError, match="suite file .*missing.yaml does not exist"):
        resolve(str(tmp_path / "missing.yaml"))


def test_overrides_set_a_field_everywhere():
    suite = parse(GRID, "g.yaml").with_overrides(["image_size=16", "device=cpu"])
    assert {p.fields["image_size"] for p in suite.planned} == {16}
    with pytest.raises(SuiteError, match="--set colour=red: give FIELD=VALUE"):
        parse(GRID, "g.yaml").with_overrides(["colour=red"])
    with pytest.raises(SuiteError, match="--set: image_size must be a positive integer, got -3"):
        parse(GRID, "g.yaml").with_overrides(["image_size=-3"])
    with pytest.raises(SuiteError, match="makes two cases of the suite equal"):
        parse(GRID, "g.yaml").with_overrides(["precision=fp32"])


@pytest.mark.parametrize("name", BUILTIN)
def test_builtin_suites_load_and_check(name):
    suite = load(builtin_path(name))
    assert suite.name == name and suite.description and suite.planned
    suite.check(CPU_ONLY)  # every case valid; GPU cases are skipped here, not rejected
    skips = suite.check(ONE_HOPPER)
    assert all(p.key in skips for p in suite.planned if p.excluded_by)


def test_builtin_suites_say_what_the_issue_asks():
    quick = resolve("quick")
    runnable_here = [p for p in quick.planned if p.key not in quick.check(CPU_ONLY)]
    assert {p.fields["model"] for p in runnable_here} >= {"cifarnet", "resnet50", "bert-squad"}
    short = resolve("short-test")
    assert {p.fields["steps"] for p in short.planned} == {"fixed:10:100"}
    assert {p.fields["batch_size"] for p in short.planned} == {32, 64, 128, 256}
    assert {"alexnet", "resnet50"} <= {p.fields["model"] for p in short.planned}
    assert {p.fields["model"] for p in resolve("large-models").planned} >= {
        "resnet101",
        "resnet152",
        "bert-squad",
    }
    assert {p.fields["model"] for p in resolve("high-throughput").planned} == {
        "alexnet",
        "resnet18",
        "resnet50",
    }
    batches = [p.fields["batch_size"] for p in resolve("batch-scaling").planned]
    doubling = [b for b in batches if b != "max"]
    assert all(b == 2 * a for a, b in zip(doubling, doubling[1:], strict=False))
    assert "max" in batches
    assert len({p.fields["model"] for p in resolve("batch-scaling").planned}) == 1
