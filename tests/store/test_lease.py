"""Leases of suite cases (trainperf.store.lease, ``Store.claim``): who holds one, and when a
lease is taken over."""

import os
import socket
import subprocess
import sys
import time

import pytest

from trainperf.store import lease
from trainperf.store.database import Store
from trainperf.store.lease import Owner

CASE = ("system0", "v1", "case-a")


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "r.db") as opened:
        yield opened


def dead_pid():
    """The pid of a process that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_live_owner_keeps_its_case(store):
    first, second = Owner.this_process("sweep1"), Owner.this_process("sweep2")
    assert store.claim(CASE, first) is None
    assert store.claim(CASE, first) is None  # renewing
    held = store.claim(CASE, second)
    assert held is not None and held["sweep_id"] == "sweep1" and held["pid"] == os.getpid()
    store.release(first, CASE)
    assert store.claim(CASE, second) is None


@pytest.mark.parametrize(
    "gone",
    [
        lambda me: Owner("old", me.host, dead_pid(), me.pid_started),  # ended
        lambda me: Owner("old", me.host, me.pid, me.pid_started - 3600),  # pid reused
    ],
    ids=["dead pid", "reused pid"],
)
def test_the_lease_of_a_gone_owner_on_this_host_is_taken_over(store, gone):
    me = Owner.this_process("new")
    assert store.claim(CASE, gone(me)) is None
    assert store.claim(CASE, me) is None
    assert store.db.execute("SELECT sweep_id FROM leases").fetchall()[0][0] == "new"


def test_another_hosts_lease_holds_until_it_expires(store, monkeypatch):
    elsewhere = Owner("far", "not-" + socket.gethostname(), 1, 0.0)
    assert store.claim(CASE, elsewhere) is None
    me = Owner.this_process("near")
    assert store.claim(CASE, me)["host"] == elsewhere.host
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + lease.EXPIRY_S + 1)
    assert store.claim(CASE, me) is None


def test_release_without_a_case_gives_up_every_lease_of_the_owner(store):
    me, other = Owner.this_process("a"), Owner.this_process("b")
    for key in ("k1", "k2"):
        store.claim(("s", "v", key), me)
    store.claim(("s", "v", "k3"), other)
    store.release(me)
    assert [r[0] for r in store.db.execute("SELECT case_key FROM leases")] == ["k3"]


def test_a_sweep_of_this_process_that_is_done_holds_its_leases_no_more(store):
    """A sweep that could not give its leases up (its database could not be written) does
    not keep them from the next sweep of a process that lives on (a notebook)."""
    first, second = Owner.this_process("first"), Owner.this_process("second")
    assert store.claim(CASE, first) is None
    assert store.claim(CASE, second)["sweep_id"] == "first"
    first.done()
    assert store.claim(CASE, second) is None
