"""The measuring chain, measured: each instrument trainperf reads a number from, against a
quantity known in advance, with the error it shows (docs/doctor.md, "The measuring chain").

- ``chain.step_timer``: the benchmark's step timer (trainperf.measure.timer.make_timer:
  CUDA events on a GPU, the host clock on a CPU) around a known sleep (``time.sleep`` on a
  CPU, ``torch.cuda._sleep`` on the device on a GPU), against the host clock
  (``time.monotonic_ns``) read around the same window, the device synchronized inside it.
  The host window holds the timer's, so they differ by the cost of opening and closing a
  window; beyond ``TIMER_TOLERANCE`` (1%, the adaptive policy's default confidence target:
  a timer off by more would move every step time by more than trainperf resolves) it
  fails. A timer reading less than a sleep that lasts at least ``TIMER_SLEEP_S`` fails too.
- ``chain.allocator_peak``: trainperf's peak-memory reading (trainperf.measure.memory)
  against a known allocation of ``ALLOC_BYTES``.
- ``chain.gemm_rate``: one square GEMM of the micro-benchmark (trainperf.micro.gemm:
  2·M·N·K FLOPs, timed by the same step timer) against the catalog's training peak
  (trainperf.analysis.peaks): a rate above the peak is impossible, so it fails.
- ``chain.energy``: NVML's total-energy counter against the integral of power samples over
  the same window; RAPL, which has no independent power reading, is checked to advance.
- ``chain.all_reduce``: 2 ranks all_reduce a known value (trainperf.doctor.chain_ranks).

Every check measures and reports; none changes the machine (the CPU peak check resets this
process's own peak-RSS mark, as a fresh worker process starts with one).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from trainperf.doctor.chain_ranks import RanksLaunch, RanksOutcome, expected_sum
from trainperf.doctor.checks import ABSENT, FAIL, OK, Check, absent, worst

# --- chain.step_timer
TIMER_SLEEP_S = 0.02
# The host bracket holds the timer's window, so a preemption just outside the timer (between
# the host's clock read and timer.start, or after timer.stop) lengthens the host reading only:
# the window judged is the least disturbed one, whose host bracket is the shortest. A timer
# that reads wrong does so in every window, that one included.
TIMER_WINDOWS = 5
# torch.cuda._sleep spins for this many SM clock cycles: ~20 ms at 2 GHz, ~40 ms at 1 GHz.
CUDA_SLEEP_CYCLES = 40_000_000
TIMER_TOLERANCE = 0.01
# CUDA's cudaEventElapsedTime: "a resolution of around 0.5 microseconds".
CUDA_EVENT_RESOLUTION_S = 0.5e-6

# --- chain.allocator_peak
ALLOC_BYTES = 64 * 2**20
# On a CPU the reading is the process's peak RSS: an allocation shows only once RSS passes
# the old peak, so the allocation grows by the gap; past this, the check is not made.
ALLOC_MAX_BYTES = 256 * 2**20
# The CUDA caching allocator counts whole blocks, 64 MiB is a whole number of them: any
# error is a misreading; 2 MiB is its large-block granularity. RSS counts every page the
# process touches meanwhile (code paged in by the first call, the interpreter's own),
# about 1 MiB here: 5% of the allocation still tells a reading that misses it (-100%),
# counts it twice (+100%) or mistakes its unit (x1024).
PEAK_TOLERANCE_BYTES = {"cuda": 2 * 2**20, "cpu": ALLOC_BYTES // 20}

# --- chain.gemm_rate
GEMM_SIZE = {"cuda": 4096, "cpu": 512}  # M = N = K: tens of ms on a 2-core CPU
GEMM_ABOVE_PEAK = TIMER_TOLERANCE  # a timer within its tolerance cannot lift a rate further

# --- chain.energy
ENERGY_WINDOW_S = 1.0
POWER_INTERVAL_S = 0.01
COUNTER_WAIT_S = 0.5  # longest wait for the energy counter's next update
ENERGY_TOLERANCE = 0.10
# nvidia-smi's documentation of power.draw: "accurate to within +/- 5 watts".
POWER_ACCURACY_W = 5.0
RAPL_WINDOW_S = 0.2

WHY = {
    "chain.step_timer": "every step time trainperf records is read from this timer: "
    "a timer that misreads a known window misreads every step",
    "chain.allocator_peak": "the peak memory stored with each result, and what the memory "
    "predictor is checked against, is this reading",
    "chain.gemm_rate": "MFU divides measured FLOP/s by the catalog's peak: a rate above the "
    "peak means a timer that reads short or a wrong peak, and every MFU is off with it",
    "chain.energy": "energy per sample and samples per watt come from these counters: two "
    "sources of one GPU that disagree say one of them is wrong",
    "chain.all_reduce": "every distributed case needs a process group whose collectives "
    "return the right sum in bounded time; a hang or a wrong sum spoils scaling results",
}


# Why a sweep's verdict lacks the slower checks (they take seconds: a GEMM with its
# imports, a second of energy counters, two processes importing torch).
AT_SWEEP_START = "not run at the start of a sweep: `trainperf doctor` runs it"


def chain_checks(*, full: bool = True, device: str | None = None) -> list[Check]:
    """The measuring chain on ``device`` (default: the first GPU, else the CPU).

    The all_reduce ranks start first and import torch while this process does, and the
    timed checks (timer, GEMM, energy) wait until they are done, so they measure an idle
    machine. ``full=False`` (a sweep's verdict): the step timer and the allocator only,
    in a fraction of a second; the others are absent (``AT_SWEEP_START``).
    """
    cpu_only = device is not None and device.startswith("cpu")
    launch = RanksLaunch(device="cpu" if cpu_only else "auto") if full else None
    try:
        import torch

        dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        peak = guarded("chain.allocator_peak", lambda: allocator_peak_check(dev))
        if full:
            import trainperf.micro.gemm  # noqa: F401 - imported while the ranks start
        outcome = launch.collect() if launch is not None else None
    finally:
        if launch is not None:
            launch.close()
    timer = guarded("chain.step_timer", lambda: step_timer_check(dev))
    if not full:
        later = ("chain.gemm_rate", "chain.energy", "chain.all_reduce")
        return [timer, peak, *(absent(name, AT_SWEEP_START, WHY[name]) for name in later)]
    assert outcome is not None
    return [
        timer,
        peak,
        guarded("chain.gemm_rate", lambda: gemm_rate_check(dev)),
        guarded("chain.energy", lambda: energy_check(dev)),
        all_reduce_check(outcome),
    ]


def guarded(name: str, check: Callable[[], Check]) -> Check:
    """``check()``, or a failed check saying what it raised: the doctor reports, never
    crashes."""
    try:
        return check()
    except Exception as exc:
        return Check(name, FAIL, f"the check raised {type(exc).__name__}: {exc}", WHY[name])


# ------------------------------------------------------------------ chain.step_timer


def step_timer_check(
    device: Any,
    *,
    timer: Any = None,
    wait: Callable[[], object] | None = None,
    sleep_s: float | None = None,
    synchronize: Callable[[], object] | None = None,
    clock_ns: Callable[[], int] = time.monotonic_ns,
    windows: int = TIMER_WINDOWS,
) -> Check:
    """The step timer against the host clock around ``windows`` known waits.

    Defaults: the timer ``make_timer`` gives the benchmark for ``device``; the wait
    ``time.sleep(TIMER_SLEEP_S)`` on a CPU (``sleep_s``: it lasts at least that) or
    ``torch.cuda._sleep(CUDA_SLEEP_CYCLES)`` on a GPU (its length in seconds depends on
    the clock: only the host comparison applies). ``synchronize`` runs inside the host
    window at both edges (``torch.cuda.synchronize`` on a GPU).
    """
    from trainperf.measure.timer import CudaEventTimer, HostTimer, make_timer

    name = "chain.step_timer"
    cuda = device.type == "cuda"
    timer = timer if timer is not None else make_timer(device.type)
    if wait is None:
        import torch

        if cuda:
            wait = partial(torch.cuda._sleep, CUDA_SLEEP_CYCLES)
        else:
            wait, sleep_s = partial(time.sleep, TIMER_SLEEP_S), TIMER_SLEEP_S
    if synchronize is None:
        import torch

        synchronize = partial(torch.cuda.synchronize, device) if cuda else (lambda: None)
    wait()  # untimed: a GPU loads the sleep kernel on its first launch (lazy loading)
    synchronize()
    host_s = []
    for _ in range(windows):
        synchronize()
        begin = clock_ns()
        timer.start()
        wait()
        timer.stop()
        synchronize()
        host_s.append((clock_ns() - begin) / 1e9)
    timer_s = timer.durations()[-windows:]
    errors = [(t - h) / h for t, h in zip(timer_s, host_s, strict=True)]
    judged = min(range(windows), key=host_s.__getitem__)  # the least disturbed (above)
    error = errors[judged]
    resolution = {
        HostTimer: time.get_clock_info("perf_counter").resolution,
        CudaEventTimer: CUDA_EVENT_RESOLUTION_S,
    }.get(type(timer))
    value = {
        "timer": type(timer).__name__,
        "windows": windows,
        "sleep_s": sleep_s,
        "timer_s": timer_s[judged],
        "host_s": host_s[judged],
        "error_s": timer_s[judged] - host_s[judged],
        "error_relative": error,
        "worst_error_relative": max(errors, key=abs),
        "tolerance_relative": TIMER_TOLERANCE,
        "timer_resolution_s": resolution,
        "host_clock": "time.monotonic_ns",
        "host_resolution_s": time.get_clock_info("monotonic").resolution,
    }
    waited = f"a {sleep_s * 1e3:g} ms sleep" if sleep_s else f"{CUDA_SLEEP_CYCLES:,} GPU cycles"
    seen = (
        f"{value['timer']} read {value['timer_s'] * 1e3:.3f} ms for {waited}, the host clock "
        f"{value['host_s'] * 1e3:.3f} ms: error {error:+.3%} (the shortest of {windows} "
        f"host brackets; "
        f"tolerance {TIMER_TOLERANCE:.0%}), resolution {_seconds(resolution)}"
    )
    short = sleep_s is not None and min(timer_s) < sleep_s - (resolution or 0.0)
    if short:
        seen = f"shorter than the sleep (shortest {min(timer_s) * 1e3:.3f} ms): " + seen
    if short or abs(error) > TIMER_TOLERANCE:
        fix = (
            "nvidia-smi -q -d CLOCK,PERFORMANCE  # then rerun trainperf doctor on an idle GPU"
            if cuda
            else "cat /sys/devices/system/clocksource/clocksource0/current_clocksource  "
            "# tsc expected; then rerun trainperf doctor on an idle machine"
        )
        return Check(name, FAIL, seen, WHY[name], fix, value)
    return Check(name, OK, seen, WHY[name], value=value)


def _seconds(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    return f"{seconds * 1e9:g} ns" if seconds < 1e-6 else f"{seconds * 1e6:g} us"


# ------------------------------------------------------------------ chain.allocator_peak


def allocator_peak_check(device: Any, *, read: Callable[..., Any] | None = None) -> Check:
    """trainperf's peak-memory reading (``read``, default ``read_peak``) against a known
    allocation: on a GPU ``reset_peak`` then ``ALLOC_BYTES`` more than is allocated; on a
    CPU the peak RSS (ru_maxrss), which no call of trainperf resets, so this process's mark
    is reset through /proc/self/clear_refs where Linux allows (a fresh worker starts with
    none) and the allocation grows by whatever gap is left above the current RSS."""
    import torch

    from trainperf.measure.memory import read_peak, reset_peak

    name = "chain.allocator_peak"
    read = read or read_peak
    if device.type == "cuda":
        reset_peak(device)
        baseline = int(torch.cuda.memory_allocated(device))
        size = ALLOC_BYTES
        block = torch.empty(size, dtype=torch.uint8, device=device)
        reading = read(device)
        how = "reset_peak (torch.cuda.reset_peak_memory_stats)"
    else:
        import psutil

        # Warm-up, as for any measurement: the first torch.ones of a process faults in
        # torch's code and first allocator pages (7 MiB with torch 2.13's CPU build), which
        # would land in the reading as if the block had allocated them.
        torch.ones(1024, dtype=torch.float32)
        how = "/proc/self/clear_refs" if _reset_rss_mark() else "none (peak RSS gap filled)"
        baseline = psutil.Process().memory_info().rss
        size = ALLOC_BYTES + max(0, read(device).mem_peak_bytes - baseline)
        if size > ALLOC_MAX_BYTES:
            reason = (
                f"this process's peak RSS is {(size - ALLOC_BYTES) / 2**20:.0f} MiB above its "
                "current RSS and cannot be reset here (/proc/self/clear_refs): a known "
                f"allocation would need {size / 2**20:.0f} MiB to show in it"
            )
            return absent(name, reason, WHY[name])
        # ones, not empty or zeros: every page written, so every page resident.
        block = torch.ones(size // 4, dtype=torch.float32)
        reading = read(device)
    del block
    expected = baseline + size
    error = reading.mem_peak_bytes - expected
    tolerance = PEAK_TOLERANCE_BYTES[device.type]
    value = {
        "allocated_bytes": size,
        "baseline_bytes": baseline,
        "expected_peak_bytes": expected,
        "read_peak_bytes": reading.mem_peak_bytes,
        "error_bytes": error,
        "error_relative": error / size,
        "tolerance_bytes": tolerance,
        "source": reading.source,
        "peak_reset": how,
    }
    seen = (
        f"{reading.source} read {reading.mem_peak_bytes / 2**20:.1f} MiB after "
        f"{size / 2**20:.0f} MiB allocated over {baseline / 2**20:.1f} MiB: error "
        f"{error / 2**20:+.2f} MiB ({error / size:+.2%}; tolerance {tolerance / 2**20:g} MiB)"
    )
    if abs(error) > tolerance:
        fix = None
        if device.type == "cuda":
            fix = "unset PYTORCH_CUDA_ALLOC_CONF  # an allocator backend other than native"
        return Check(name, FAIL, seen, WHY[name], fix, value)
    return Check(name, OK, seen, WHY[name], value=value)


def _reset_rss_mark(path: Path = Path("/proc/self/clear_refs")) -> bool:
    """Reset this process's peak RSS to its current RSS (Linux 4.0+: "5" to clear_refs)."""
    try:
        path.write_text("5")
    except OSError:
        return False
    return True


# ------------------------------------------------------------------ chain.gemm_rate


def gemm_rate_check(
    device: Any,
    *,
    peak: Callable[[str, str], Any] | None = None,
    run: Callable[..., dict[str, Any]] | None = None,
    device_name: str | None = None,
) -> Check:
    """A ``GEMM_SIZE`` square GEMM of trainperf.micro.gemm (``run``, default ``run_gemm``:
    its 3 warm-up calls, then the best of 5 timed) against ``peak`` (default the catalog's
    ``peak_flops``) of the device named ``device_name`` (default as the benchmark names it)
    at the GEMM's precision: bf16 from compute capability 8.0, fp16 from 7.0, else fp32."""
    from trainperf.analysis.peaks import peak_flops
    from trainperf.micro.gemm import GemmShape, run_gemm

    name = "chain.gemm_rate"
    dtype = _gemm_dtype(device)
    size = GEMM_SIZE.get(device.type, GEMM_SIZE["cpu"])
    row = (run or run_gemm)(GemmShape(size, size, size, native=True), device, dtype, iters=5)
    device_name = device_name or _device_name(device)
    if row["status"] != "ok":
        seen = f"the {row['shape']} {dtype} GEMM did not run ({row['status']}): {row['reason']}"
        return Check(name, FAIL, seen, WHY[name])
    lookup = (peak or peak_flops)(device_name, dtype)
    tflops = row["tflops_best"]
    value: dict[str, Any] = {
        "device": device_name,
        "shape": row["shape"],
        "dtype": dtype,
        "flops": row["flops"],
        "time_s_best": row["time_us_best"] / 1e6,
        "tflops_best": tflops,
        "tflops_median": row["tflops_median"],
        "peak_tflops": None,
        "fraction_of_peak": None,
    }
    rate = f"{row['shape']} {dtype}: {tflops:.3g} TFLOP/s (best of 5)"
    if lookup.flops_per_s is None:
        value["peak_tflops_absent_reason"] = lookup.absent_reason
        seen = f"{rate}; nothing to compare it with: {lookup.absent_reason}"
        return Check(name, ABSENT, seen, WHY[name], value=value)
    peak_tflops = lookup.flops_per_s / 1e12
    fraction = tflops / peak_tflops
    value |= {
        "peak_tflops": peak_tflops,
        "fraction_of_peak": fraction,
        "peak_source": lookup.source,
    }
    seen = f"{rate}, {fraction:.1%} of the catalog's {peak_tflops:g} TFLOP/s"
    if fraction > 1 + GEMM_ABOVE_PEAK:
        fix = "trainperf doctor  # see chain.step_timer; else correct the catalog entry"
        return Check(name, FAIL, f"{seen}: above the peak", WHY[name], fix, value)
    return Check(name, OK, seen, WHY[name], value=value)


def _gemm_dtype(device: Any) -> str:
    if device.type != "cuda":
        return "fp32"
    import torch

    capability = torch.cuda.get_device_capability(device)
    return "bf16" if capability >= (8, 0) else "fp16" if capability >= (7, 0) else "fp32"


def _device_name(device: Any) -> str:
    """The name the benchmark looks the peak up by (trainperf.step.benchmark.device_info)."""
    if device.type == "cuda":
        import torch

        return torch.cuda.get_device_properties(device).name
    from trainperf.system.inventory import cpu_name

    return cpu_name()


# ------------------------------------------------------------------ chain.energy


def energy_check(
    device: Any,
    *,
    nvml: Any = None,
    rapl: Any = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
    window_s: float = ENERGY_WINDOW_S,
) -> Check:
    """On a GPU, NVML's total-energy counter against the integral of power samples over
    one window (``nvml``: pynvml or a fake); on every machine, the RAPL counters trainperf
    reads for the CPU (``rapl``: a RaplEnergy, default on /sys/class/powercap) are read
    over ``RAPL_WINDOW_S`` and must advance."""
    from trainperf.measure.energy_rapl import RaplEnergy

    name = "chain.energy"
    parts = []
    if device.type == "cuda":
        parts.append(_nvml_part(device.index or 0, nvml, clock, sleep, window_s))
    parts.append(_rapl_part(rapl if rapl is not None else RaplEnergy(), sleep))
    seen = "; ".join(part[1] for part in parts)
    measured = {key: val for status, _, key, val in parts if status != ABSENT}
    if not measured:
        return absent(name, seen, WHY[name])
    status = worst([part[0] for part in parts])
    fix = None
    if status == FAIL:
        fix = "nvidia-smi -q -d POWER  # compare power.draw with the energy counter"
    return Check(name, status, seen, WHY[name], fix, measured)


Part = tuple[str, str, str, Any]  # status, what was seen, value key, value


def _nvml_part(
    index: int,
    nvml: Any,
    clock: Callable[[], float],
    sleep: Callable[[float], object],
    window_s: float,
) -> Part:
    from trainperf.measure.energy import integrate
    from trainperf.measure.energy_nvml import (
        NvmlUnavailable,
        close_nvml,
        nvml_handle,
        open_nvml,
    )
    from trainperf.measure.gpu_power import power_probe

    key = f"gpu{index}"
    try:
        nvml = open_nvml(nvml)
    except NvmlUnavailable as exc:
        return ABSENT, f"{key}: {exc}", key, None
    try:
        handle = nvml_handle(nvml, index)
        counter = partial(nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
        try:
            counter()
        except Exception as exc:
            seen = (
                f"{key}: no total-energy counter ({exc}): trainperf integrates sampled power, "
                "with no second source to compare it with"
            )
            return ABSENT, seen, key, None
        probe = power_probe(nvml, handle)
        # Both edges on a counter update, so its update period is not an error at the edges.
        t0, e0 = _next_update(counter, clock, sleep)
        samples = [(t0, probe.read_w())]
        while clock() - t0 < window_s:
            sleep(POWER_INTERVAL_S)
            samples.append((clock(), probe.read_w()))
        t1, e1 = _next_update(counter, clock, sleep)
        samples.append((t1, probe.read_w()))
    except _Stuck as exc:
        return FAIL, f"{key}: {exc}", key, None
    finally:
        close_nvml(nvml)
    counter_j, integrated_j, duration = (e1 - e0) / 1000.0, integrate(samples), t1 - t0
    allowed_j = max(ENERGY_TOLERANCE * counter_j, POWER_ACCURACY_W * duration)
    error_j = integrated_j - counter_j
    value = {
        "counter_j": counter_j,
        "integrated_j": integrated_j,
        "duration_s": duration,
        "samples": len(samples),
        "power_source": probe.source,
        "error_j": error_j,
        "error_relative": error_j / counter_j if counter_j else None,
        "tolerance_j": allowed_j,
    }
    seen = (
        f"{key}: total-energy counter {counter_j:.2f} J over {duration:.2f} s, "
        f"{len(samples)} power samples ({probe.source}) integrate to {integrated_j:.2f} J: "
        f"error {error_j:+.2f} J (tolerance {allowed_j:.2f} J)"
    )
    return (FAIL if abs(error_j) > allowed_j else OK), seen, key, value


class _Stuck(Exception):
    pass


def _next_update(
    counter: Callable[[], int], clock: Callable[[], float], sleep: Callable[[float], object]
) -> tuple[float, int]:
    """The time and value of the counter's next change, polled every millisecond."""
    first = counter()
    start = clock()
    while clock() - start < COUNTER_WAIT_S:
        sleep(0.001)
        now = counter()
        if now != first:
            return clock(), now
    raise _Stuck(f"the total-energy counter did not change in {COUNTER_WAIT_S:g} s")


def _rapl_part(meter: Any, sleep: Callable[[float], object]) -> Part:
    if meter.missing_reason is not None:
        return ABSENT, f"CPU: {meter.missing_reason}", "rapl", None
    meter.begin()
    sleep(RAPL_WINDOW_S)
    readings = meter.end()
    read = [r for r in readings if r.energy_j is not None]
    if not read:
        return ABSENT, "CPU: " + "; ".join(r.absent_reason for r in readings), "rapl", None
    value = {r.domain: {"energy_j": r.energy_j, "average_power_w": r.average_power_w} for r in read}
    powers = ", ".join(f"{r.domain} {r.average_power_w:.1f} W" for r in read)
    stuck = [r.domain for r in read if r.energy_j <= 0]
    if stuck:
        seen = f"CPU: RAPL {', '.join(stuck)} did not advance in {RAPL_WINDOW_S:g} s ({powers})"
        return FAIL, seen, "rapl", value
    seen = (
        f"CPU: RAPL counters advance ({powers} over {RAPL_WINDOW_S:g} s); RAPL has no "
        "independent power reading to compare them with"
    )
    return OK, seen, "rapl", value


# ------------------------------------------------------------------ chain.all_reduce


def all_reduce_check(outcome: RanksOutcome) -> Check:
    """What the ranks of ``RanksLaunch`` reported: every element 1 + ... + world on every
    rank, or fail (a wrong sum, a rank that died, a hang)."""
    name = "chain.all_reduce"
    value: dict[str, Any] = {"world": outcome.world, "elapsed_s": outcome.elapsed_s}
    if outcome.error is not None:
        value["hung"] = outcome.hung
        fix = "NCCL_DEBUG=INFO TORCH_DISTRIBUTED_DEBUG=DETAIL trainperf doctor"
        return Check(name, FAIL, outcome.error, WHY[name], fix, value)
    expected = expected_sum(outcome.world)
    reports = outcome.reports
    value |= {
        "backend": reports[0]["backend"],
        "expected": expected,
        "results": [[r["min"], r["max"]] for r in reports],
        "all_reduce_s": max(r["all_reduce_s"] for r in reports),
        "join_s": max(r["join_s"] for r in reports),
    }
    where = f"{outcome.world} ranks on {value['backend']} ({reports[0]['device']})"
    wrong = [r for r in reports if not r["min"] == r["max"] == expected]
    if wrong:
        got = ", ".join(f"rank {r['rank']} got {r['min']:g}..{r['max']:g}" for r in wrong)
        seen = f"{where}: {got}, expected {expected:g} everywhere"
        fix = "NCCL_DEBUG=INFO trainperf doctor  # then check the GPUs' peer links"
        return Check(name, FAIL, seen, WHY[name], fix, value)
    seen = (
        f"{where}: sum {expected:g} as expected; all_reduce {value['all_reduce_s'] * 1e3:.2f} ms, "
        f"group formed in {value['join_s']:.2f} s, {outcome.elapsed_s:.1f} s from launch"
    )
    return Check(name, OK, seen, WHY[name], value=value)
