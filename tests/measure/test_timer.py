import pytest

from trainperf.measure.timer import CudaEventTimer, HostTimer


class FakeEvent:
    """The part of torch.cuda.Event the timer uses, on a fake device clock in ms."""

    device_ms = 0.0
    synchronized = 0

    def __init__(self):
        self.stamp = None

    def record(self):
        self.stamp = FakeEvent.device_ms

    def synchronize(self):
        FakeEvent.synchronized += 1

    def elapsed_time(self, end):
        return end.stamp - self.stamp


def test_cuda_event_timer_converts_ms_and_syncs_once_per_read():
    FakeEvent.device_ms, FakeEvent.synchronized = 0.0, 0
    timer = CudaEventTimer(event_factory=FakeEvent)
    for ms in (5.0, 7.0, 6.0):
        timer.start()
        FakeEvent.device_ms += ms
        timer.stop()
        FakeEvent.device_ms += 100.0  # time between steps is not a step
    assert timer.durations() == pytest.approx([0.005, 0.007, 0.006])
    assert FakeEvent.synchronized == 1
    timer.reset()
    assert timer.durations() == []


def test_host_timer_uses_the_clock():
    ticks = iter([1.0, 1.5, 10.0, 10.25])
    timer = HostTimer(clock=lambda: next(ticks))
    timer.start(), timer.stop(), timer.start(), timer.stop()
    assert timer.durations() == pytest.approx([0.5, 0.25])
