"""A rank leaves its process group at a barrier when its work ended well, at once otherwise."""

import socket

import pytest
import torch.distributed as dist

from trainperf.parallel.group import RankGroup


@pytest.fixture
def one_rank(monkeypatch):
    """torchrun's environment for a job of one process on a free loopback port; the
    barriers a RankGroup waits at are recorded instead of run."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
    env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    barriers = []
    monkeypatch.setattr(dist, "barrier", lambda group=None: barriers.append(group))
    return barriers


def test_a_rank_that_finished_waits_for_its_peers_before_tearing_down(one_rank):
    with RankGroup("cpu", 30) as job:
        assert job.is_leader and dist.is_initialized()
    assert one_rank == [None] and not dist.is_initialized()  # gloo: the default group


def test_a_rank_that_failed_leaves_at_once(one_rank):
    with pytest.raises(RuntimeError, match="a rank's own failure"), RankGroup("cpu", 30):
        raise RuntimeError("a rank's own failure")
    assert one_rank == [] and not dist.is_initialized()  # its peers may never arrive
