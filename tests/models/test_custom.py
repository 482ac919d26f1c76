"""A user's network runs only in its case's worker: found before the sweep, never run there."""

import json
import os
import sys
import textwrap

import pytest

from trainperf.case.spec import CaseError, DeviceKind, check_case, make_case
from trainperf.models.custom import CustomModelError, load_custom

CPU = {"cpu": DeviceKind(2)}

# Every piece of the user's code leaves a mark: importing the package, the module, and
# calling the function.
TATTLER = """
import os, pathlib
MARKS = pathlib.Path(MARKS_DIR)
MARKS.mkdir(exist_ok=True)
(MARKS / ("imported-" + __name__)).write_text(str(os.getpid()))

def build():
    (MARKS / "built").write_text(str(os.getpid()))
    raise RuntimeError("no weights in this net")
"""

# Factories that misbehave in the ways item 6 of issue 17 lists.
WILD_NETS = """
import os, pathlib, time
import torch

def sleeps():
    time.sleep(60)

def exits():
    os._exit(1)

def raises():
    pathlib.Path(os.environ["WILDNETS_PID_FILE"]).write_text(str(os.getpid()))
    raise RuntimeError("the user's own failure")

def hogs():
    return torch.empty(2**60, dtype=torch.uint8)  # an exabyte: no machine has it
"""


@pytest.fixture
def tattler(tmp_path, monkeypatch):
    """``tattler`` (a module) and ``tpkg.nets`` (in a package) in tmp_path/lib."""
    lib, marks = tmp_path / "lib", tmp_path / "marks"
    (lib / "tpkg").mkdir(parents=True)
    code = TATTLER.replace("MARKS_DIR", repr(str(marks)))
    for path in ("tattler.py", "tpkg/__init__.py", "tpkg/nets.py"):
        (lib / path).write_text(code)
    monkeypatch.syspath_prepend(str(lib))
    return marks


@pytest.mark.parametrize("model", ["tattler:build", "tpkg.nets:build"])
def test_check_case_finds_a_user_network_without_running_its_code(tattler, model):
    assert check_case(make_case(model=model, batch_size=2, image_size=8), CPU) is None
    assert not tattler.exists()  # no module, package or function of the user ran


@pytest.mark.parametrize(
    "model", ["nosuch_xyz:build", "tpkg.missing:build", "tattler.sub:build", "tpkg.nets.x:f"]
)
def test_a_module_that_is_not_there_is_refused_before_the_sweep(tattler, model):
    with pytest.raises(CaseError, match="cannot import module .* no such module"):
        check_case(make_case(model=model, batch_size=2, image_size=8), CPU)
    assert not tattler.exists()


def test_factories_that_hang_exit_raise_or_hog_are_recorded_and_trainperf_goes_on(
    tmp_path, run_cli, monkeypatch
):
    (tmp_path / "wildnets.py").write_text(textwrap.dedent(WILD_NETS))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    pid_file = tmp_path / "factory.pid"
    monkeypatch.setenv("WILDNETS_PID_FILE", str(pid_file))
    suite = tmp_path / "wild.yaml"
    suite.write_text(
        "name: wild\ndefaults: {image_size: 8, steps: 'fixed:0:1', runs: 1, timeout_s: 60}\n"
        "cases:\n"
        "  - {model: 'wildnets:sleeps', batch_size: 2, timeout_s: 5}\n"
        "  - {model: 'wildnets:exits', batch_size: 2}\n"
        "  - {model: 'wildnets:raises', batch_size: 2}\n"
        "  - {model: 'wildnets:hogs', batch_size: 2}\n"
    )
    code, out, err = run_cli(["run", suite, "--db", tmp_path / "r.db", "--json"])
    assert code == 1, err  # cases failed; trainperf itself did not
    results = {r["case"]["model"]: r for r in json.loads(out)["results"]}
    assert {model: r["status"] for model, r in results.items()} == {
        "wildnets:sleeps": "timeout",
        "wildnets:exits": "crashed",
        "wildnets:raises": "error",
        "wildnets:hogs": "oom",
    }
    assert results["wildnets:sleeps"]["error"]["message"].startswith("no result after 5 s")
    assert "exited with code 1" in results["wildnets:exits"]["error"]["message"]
    raised = results["wildnets:raises"]["error"]
    assert (raised["type"], raised["message"]) == ("RuntimeError", "the user's own failure")
    assert "Traceback" not in err  # the user's traceback is stored, not printed
    assert int(pid_file.read_text()) != os.getpid()  # the factory ran in a worker


SMALL_NET = """
from torch import nn

def build():
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 7))
"""


@pytest.fixture
def in_a_folder_of_nets(tmp_path, monkeypatch):
    """``cwdnets/small.py`` in the current directory, which is not on the Python path: as
    for the ``trainperf`` console script, whose path holds its own folder instead."""
    (tmp_path / "cwdnets").mkdir()
    (tmp_path / "cwdnets" / "__init__.py").write_text("")
    (tmp_path / "cwdnets" / "small.py").write_text(textwrap.dedent(SMALL_NET))
    monkeypatch.chdir(tmp_path)
    here = str(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if os.path.abspath(p or ".") != here])
    yield tmp_path
    for name in ("cwdnets", "cwdnets.small"):
        sys.modules.pop(name, None)


def test_a_network_in_the_current_directory_is_found_and_loaded(in_a_folder_of_nets):
    # README: "importable from the current directory or PYTHONPATH"
    case = make_case(model="cwdnets.small:build", batch_size=2, image_size=8)
    assert check_case(case, CPU) is None
    assert "cwdnets" not in sys.modules  # found, not imported
    spec = load_custom("cwdnets.small:build")  # as the worker does
    assert spec.task.num_classes == 7


def test_a_network_in_the_current_directory_runs(in_a_folder_of_nets, run_cli):
    code, out, err = run_cli(
        "run -m cwdnets.small:build -b 2 --image-size 8 --steps fixed:0:1 --runs 1 --json"
    )
    assert code == 0, err
    (result,) = json.loads(out)["results"]
    assert result["status"] == "ok" and result["case"]["model"] == "cwdnets.small:build"
    # Not a terminal: each run says when it starts, with the case's label.
    assert "[case 1/1, run 1] cwdnets.small:build b2 @8 fp32 cpu: started (0/1 cases" in err
    assert (in_a_folder_of_nets / "trainperf.db").exists()


FLAT_NETS = """
import sys

from torch import nn


def flat8():  # takes 8 x 8 images only: its first layer is sized for them
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 5))


def raises():
    raise RuntimeError("the user's own failure")


def exits():
    sys.exit(0)
"""


@pytest.fixture
def flat_nets(tmp_path, monkeypatch):
    (tmp_path / "flatnets.py").write_text(textwrap.dedent(FLAT_NETS))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("flatnets", None)


def test_a_network_sized_for_small_images_is_counted_at_the_size_given(flat_nets, run_cli):
    assert load_custom("flatnets:flat8", image_size=8).task.num_classes == 5
    with pytest.raises(CustomModelError, match=r"float image batch \(1, 3, 224, 224\)"):
        load_custom("flatnets:flat8")  # no size known: the probe's 224, which it cannot take
    code, out, err = run_cli(
        "predict -m flatnets:flat8 --device h100-sxm --devices 1 --per-node 1 --image-size 8 --json"
    )
    assert code == 0, err
    assert json.loads(out)["inputs"]["model"] == "flatnets:flat8"


@pytest.mark.parametrize(
    "function, said",
    [("raises", "RuntimeError when called: the user's own failure"), ("exits", "SystemExit")],
)
def test_predict_refuses_a_network_whose_function_fails_in_one_line(
    flat_nets, run_cli, function, said
):
    code, out, err = run_cli(
        f"predict -m flatnets:{function} --device h100-sxm --devices 1 --per-node 1 --json"
    )
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and f"flatnets:{function} raised {said}" in err
    assert "Traceback" not in err


def test_a_reference_is_matched_whole():
    """'$' lets a final newline by: the reference must be all of the text (the case's own
    check refuses control characters too, but this is the module's rule)."""
    from trainperf.models.custom import check_reference

    check_reference("os:getcwd")
    with pytest.raises(CustomModelError, match=r"malformed model reference 'os:getcwd\\n'"):
        check_reference("os:getcwd\n")
