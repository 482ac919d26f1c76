"""Shared fixtures: user networks that misbehave on purpose, importable by child processes."""

import os
import textwrap

import pytest

# A NaN or infinity about to be written fails loudly in tests (trainperf.strict_json),
# in this process and in the workers it starts.
os.environ["TRAINPERF_STRICT_JSON"] = "1"

from trainperf.cli import main

# Tiny image networks (any image size: they pool to 1x1) that fail in the ways a sweep
# must survive. On the meta device (trainperf's class-count probe) they behave.
FLAKY_NETS = """
import os, time
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self, behaviour="normal"):
        super().__init__()
        self.pool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(3, 2)
        self.behaviour = behaviour
        self.calls = 0

    def forward(self, x):
        if x.device.type != "meta":
            self.calls += 1
            rank1 = os.environ.get("RANK") == "1"  # torchrun's rank of this process
            nan = self.behaviour == "nan_from_3" or (self.behaviour == "nan_rank1_from_3" and rank1)
            if nan and self.calls >= 3:  # from the third step on, the loss is NaN
                return self.fc(self.pool(x).flatten(1)) * float("nan")
            if self.behaviour == "abort" or (self.behaviour == "abort_rank1" and rank1):
                os.abort()
            if self.behaviour == "hang" or (self.behaviour == "hang_rank1" and rank1):
                time.sleep(600)
            if self.behaviour == "slow":
                time.sleep(0.2)
            if self.behaviour == "hog" or (self.behaviour == "hog_above_5" and x.shape[0] > 5):
                torch.empty(2**60, dtype=torch.uint8)  # an exabyte: no machine has it
        return self.fc(self.pool(x).flatten(1))

def normal():
    return Net()

def aborts():
    return Net("abort")

def hangs():
    return Net("hang")

def slow():
    return Net("slow")

def hog():
    return Net("hog")

def hog_above_5():
    return Net("hog_above_5")

def abort_rank1():
    return Net("abort_rank1")

def hang_rank1():
    return Net("hang_rank1")

def nan_from_3():
    return Net("nan_from_3")

def nan_rank1_from_3():
    return Net("nan_rank1_from_3")
"""


@pytest.fixture
def user_nets(tmp_path, monkeypatch):
    """Make ``flakynets`` importable here and in every child process."""
    (tmp_path / "flakynets.py").write_text(textwrap.dedent(FLAKY_NETS))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return tmp_path


@pytest.fixture
def run_cli(capsys):
    """Run the CLI in-process: ``run_cli(args)`` -> (exit code, stdout, stderr).

    ``args`` is a list (items made strings) or a command line split on spaces.
    """

    def run(args):
        args = args.split() if isinstance(args, str) else [str(a) for a in args]
        with pytest.raises(SystemExit) as info:
            main(args)
            raise SystemExit(0)
        out, err = capsys.readouterr()
        return info.value.code, out, err

    return run
