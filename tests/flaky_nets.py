"""The networks of `user_nets` (tests/conftest.py), as the text of the module it writes for a
test; a test that needs a line number of it reads it from here."""

# Tiny image networks (any image size: they pool to 1x1) that fail in the ways a sweep
# must survive. On the meta device (trainperf's class-count probe) they behave.
FLAKY_NETS = """
import functools, os, time
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

# The factories, flakynets:<name>: a Net with one behaviour each.
for _name, _behaviour in {
    "normal": "normal",
    "aborts": "abort",
    "hangs": "hang",
    "slow": "slow",
    "hog": "hog",
    "hog_above_5": "hog_above_5",
    "abort_rank1": "abort_rank1",
    "hang_rank1": "hang_rank1",
    "nan_from_3": "nan_from_3",
    "nan_rank1_from_3": "nan_rank1_from_3",
}.items():
    globals()[_name] = functools.partial(Net, _behaviour)
"""
