"""The measuring chain of ``trainperf doctor``: each check's good and bad branch (bad
instruments injected: a timer that misreads, a peak reader in the wrong unit, a GEMM
faster than the peak, power that disagrees with the energy counter, a wrong sum, a hang),
and the real chain on this CPU."""

import sys
import time

import pytest
import torch

from trainperf.analysis.peaks import PeakLookup
from trainperf.doctor.chain import (
    ALLOC_BYTES,
    AT_SWEEP_START,
    all_reduce_check,
    allocator_peak_check,
    chain_checks,
    energy_check,
    gemm_rate_check,
    step_timer_check,
)
from trainperf.doctor.chain_ranks import RanksLaunch, RanksOutcome
from trainperf.measure.energy_rapl import RaplEnergy
from trainperf.measure.memory import MemoryPeak, read_peak
from trainperf.measure.timer import CudaEventTimer, HostTimer

CPU = torch.device("cpu")
CUDA = torch.device("cuda", 0)  # a device object only: the fakes stand in for the GPU


@pytest.fixture(scope="module")
def real_chain():
    started = time.monotonic()
    checks = chain_checks(full=True, device="cpu")
    return {check.name: check for check in checks}, time.monotonic() - started


# ------------------------------------------------------------------ the real chain


def test_the_real_chain_on_this_cpu_reports_measured_errors(real_chain):
    checks, _ = real_chain  # its time: benchmarks/doctor_time.py
    assert list(checks) == [
        "chain.step_timer",
        "chain.allocator_peak",
        "chain.gemm_rate",
        "chain.energy",
        "chain.all_reduce",
    ]
    timer = checks["chain.step_timer"]
    assert timer.status == "ok", timer.seen
    assert abs(timer.value["error_relative"]) <= 0.01
    assert timer.value["timer"] == "HostTimer" and timer.value["timer_resolution_s"] > 0
    peak = checks["chain.allocator_peak"]
    assert peak.status == "ok", peak.seen
    assert peak.value["allocated_bytes"] >= ALLOC_BYTES
    assert isinstance(peak.value["error_bytes"], int)
    gemm = checks["chain.gemm_rate"]
    assert gemm.value["tflops_best"] > 0 and gemm.value["flops"] == 2 * 512**3
    reduce = checks["chain.all_reduce"]
    assert reduce.status == "ok", reduce.seen
    assert reduce.value["backend"] == "gloo"
    assert reduce.value["results"] == [[3.0, 3.0], [3.0, 3.0]]
    assert 0 < reduce.value["all_reduce_s"] < reduce.value["elapsed_s"]
    for check in checks.values():
        check.document()  # JSON-able, statuses valid


def test_a_sweep_runs_the_timer_and_allocator_and_says_why_not_the_rest():
    checks = {c.name: c for c in chain_checks(full=False, device="cpu")}
    assert checks["chain.step_timer"].status == "ok" and checks["chain.step_timer"].value
    for name in ("chain.gemm_rate", "chain.energy", "chain.all_reduce"):
        assert checks[name].status == "absent" and checks[name].seen == AT_SWEEP_START


# ------------------------------------------------------------------ chain.step_timer


def test_a_timer_that_reads_5_percent_long_fails():
    fast = HostTimer(clock=lambda: 1.05 * time.perf_counter())
    check = step_timer_check(CPU, timer=fast, windows=2)
    assert check.status == "fail"
    assert check.value["error_relative"] == pytest.approx(0.05, abs=0.01)
    assert check.fix


def test_a_timer_shorter_than_the_sleep_fails():
    slow = HostTimer(clock=lambda: 0.5 * time.perf_counter())
    check = step_timer_check(CPU, timer=slow, windows=1)
    assert check.status == "fail"
    assert "shorter than the sleep" in check.seen


class FakeEvent:
    """A CUDA event stamped by the host clock; ``scale`` misreads its elapsed time."""

    scale = 1.0

    def record(self):
        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return (end.t - self.t) * 1e3 * self.scale  # milliseconds, as CUDA's


class SecondsEvent(FakeEvent):
    scale = 1e-3  # seconds taken for milliseconds


@pytest.mark.parametrize(("event", "status"), [(FakeEvent, "ok"), (SecondsEvent, "fail")])
def test_the_cuda_event_timer_path(event, status):
    check = step_timer_check(
        CUDA,
        timer=CudaEventTimer(event_factory=event),
        wait=lambda: time.sleep(0.005),
        synchronize=lambda: None,
    )
    assert check.status == status
    assert check.value["timer"] == "CudaEventTimer"
    assert check.value["timer_resolution_s"] == 0.5e-6
    assert check.value["sleep_s"] is None  # cycles: no known length in seconds


# ------------------------------------------------------------------ chain.allocator_peak


def test_a_peak_read_in_kilobytes_fails():
    def kilobytes(device):
        reading = read_peak(device)
        return MemoryPeak(reading.mem_peak_bytes // 1024, reading.source)

    check = allocator_peak_check(CPU, read=kilobytes)
    assert check.status == "fail"
    assert check.value["error_relative"] < -0.9


def test_a_peak_that_cannot_show_the_allocation_is_absent():
    huge = MemoryPeak(64 * 2**30, "fake")
    check = allocator_peak_check(CPU, read=lambda device: huge)
    assert check.status == "absent" and "cannot be reset" in check.seen


class FakeCudaMemory:
    """torch.cuda's allocator statistics, for allocations made by ``empty``."""

    def __init__(self, monkeypatch, extra=0):
        self.allocated, self.peak, self.extra = 10 * 2**20, 10 * 2**20, extra
        for name, fake in [
            ("init", lambda: None),
            ("memory_allocated", lambda index=None: self.allocated),
            ("reset_peak_memory_stats", self.reset),
            ("max_memory_allocated", lambda index=None: self.peak + self.extra),
            ("max_memory_reserved", lambda index=None: self.peak),
        ]:
            monkeypatch.setattr(torch.cuda, name, fake)
        monkeypatch.setattr(torch, "empty", self.empty)

    def reset(self, index=None):
        self.peak = self.allocated

    def empty(self, size, dtype, device):
        self.allocated += size
        self.peak = max(self.peak, self.allocated)
        return object()


@pytest.mark.parametrize(("extra", "status"), [(0, "ok"), (64 * 2**20, "fail")])
def test_the_cuda_peak_path(monkeypatch, extra, status):
    FakeCudaMemory(monkeypatch, extra)
    check = allocator_peak_check(CUDA)
    assert check.status == status
    assert check.value["error_bytes"] == extra
    assert check.value["source"] == "torch.cuda.max_memory_allocated"


# ------------------------------------------------------------------ chain.gemm_rate


def test_a_gemm_faster_than_the_peak_fails():
    check = gemm_rate_check(CPU, peak=lambda name, dtype: PeakLookup(1e6, "a fake peak"))
    assert check.status == "fail" and "above the peak" in check.seen
    assert check.value["fraction_of_peak"] > 1


def test_a_gemm_below_the_peak_is_ok():
    check = gemm_rate_check(CPU, peak=lambda name, dtype: PeakLookup(1e18, "a fake peak"))
    assert check.status == "ok"
    assert 0 < check.value["fraction_of_peak"] < 1


def test_a_device_without_a_catalog_peak_reports_its_rate():
    check = gemm_rate_check(CPU, device_name="Some CPU")
    assert check.status == "absent"
    assert check.value["tflops_best"] > 0
    assert "no training peak known" in check.value["peak_tflops_absent_reason"]


@pytest.mark.parametrize(("tflops", "status"), [(700.0, "ok"), (2000.0, "fail")])
def test_an_h100_gemm_against_the_shipped_catalog(monkeypatch, tflops, status):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))

    def run(shape, device, dtype, iters):
        assert (shape.M, dtype, device.type) == (4096, "bf16", "cuda")
        seconds = shape.flops / (tflops * 1e12)
        return {
            "status": "ok",
            "shape": shape.label(),
            "flops": shape.flops,
            "time_us_best": seconds * 1e6,
            "tflops_best": tflops,
            "tflops_median": tflops,
        }

    check = gemm_rate_check(CUDA, run=run, device_name="NVIDIA H100 80GB HBM3")
    assert check.status == status
    assert check.value["peak_tflops"] == pytest.approx(989)


# ------------------------------------------------------------------ chain.energy


class FakeTime:
    def __init__(self):
        self.now = 100.0

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


class FakeNvml:
    """One GPU drawing ``watts``: its energy counter (mJ) updated every 50 ms; its power
    reading ``reads`` times the truth."""

    def __init__(self, now, watts=70.0, reads=1.0, counter=True):
        self.now, self.watts, self.reads, self.counter = now, watts, reads, counter
        self.closed = 0

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        self.closed += 1

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return 0

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        if not self.counter:
            raise RuntimeError("Not Supported")
        updated = int(self.now() / 0.05) * 0.05
        return int(updated * self.watts * 1000)

    def nvmlDeviceGetPowerUsage(self, handle):
        return int(self.watts * self.reads * 1000)


def no_rapl(tmp_path):
    return RaplEnergy(tmp_path / "no-powercap")


@pytest.mark.parametrize(("reads", "status"), [(1.0, "ok"), (1.05, "ok"), (1.3, "fail")])
def test_nvml_counter_against_integrated_power(tmp_path, reads, status):
    fake = FakeTime()
    nvml = FakeNvml(fake.clock, reads=reads)
    check = energy_check(
        CUDA, nvml=nvml, rapl=no_rapl(tmp_path), clock=fake.clock, sleep=fake.sleep
    )
    assert check.status == status, check.seen
    gpu = check.value["gpu0"]
    assert gpu["counter_j"] == pytest.approx(70.0 * gpu["duration_s"], rel=1e-3)
    assert gpu["error_relative"] == pytest.approx(reads - 1, abs=0.01)
    assert nvml.closed == 1


def test_an_energy_counter_that_never_moves_fails(tmp_path):
    fake = FakeTime()
    nvml = FakeNvml(lambda: 100.0)
    check = energy_check(
        CUDA, nvml=nvml, rapl=no_rapl(tmp_path), clock=fake.clock, sleep=fake.sleep
    )
    assert check.status == "fail" and "did not change" in check.seen


def test_a_gpu_without_the_counter_has_nothing_to_compare(tmp_path):
    fake = FakeTime()
    nvml = FakeNvml(fake.clock, counter=False)
    check = energy_check(CUDA, nvml=nvml, rapl=no_rapl(tmp_path), sleep=fake.sleep)
    assert check.status == "absent" and "no total-energy counter" in check.seen


def rapl_tree(tmp_path, energies):
    zone = tmp_path / "intel-rapl:0"
    zone.mkdir()
    (zone / "name").write_text("package-0\n")
    values = iter(energies)

    def reader(path):
        return f"{next(values)}\n" if path.endswith("energy_uj") else open(path).read()

    return RaplEnergy(tmp_path, reader=reader)


@pytest.mark.parametrize(("energies", "status"), [((1_000_000, 3_000_000), "ok"), ((5, 5), "fail")])
def test_rapl_must_advance(tmp_path, energies, status):
    fake = FakeTime()
    check = energy_check(CPU, rapl=rapl_tree(tmp_path, energies), sleep=fake.sleep)
    assert check.status == status
    assert "rapl" in check.value


def test_energy_on_a_machine_without_sources_is_absent(tmp_path):
    check = energy_check(CPU, rapl=no_rapl(tmp_path))
    assert check.status == "absent" and "no RAPL powercap interface" in check.seen


# ------------------------------------------------------------------ chain.all_reduce


def outcome(results):
    reports = [
        {"rank": r, "backend": "gloo", "device": "cpu", "min": lo, "max": hi}
        | {"all_reduce_s": 0.001, "join_s": 0.2}
        for r, (lo, hi) in enumerate(results)
    ]
    return RanksOutcome(2, reports, elapsed_s=2.0)


def test_a_wrong_sum_fails():
    check = all_reduce_check(outcome([(3.0, 3.0), (3.0, 4.0)]))
    assert check.status == "fail" and "rank 1 got 3..4" in check.seen


def test_the_right_sum_is_ok():
    assert all_reduce_check(outcome([(3.0, 3.0), (3.0, 3.0)])).status == "ok"


def test_a_hang_is_killed_and_fails():
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    started = time.monotonic()
    launch = RanksLaunch(command=sleeper, start_timeout_s=0.5)
    check = all_reduce_check(launch.collect())
    assert time.monotonic() - started < 30  # killed after its 0.5 s, not left to sleep 60 s
    assert all(proc.poll() is not None for proc in launch.procs)  # killed
    assert check.status == "fail" and check.value["hung"]
    assert "did not start within 0.5 s" in check.seen


def test_a_rank_that_dies_fails_with_its_output():
    crash = [sys.executable, "-c", "import sys; print('no gloo here'); sys.exit(3)"]
    check = all_reduce_check(RanksLaunch(command=crash).collect())
    assert check.status == "fail" and "exited (3) early: no gloo here" in check.seen
