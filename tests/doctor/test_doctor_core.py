"""The doctor's verdict, its summary line, its table, the conditions compare diffs, and the
verb's --strict exit code (the checks themselves: test_doctor_host, _gpu, _chain)."""

import io
import json

import pytest
from rich.console import Console

import trainperf.doctor as doctor
from trainperf.doctor import summary_line, verdict_document
from trainperf.doctor.checks import Check, absent, worst
from trainperf.doctor.conditions import conditions, differences
from trainperf.report.doctor import difference_lines, doctor_table

WHY = "matters"


def verdict(*checks, seconds=0.5):
    return verdict_document(list(checks), seconds=seconds)


def governor(value, status="ok"):
    return Check("host.governor", status, value, WHY, value=value, condition=True)


def test_the_verdict_is_the_worst_status_and_absent_counts_as_nothing():
    assert worst([]) == "ok" and worst(["absent", "ok"]) == "ok"
    assert worst(["ok", "warn", "absent"]) == "warn" and worst(["warn", "fail"]) == "fail"
    document = verdict(governor("powersave", "warn"), absent("gpu.mig", "no NVML", WHY))
    assert document["verdict"] == "warn"
    assert document["counts"] == {"ok": 0, "warn": 1, "fail": 0, "absent": 1}
    (_, missing) = document["checks"]
    assert missing["value"] is None and missing["value_absent_reason"] == "no NVML"
    with pytest.raises(ValueError, match="status 'great'"):
        Check("x", "great", "", WHY)


def test_the_summary_names_what_warned_or_failed():
    document = verdict(
        governor("powersave", "warn"),
        Check("chain.step_timer", "fail", "off by 9%", WHY),
        Check("host.swap", "ok", "none", WHY),
    )
    line = summary_line(document)
    assert line == (
        "doctor: fail: 1 ok, 1 warn (host.governor), 1 fail (chain.step_timer), 0 absent"
    )
    many = verdict(*(Check(f"gpu{i}.clocks", "warn", "locked", WHY) for i in range(6)))
    assert "6 warn (gpu0.clocks, gpu1.clocks, gpu2.clocks, gpu3.clocks, +2 more)" in summary_line(
        many
    )


def test_only_conditions_with_a_value_are_compared():
    document = verdict(
        governor("performance"),
        Check("host.load", "ok", "0.1", WHY, value=0.1),  # volatile: not a condition
        absent("gpu.persistence", "no NVML", WHY, condition=True),
        Check("gpu0.pcie", "ok", "x16", WHY, value={"width": 16}, condition=True),
    )
    assert conditions(document) == {"host.governor": "performance", "gpu0.pcie": '{"width": 16}'}
    assert conditions(None) == {}


def test_differences_name_each_value_with_its_systems():
    same = [("a", verdict(governor("performance"))), ("b", verdict(governor("performance")))]
    assert differences(same) == []
    mixed = [*same, ("c", verdict(governor("powersave"))), ("d", None)]
    (difference,) = differences(mixed)
    assert difference.name == "host.governor"
    assert difference.values == {"performance": ["a", "b"], "powersave": ["c"]}
    lines = difference_lines([difference])
    assert lines[0].startswith("warning: measured under different conditions")
    assert lines[1] == "  host.governor: performance (a, b) vs powersave (c)"
    crowd = [(f"n{i}", verdict(governor("performance"))) for i in range(5)]
    lines = difference_lines(differences([*crowd, ("z", verdict(governor("ondemand")))]))
    assert lines[1] == "  host.governor: performance (n0, n1, n2, +2 more) vs ondemand (z)"


def test_the_table_shows_every_check_and_the_fix_of_what_warned():
    document = verdict(
        Check("host.governor", "warn", "powersave", "clocks drop", fix="cpupower", value="x"),
        absent("gpu.mig", "no NVML [bold]", WHY),
    )
    console = Console(file=io.StringIO(), width=100)
    console.print(doctor_table(document))
    text = console.file.getvalue()
    assert "host.governor" in text and "why: clocks drop" in text and "fix: cpupower" in text
    assert "no NVML [bold]" in text  # markup in what was seen is shown, not applied
    assert max(len(line) for line in text.splitlines()) <= 100


@pytest.mark.parametrize(("status", "code"), [("ok", 0), ("warn", 0), ("fail", 1)])
def test_strict_exits_1_only_when_a_check_fails(monkeypatch, run_cli, status, code):
    document = verdict(Check("chain.all_reduce", status, "sum 3", WHY))
    monkeypatch.setattr(doctor, "examine", lambda **kwargs: document)
    assert run_cli(["doctor", "--strict", "--json"])[0] == code
    exit_code, out, _ = run_cli(["doctor", "--json"])
    assert exit_code == 0 and json.loads(out) == document
