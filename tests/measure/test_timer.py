import statistics

import pytest

from trainperf.measure.timer import CudaEventTimer, HostTimer, InFlightTimer


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


# ----------------------------------------- asynchronous steps (JAX), on a simulated device


class AsyncDevice:
    """A device that runs dispatched steps one after another while the host goes on, on a
    simulated clock: dispatching costs the host ``dispatch_s``, a step the device ``step_s``;
    a host that waits for a step not yet done sees it ``wake_s`` after it ends (the round
    trip of a blocking wait), one that waits for a step done long ago goes on at once."""

    def __init__(self, step_s=0.010, dispatch_s=0.0001, wake_s=0.001):
        self.step_s, self.dispatch_s, self.wake_s = step_s, dispatch_s, wake_s
        self.now = 0.0  # the host's clock
        self.free_at = 0.0  # when the device finishes what it was given
        self.dispatched = []  # each step's handle: the time it ends
        self.waited = []  # (handle, how many steps were dispatched then)

    def clock(self):
        return self.now

    def step(self):
        self.now += self.dispatch_s
        self.free_at = max(self.now, self.free_at) + self.step_s
        self.dispatched.append(self.free_at)
        return self.free_at

    def wait(self, done_at):
        self.waited.append((done_at, len(self.dispatched)))
        if done_at > self.now:
            self.now = done_at + self.wake_s

    def blocking_step(self):
        """The step that waits for its own result, as the JAX step did before."""
        done_at = self.step()
        self.wait(done_at)
        return done_at


def measured(device, timer, step, steps=20):
    from trainperf.measure.policy import FixedPolicy
    from trainperf.measure.timed_steps import measure_steps

    return measure_steps(step, FixedPolicy(1, steps), timer, clock=device.clock).step_s


def test_steps_in_flight_are_timed_as_the_device_ran_them_and_never_pay_the_round_trip():
    device = AsyncDevice(step_s=0.010, dispatch_s=0.0001, wake_s=0.001)
    timer = InFlightTimer(device.wait, clock=device.clock)
    step_s = measured(device, timer, timer.timed(device.step))
    # The first step starts on an idle device: its dispatch and the wake-up after the last
    # step are in its window; every other step is the device's 10 ms, back to back.
    assert step_s[1:] == pytest.approx([0.010] * 19)
    assert sum(step_s) == pytest.approx(0.0001 + 20 * 0.010 + 0.001)
    # Waiting after every step (the old JAX step) adds the round trip to each one.
    device = AsyncDevice(step_s=0.010, dispatch_s=0.0001, wake_s=0.001)
    blocking = measured(device, HostTimer(clock=device.clock), device.blocking_step)
    assert blocking == pytest.approx([0.0111] * 20)


def test_the_host_waits_only_for_a_step_with_later_ones_queued_behind_it():
    device = AsyncDevice()
    timer = InFlightTimer(device.wait, in_flight=2, clock=device.clock)
    step = timer.timed(device.step)
    for _ in range(6):
        timer.start()
        step()
        timer.stop()
    # Steps 1..4 were waited for when 3..6 had been dispatched: two queued behind each.
    assert [(device.dispatched.index(h) + 1, n) for h, n in device.waited] == [
        (1, 3),
        (2, 4),
        (3, 5),
        (4, 6),
    ]
    assert len(timer.durations()) == 6  # reading the times waits for the last two
    assert device.now >= device.free_at
    timer.reset()
    assert timer.durations() == []


def test_a_host_slower_than_the_device_is_timed_at_its_own_pace():
    device = AsyncDevice(step_s=0.001, dispatch_s=0.004, wake_s=0.001)
    timer = InFlightTimer(device.wait, clock=device.clock)
    step_s = measured(device, timer, timer.timed(device.step))
    # The device idles between steps: the throughput is the host's, one step per dispatch
    # (the first step is seen done two dispatches late, the last two share their span).
    assert statistics.median(step_s) == pytest.approx(0.004)
    assert min(step_s) > 0 and sum(step_s) == pytest.approx(20 * 0.004 + 0.002)
