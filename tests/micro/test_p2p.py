"""p2p against a fake of torch.cuda: device time between events, the spin kernel first,
each direction of a bidirectional copy with its own buffers."""

import contextlib
import itertools
import time

import pytest
import torch

from trainperf.micro import harness, p2p
from trainperf.report.micro import p2p_text

COPY_MS = 0.002  # device time of one copy on the fake GPUs
HOST_MS = 0.05  # host time to queue one: what timing on the host would report


class FakeGpus:
    """torch.cuda as p2p uses it, with two GPUs: a device clock that copies advance, a host
    clock that queuing advances, and a log of what was queued on which stream."""

    def __init__(self, monkeypatch, released=()):
        self.device_ms = 0.0
        self.host_ms = 0.0
        self.log = []
        self.device = 0
        self.current = {}  # GPU -> its current stream
        self.released = iter(released)  # start.query() answers; then the spin held
        self.ptrs = itertools.count(1)
        gpus = self

        class Stream:
            def __init__(self, device):
                self.device_index = device

            def wait_event(self, event):
                gpus.log.append(("wait", self, event))

            def wait_stream(self, stream):
                gpus.log.append(("wait_stream", self, stream))

            def synchronize(self):
                gpus.log.append(("sync", self.device_index, None))

        class Event:
            def __init__(self, enable_timing=False):
                self.stamp = None

            def record(self, stream):
                self.stamp = gpus.device_ms
                gpus.log.append(("record", stream, self))

            def query(self):
                return next(gpus.released, False)

            def synchronize(self):
                gpus.log.append(("event_sync", None, self))

            def elapsed_time(self, end):
                return end.stamp - self.stamp

        @contextlib.contextmanager
        def stream(s):
            before = (gpus.device, gpus.current.get(s.device_index))
            gpus.device, gpus.current[s.device_index] = s.device_index, s
            yield
            gpus.device, gpus.current[s.device_index] = before[0], before[1]

        for name, value in {
            "is_available": lambda: True,
            "device_count": lambda: 2,
            "get_device_name": lambda d: f"Fake GPU {d}",
            "can_device_access_peer": lambda i, j: i != j,
            "Stream": lambda device: Stream(device),
            "Event": Event,
            "stream": stream,
            "_sleep": lambda cycles: self.log.append(("sleep", self.current[self.device], cycles)),
            "synchronize": lambda device: self.log.append(("sync", device, None)),
            "current_stream": lambda device: Stream(device),
        }.items():
            monkeypatch.setattr(torch.cuda, name, value)

        def empty(nbytes, dtype, device=None, pin_memory=False):
            assert dtype == torch.uint8 and (device is None) == pin_memory
            return Buffer(self, nbytes, device)

        monkeypatch.setattr(torch, "empty", empty)
        monkeypatch.setattr(time, "perf_counter", lambda: self.host_ms / 1e3)

    def windows(self):
        """The log from each spin kernel to the synchronization on its end event."""
        starts = [k for k, entry in enumerate(self.log) if entry[0] == "sleep"]
        ends = [k for k, entry in enumerate(self.log) if entry[0] == "event_sync"]
        return [self.log[a : b + 1] for a, b in zip(starts, ends, strict=True)]


class Buffer:
    """A tensor of the fake: where it lives and a pointer of its own; copy_ is logged."""

    def __init__(self, gpus, nbytes, device):
        self.gpus, self.nbytes, self.device = gpus, nbytes, device
        self.ptr = next(gpus.ptrs)

    def data_ptr(self):
        return self.ptr

    def fill_(self, value):
        return self

    def copy_(self, src, non_blocking=False):
        assert non_blocking
        gpu = src.device if src.device is not None else self.device
        self.gpus.log.append(("copy", self.gpus.current.get(gpu), (src, self)))
        self.gpus.device_ms += COPY_MS
        self.gpus.host_ms += HOST_MS


def copies(window):
    return [entry[2] for entry in window if entry[0] == "copy"]


def test_times_are_device_time_between_events_per_copy_not_the_host_clock(monkeypatch):
    FakeGpus(monkeypatch)
    result = p2p.run(nbytes=2**20, iters=5)
    assert result["status"] == "ok" and result["devices"] == ["Fake GPU 0", "Fake GPU 1"]
    peer, staged = result["peer"], result["staged"]
    # One copy takes COPY_MS on the device; the host took HOST_MS to queue it.
    assert peer["latency_us"] == [[pytest.approx(COPY_MS * 1e3)] * 2] * 2
    assert staged["latency_us"] == [[pytest.approx(2 * COPY_MS * 1e3)] * 2] * 2  # out, in
    assert peer["unidirectional_gbps"][0][1] == pytest.approx(2**20 / (COPY_MS / 1e3) / 1e9)
    assert peer["bidirectional_gbps"][1][0] == pytest.approx(2**20 / (COPY_MS / 1e3) / 1e9)
    text = p2p_text(result)
    assert "latency µs per 4-byte copy (100 queued), peer access\n" in text
    assert "\n     0       2.00      2.00\n" in text


def test_the_spin_kernel_holds_the_stream_before_the_start_event(monkeypatch):
    gpus = FakeGpus(monkeypatch)
    p2p.run(nbytes=2**20, iters=5)
    windows = gpus.windows()
    assert len(windows) == 2 * 4 * 3  # modes x pairs x (uni, bi, latency)
    for window in windows:
        (_, lead, cycles), (kind, on, start) = window[0], window[1]
        assert cycles == harness.SPIN_CYCLES and (kind, on) == ("record", lead)
        kind, on, end = [entry for entry in window if entry[0] == "record"][-1]
        assert on is lead and window[-1] == ("event_sync", None, end)
        waited = [entry for entry in window if entry[0] == "wait" and entry[2] is start]
        assert {entry[1] for entry in waited} | {lead} == {
            entry[1] for entry in window if entry[0] in ("wait", "copy", "wait_stream")
        }  # every stream that copies waits for the start
    latency = windows[2::3]
    assert [len(copies(w)) for w in latency] == [p2p.LATENCY_ITERS] * 4 + [
        2 * p2p.LATENCY_ITERS
    ] * 4  # peer: one copy each; staged: to the host and from it
    peer_uni = windows[3]  # pair (0, 1), peer access
    assert all(entry[1] is peer_uni[0][1] for entry in peer_uni if entry[0] == "copy")


def test_each_direction_of_a_bidirectional_copy_has_its_own_buffers(monkeypatch):
    gpus = FakeGpus(monkeypatch)
    p2p.run(nbytes=2**20, iters=5)
    windows = gpus.windows()
    for pair, (i, j) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
        peer = {(src.ptr, dst.ptr) for src, dst in copies(windows[3 * pair + 1])}
        assert len(peer) == 2 and len({ptr for copy in peer for ptr in copy}) == 4, (i, j)
        staged = copies(windows[12 + 3 * pair + 1])
        sources = {src for src, _ in staged if src.device is not None}
        targets = {dst for _, dst in staged if dst.device is not None}
        assert sorted(b.device for b in sources) == sorted([i, j])
        assert sorted(b.device for b in targets) == sorted([j, i])
        assert len({b.ptr for b in sources | targets}) == 4
        by_source = {}
        for src, dst in staged:
            if src.device is not None:
                by_source.setdefault(src.ptr, set()).add(dst.ptr)  # its host buffers
        first, second = by_source.values()
        assert len(first) == len(second) == 2 and not first & second


def test_a_spin_that_ends_too_soon_is_held_longer_then_refused(monkeypatch):
    gpus = FakeGpus(monkeypatch, released=[True])
    stream = torch.cuda.Stream(0)
    src, dst = (torch.empty(4, dtype=torch.uint8, device=d) for d in (0, 1))
    ping = p2p.Direction(src, dst, (stream, torch.cuda.Stream(1)))
    assert harness.held_window_s(ping.enqueue, [*ping.streams], 10) == pytest.approx(COPY_MS / 1e3)
    cycles = [entry[2] for entry in gpus.log if entry[0] == "sleep"]
    assert cycles == [harness.SPIN_CYCLES, 4 * harness.SPIN_CYCLES]

    FakeGpus(monkeypatch, released=[True] * harness.SPIN_TRIES)
    with pytest.raises(RuntimeError, match="the host's queuing rate"):
        harness.held_window_s(ping.enqueue, [*ping.streams], 10)
