"""CSV safe to open in a spreadsheet: text that begins like a formula is escaped (OWASP),
numbers are not, in `results --csv` and `export FILE.csv` alike (issue 29, item 7)."""

import csv
import io

import pytest

from trainperf.report.csv_safe import FORMULA_STARTS, csv_text, safe_cell
from trainperf.store.database import Store

INJECTION = "=cmd|' /C calc'!A0"


def hostile_store(path):
    """One result per dangerous first character, in the model, host, device and error
    cells, with negative numbers beside them."""
    with Store(path) as store:
        for index, start in enumerate(FORMULA_STARTS):
            system = {"fingerprint": f"fp{index}", "hostname": f"{start}host", "gpus": []}
            sweep = store.start_sweep(system)
            model = INJECTION if start == "=" else f"{start}model"
            result = {
                "result_schema": 1,
                "status": "error",
                "case": {"model": model, "batch_size": 4, "precision": "fp32", "device": "cpu"},
                "device": {"type": "cpu", "name": f"{start}device"},
                "metrics": {"samples_per_s_median": -67.3, "mem_peak_bytes": -5, "jitter": 0.5},
                "error": {"type": "error", "message": f"{start}2+3 went wrong"},
            }
            store.add_result(sweep, system["fingerprint"], result)
    return path


def rows_of(text):
    return list(csv.DictReader(io.StringIO(text, newline="")))


def check_escaped(rows):
    assert len(rows) == len(FORMULA_STARTS)
    for row, start in zip(rows, FORMULA_STARTS, strict=True):
        model = INJECTION if start == "=" else f"{start}model"
        assert row["model"] == "'" + model
        assert row["hostname"] == f"'{start}host"
        assert row["device_name"] == f"'{start}device"
        assert row["error"] == f"'{start}2+3 went wrong"
        # numbers are decided by type, not by look: a negative one stays a number
        assert row["samples_per_s_median"] == "-67.3" and row["mem_peak_bytes"] == "-5"
        assert row["jitter"] == "0.5" and row["status"] == "error" and row["batch_size"] == "4"


def test_results_csv_escapes_formula_text(tmp_path, run_cli):
    db = hostile_store(tmp_path / "r.db")
    code, out, err = run_cli(f"results --db {db} --csv")
    assert code == 0, err
    check_escaped(rows_of(out))
    assert "\n=cmd" not in out and ",=cmd" not in out


def test_export_csv_escapes_formula_text(tmp_path, run_cli):
    db = hostile_store(tmp_path / "r.db")
    target = tmp_path / "out.csv"
    code, _, err = run_cli(f"export {target} --db {db}")
    assert code == 0, err
    text = target.read_bytes().decode()
    check_escaped(rows_of(text))
    code, out, _ = run_cli(f"results --db {db} --csv")
    assert text == out  # the one writer


@pytest.mark.parametrize("value", [-67.3, -5, 0, 3.5, True, False, None])
def test_values_that_are_not_text_are_never_escaped(value):
    assert safe_cell(value) is value


@pytest.mark.parametrize(
    ("text", "cell"),
    [
        ("=1+1", "'=1+1"),
        ("+1", "'+1"),
        ("-67.3", "'-67.3"),  # text that looks like a number is still text
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\tx", "'\tx"),
        ("\rx", "'\rx"),
        ("resnet50", "resnet50"),
        ("a=b", "a=b"),
        ("", ""),
    ],
)
def test_text_is_escaped_by_its_first_character(text, cell):
    assert safe_cell(text) == cell


def test_the_header_and_missing_cells():
    assert csv_text(["a", "b"], [{"a": "=x"}]) == "a,b\r\n'=x,\r\n"


def test_a_line_break_inside_a_cell_cannot_start_a_row():
    text = csv_text(["host", "n"], [{"host": "x\r=cmd|' /C calc'!A0", "n": 1}])
    assert text == "host,n\r\n\"x\r=cmd|' /C calc'!A0\",1\r\n"
    assert len(list(csv.reader(io.StringIO(text, newline="")))) == 2
