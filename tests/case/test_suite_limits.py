"""Suite files are bounded: an alias bomb, a huge grid, deep nesting or a duplicate key is
one line of error, at once (trainperf.case.suite's module docstring)."""

import contextlib
import signal

import pytest

from trainperf.case.suite import MAX_ALIAS_NODES, MAX_CASES, SuiteError, parse, resolve
from trainperf.core.limits import MAX_COUNT
from trainperf.core.strict_yaml import MAX_INT_DIGITS

CASE = "cases: [{model: resnet18, batch_size: 2}]"


@contextlib.contextmanager
def within(seconds):
    """Fail instead of hanging: SIGALRM raises in the main thread after ``seconds``."""

    def expire(signum, frame):
        raise TimeoutError(f"took more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def refused(text, seconds=5):
    """The one-line message with which ``text`` is refused."""
    with within(seconds), pytest.raises(SuiteError) as info:
        parse(text, "bad.yaml")
    message = str(info.value)
    assert "\n" not in message
    return message


def alias_bomb(levels=9, width=9):
    """ "Billion laughs" under a key that is not a suite field: width**levels strings."""
    rows = ["name: bomb", CASE, "junk:", f"  l0: &l0 [{', '.join(['lol'] * width)}]"]
    for n in range(1, levels):
        rows.append(f"  l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * width)}]")
    return "\n".join(rows) + "\n"


def test_an_alias_bomb_is_refused_at_once():
    text = alias_bomb()
    assert len(text.encode()) < 600
    message = refused(text)
    assert message.startswith("bad.yaml:8: YAML aliases repeat more than 10,000 nodes")
    assert "TRAINPERF_MAX_ALIAS_NODES" in message


def test_a_recursive_alias_is_refused():
    assert "a recursive YAML alias" in refused(f"name: x\n{CASE}\nloop: &a [1, *a]\n")


MERGED = """\
name: merged
defaults: &common {image_size: 32, steps: "fixed:1:2"}
cases:
  - {<<: *common, model: resnet18, batch_size: 2, image_size: 16}
"""


def test_aliases_within_the_budget_still_load_and_merge_keys_still_override(monkeypatch):
    (planned,) = parse(MERGED, "m.yaml").planned
    assert planned.fields["image_size"] == 16 and planned.fields["steps"] == "fixed:1:2"
    # The alias repeats 5 nodes: the mapping, two keys and two values.
    monkeypatch.setenv("TRAINPERF_MAX_ALIAS_NODES", "5")
    assert parse(MERGED, "m.yaml").planned
    monkeypatch.setenv("TRAINPERF_MAX_ALIAS_NODES", "4")
    with pytest.raises(SuiteError, match=r"m.yaml:4: YAML aliases repeat more than 4 nodes"):
        parse(MERGED, "m.yaml")
    monkeypatch.setenv("TRAINPERF_MAX_ALIAS_NODES", "0")
    with pytest.raises(SuiteError, match="TRAINPERF_MAX_ALIAS_NODES='0' is not valid"):
        parse(MERGED, "m.yaml")
    assert MAX_ALIAS_NODES == 10_000


TEN_AXES = ("batch_size", "image_size", "seq_len", "devices", "nodes", "workers")
TEN_AXES += ("grad_accum", "threads", "seed", "timeout_s")


def test_a_grid_of_ten_to_the_ten_cases_is_refused_before_it_expands():
    matrix = "".join(f"  {axis}: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n" for axis in TEN_AXES)
    text = f"name: huge\ndefaults: {{model: resnet18}}\nmatrix:\n{matrix}"
    assert len(text.encode()) < 500
    message = refused(text)
    assert message.startswith("bad.yaml:3: matrix: the suite has 10,000,000,000 cases")
    assert "(matrix 10 x 10 x 10 x 10 x 10 x 10 x 10 x 10 x 10 x 10)" in message
    assert "more than the limit of 10,000" in message and "TRAINPERF_MAX_CASES" in message
    assert MAX_CASES == 10_000


def test_the_case_limit_counts_explicit_cases_and_can_be_changed(monkeypatch):
    text = f"name: x\n{CASE}\nmatrix:\n  model: [resnet18, cifarnet]\n  batch_size: [4, 8]\n"
    monkeypatch.setenv("TRAINPERF_MAX_CASES", "4")
    assert "the suite has 5 cases (matrix 2 x 2 + 1 explicit)" in refused(text)
    monkeypatch.setenv("TRAINPERF_MAX_CASES", "5")
    assert len(parse(text, "ok.yaml").planned) == 5
    monkeypatch.setenv("TRAINPERF_MAX_CASES", "1")
    two = (
        "name: x\ncases:\n  - {model: resnet18, batch_size: 2}\n"
        "  - {model: cifarnet, batch_size: 2}\n"
    )
    assert refused(two).startswith("bad.yaml:2: cases: the suite has 2 cases (2 explicit)")
    monkeypatch.setenv("TRAINPERF_MAX_CASES", "lots")
    assert "TRAINPERF_MAX_CASES='lots' is not valid: give a positive integer" in refused(text)


def test_nesting_too_deep_for_the_parser_is_one_line():
    message = refused(f"name: x\n{CASE}\njunk: " + "[" * 50_000)
    assert message == "bad.yaml:3: YAML nested too deep to parse"


@pytest.mark.parametrize(
    "text, expected",
    [
        (f"name: x\n{CASE}\nname: y\n", "bad.yaml:3: duplicate key 'name' (first given on line 1)"),
        (
            "name: x\ncases:\n  - model: resnet18\n    batch_size: 2\n    batch_size: 4\n",
            "bad.yaml:5: duplicate key 'batch_size' (first given on line 4)",
        ),
        (
            "name: x\ncases: [{model: resnet18, batch_size: 2, model: cifarnet}]\n",
            "bad.yaml:2: duplicate key 'model' (first given on line 2)",
        ),
    ],
)
def test_a_key_given_twice_is_refused(text, expected):
    assert refused(text) == expected


@pytest.mark.parametrize("name", ["", "  "])
def test_an_empty_suite_name_is_refused(name):
    with pytest.raises(SuiteError, match="the suite name is empty: give a YAML file or one of"):
        resolve(name)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (f"name: x\n{CASE}\ndescription: 'a\x00b'\n", 3),
        (f"name: x\x01\n{CASE}\n", 1),
        (f"# a comment\nname: x\n{CASE}\n\x1b\n", 4),
    ],
)
def test_a_control_character_is_refused_with_its_line(text, line):
    message = refused(text)
    assert message.startswith(f"bad.yaml:{line}: character 0x00")
    assert "not allowed in a suite file" in message


@pytest.mark.parametrize("value", ["1.0e-320", "0.03125", "2097152"])
def test_a_ddp_bucket_out_of_range_is_refused_with_its_line(value):
    text = f"name: x\ncases:\n  - {{model: resnet18, batch_size: 2, bucket_mb: {value}}}\n"
    assert refused(text).startswith(
        "bad.yaml:3: cases[0].bucket_mb: bucket_mb must be from 0.0625 to 1048576 MiB"
    )


def test_an_escaped_control_character_in_the_name_is_refused():
    """YAML's double quotes spell ESC as \\x1b, past the reader; the name is stored with
    every result and exported, where import refuses it (so run refuses it first)."""
    message = refused(f'name: "fast\\x1b[31m"\n{CASE}\n')
    assert message.startswith("bad.yaml:1: name: control character '\\x1b' at position 4")


def test_an_integer_too_long_to_convert_is_refused_with_its_line():
    """Python refuses to convert a decimal string of more than 4,300 digits (a ValueError
    mid-parse, once a traceback)."""
    text = f"name: x\ncases:\n  - {{model: resnet18, batch_size: {'9' * 5000}}}\n"
    assert refused(text) == (
        f"bad.yaml:3: an integer of 5,000 digits: a suite's numbers have at most "
        f"{MAX_INT_DIGITS} (counts are at most {MAX_COUNT:,})"
    )
    assert refused(text.replace("9" * 5000, "9" * 100)).startswith(  # long, converted, refused
        "bad.yaml:3: cases[0].batch_size: batch_size must be at most"
    )


def test_an_override_is_read_with_the_suite_files_limits():
    suite = parse(f"name: x\n{CASE}\n", "ok.yaml")
    with pytest.raises(SuiteError) as info:
        suite.with_overrides([f"batch_size={'9' * 5000}"])
    assert str(info.value).startswith("--set batch_size: an integer of 5,000 digits")
    assert suite.with_overrides(["batch_size=4"]).planned[0].fields["batch_size"] == 4


def test_a_parsers_message_is_not_repeated_around_it():
    """The steps parser names the field and the value; once read 'steps: steps 'fixed:0:0':
    at least one measured step is needed, got 'fixed:0:0''."""
    text = "name: x\ncases:\n  - {model: resnet18, batch_size: 2, steps: 'fixed:0:0'}\n"
    assert refused(text) == (
        "bad.yaml:3: cases[0].steps: steps 'fixed:0:0': at least one measured step is needed"
    )
