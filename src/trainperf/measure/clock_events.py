"""What holds a GPU's clocks during a case, and which of it makes the case unstable.

NVML reports why the clocks are below their maximum as a bitmask, the clocks-event
reasons (``nvmlDeviceGetCurrentClocksEventReasons``; ``...ThrottleReasons`` on old
drivers; bits in ``THROTTLE_REASONS``), and, per policy, a cumulative violation time
(``nvmlDeviceGetViolationStatus``; trainperf.measure.gpu_context reads both). They fall in
two classes:

- **slowdowns** (``SLOWDOWNS``), after which a throughput is not the device's: thermal
  (``sw_thermal_slowdown``, ``hw_thermal_slowdown``, the ``thermal`` violation counter)
  and hardware (``hw_slowdown``, ``hw_power_brake_slowdown``: the board protecting itself,
  or an external power brake);
- **conditions**, how the device runs: above all ``sw_power_cap``. A GPU under load sits
  at its software power limit by design (its boost clock rises until the power budget is
  spent), so an H100 training at its cap is simply an H100 training; how much of the
  window it spent there is recorded (``power_capped_share``), not flagged. So are
  ``sync_boost``, ``applications_clocks_setting``, ``display_clock_setting``,
  ``gpu_idle``, ``board_limit``, ``reliability``, unknown bits, and the power-cap, sync
  boost, board limit and reliability violation counters.

A power cap that drags the clock around during the window still shows: the SM clock
sampled through the window (trainperf.measure.gpu_context.WindowSampler) has a coefficient
of variation (``sm_clock_cv``, over the samples where the GPU was not idle), and one above
``SM_CLOCK_CV_UNSTABLE`` makes the case unstable whatever the reason.

Stored per run (``gpu_conditions``, over the run's GPUs; the most affected GPU counts,
since the slowest GPU sets the pace of a synchronous step): ``clocks_event_shares``
(each reason seen: its share of the window's samples), ``power_capped_share``
(``sw_power_cap``'s), ``violation_shares`` (each counter's growth over the window's
seconds), ``sm_clock_cv``, and ``throttled`` with ``throttle_reasons``: the slowdowns
only, seen at an edge, in a sample or by a counter. Per result (``over_runs``): shares are
means over the runs, ``sm_clock_cv`` the largest, the slowdowns their union. A value that
could not be read is None with ``<key>_absent_reason``. Results stored before this
classification keep their ``throttle_reasons`` as written; recombined, only their
slowdowns count. ``instability`` says in words what makes a case unstable.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

# Bits of nvmlClocksEventReasons (nvml.h): our name, the pynvml constant names (new, old),
# and the nvml.h value used when the module has neither.
THROTTLE_REASONS: list[tuple[str, tuple[str, ...], int]] = [
    ("gpu_idle", ("nvmlClocksEventReasonGpuIdle", "nvmlClocksThrottleReasonGpuIdle"), 0x1),
    (
        "applications_clocks_setting",
        (
            "nvmlClocksEventReasonApplicationsClocksSetting",
            "nvmlClocksThrottleReasonApplicationsClocksSetting",
        ),
        0x2,
    ),
    (
        "sw_power_cap",
        ("nvmlClocksEventReasonSwPowerCap", "nvmlClocksThrottleReasonSwPowerCap"),
        0x4,
    ),
    ("hw_slowdown", ("nvmlClocksEventReasonHwSlowdown", "nvmlClocksThrottleReasonHwSlowdown"), 0x8),
    ("sync_boost", ("nvmlClocksEventReasonSyncBoost", "nvmlClocksThrottleReasonSyncBoost"), 0x10),
    (
        "sw_thermal_slowdown",
        ("nvmlClocksEventReasonSwThermalSlowdown", "nvmlClocksThrottleReasonSwThermalSlowdown"),
        0x20,
    ),
    (
        "hw_thermal_slowdown",
        ("nvmlClocksEventReasonHwThermalSlowdown", "nvmlClocksThrottleReasonHwThermalSlowdown"),
        0x40,
    ),
    (
        "hw_power_brake_slowdown",
        (
            "nvmlClocksEventReasonHwPowerBrakeSlowdown",
            "nvmlClocksThrottleReasonHwPowerBrakeSlowdown",
        ),
        0x80,
    ),
    (
        "display_clock_setting",
        (
            "nvmlClocksEventReasonDisplayClockSetting",
            "nvmlClocksThrottleReasonDisplayClockSetting",
        ),
        0x100,
    ),
    ("board_limit", ("nvmlClocksThrottleReasonBoardLimit",), 0x200),
    ("reliability", ("nvmlClocksThrottleReasonReliability",), 0x400),
]

# The reasons (and violation counters, as ``<policy>_violation``) that make a case
# unstable, with the kind of slowdown each is; every other reason is a condition.
SLOWDOWNS = {
    "sw_thermal_slowdown": "thermal",
    "hw_thermal_slowdown": "thermal",
    "thermal_violation": "thermal",
    "hw_slowdown": "hardware",
    "hw_power_brake_slowdown": "hardware",
}
POWER_CAP = "sw_power_cap"
IDLE = "gpu_idle"

# An SM clock whose coefficient of variation over the window's busy samples exceeds this
# makes a case unstable. Why 2%: a compute-bound step's time follows the SM clock, so a
# clock that varies by more than 2% moves throughput by about as much as the precision
# the runs aim at by default (trainperf.case.result.DEFAULT_PRECISION, 2%); and a GPU
# that holds its clock changes it in 15 MHz steps (the SM clocks nvidia-smi lists as
# supported, ~0.8% of an H100's 1980 MHz), so a power cap dithering between neighbouring
# steps stays well below it. The CV and not the max/min spread: one sample taken as the
# window closes must not decide.
SM_CLOCK_CV_UNSTABLE = 0.02


def decode_throttle_reasons(mask: int, nvml: Any = None) -> list[str]:
    """Names of the bits set in a clocks-event bitmask; unknown bits as ``unknown_0x..``."""
    names = []
    known = 0
    for name, constants, default in THROTTLE_REASONS:
        bit = next((getattr(nvml, c) for c in constants if hasattr(nvml, c)), default)
        known |= bit
        if mask & bit:
            names.append(name)
    rest = mask & ~known
    names += [f"unknown_{1 << i:#x}" for i in range(rest.bit_length()) if rest >> i & 1]
    return names


def reason_shares(reasons: Sequence[list[str]]) -> dict[str, float] | None:
    """Each reason's share of the samples (``reasons``: the decoded names of each sample
    that read them); None without samples."""
    if not reasons:
        return None
    counts: dict[str, int] = {}
    for names in reasons:
        for name in names:
            counts[name] = counts.get(name, 0) + 1
    return {name: counts[name] / len(reasons) for name in sorted(counts)}


def clock_cv(clocks_mhz: Sequence[float]) -> float | None:
    """Population standard deviation over mean of the sampled clocks; None below 2."""
    if len(clocks_mhz) < 2:
        return None
    mean = statistics.fmean(clocks_mhz)
    return statistics.pstdev(clocks_mhz) / mean if mean > 0 else None


def violations_between(start: dict[str, Any], end: dict[str, Any]) -> dict[str, float]:
    """Seconds each policy held the clocks down between two contexts of one GPU."""
    before, after = start.get("violation_ns") or {}, end.get("violation_ns") or {}
    return {k: (after[k] - before[k]) / 1e9 for k in after if k in before}


def slowdowns(start: dict[str, Any], end: dict[str, Any]) -> list[str]:
    """The thermal and hardware slowdowns of a case on one GPU: reasons at its start or
    end, reasons the window sampler saw (``end["window"]``), and ``thermal_violation``
    when that counter grew between the edges. Empty when none, or when nothing could be
    read (``absent`` in the contexts says why)."""
    window = end.get("window") or {}
    seen: list[str] = []
    for reasons in (
        start.get("throttle_reasons"),
        end.get("throttle_reasons"),
        window.get("clocks_event_shares"),
    ):
        seen += [r for r in reasons or [] if r in SLOWDOWNS and r not in seen]
    grown = [f"{k}_violation" for k, s in violations_between(start, end).items() if s > 0]
    return seen + [v for v in grown if v in SLOWDOWNS]


def gpu_conditions(
    start_contexts: list[dict[str, Any]], end_contexts: list[dict[str, Any]], seconds: float
) -> dict[str, Any]:
    """A run's clock conditions over its GPUs (module doc), from the edge contexts and
    the window each end context holds; ``seconds``: the window's length."""
    pairs = list(zip(start_contexts, end_contexts, strict=True))
    reasons = sorted({r for s, e in pairs for r in slowdowns(s, e)})
    out: dict[str, Any] = {"throttled": bool(reasons), "throttle_reasons": reasons}
    windows = [(e.get("index"), e.get("window") or {}) for e in end_contexts]

    shares = [w.get("clocks_event_shares") for _, w in windows]
    if windows and None not in shares:
        names = sorted({n for s in shares for n in s})
        worst = {n: max(s.get(n, 0.0) for s in shares) for n in names}
        out |= {"clocks_event_shares": worst, "power_capped_share": worst.get(POWER_CAP, 0.0)}
    else:
        why = _why(windows, "clocks_event_shares", "no clocks-event reasons sampled")
        out |= {"clocks_event_shares": None, "clocks_event_shares_absent_reason": why}
        out |= {"power_capped_share": None, "power_capped_share_absent_reason": why}

    cvs = [w.get("sm_clock_cv") for _, w in windows]
    if windows and None not in cvs:
        out["sm_clock_cv"] = max(cvs)
    else:
        why = _why(windows, "sm_clock_cv", "fewer than 2 SM clock samples")
        out |= {"sm_clock_cv": None, "sm_clock_cv_absent_reason": why}

    grown = [violations_between(s, e) for s, e in pairs]
    if seconds > 0 and any(grown):
        policies = sorted({p for g in grown for p in g})
        out["violation_shares"] = {
            p: max(g[p] for g in grown if p in g) / seconds for p in policies
        }
    else:
        absent = [(s.get("absent") or {}).get("violation_ns") for s, _ in pairs]
        why = "; ".join(sorted({a for a in absent if a})) or "no violation counters"
        out |= {"violation_shares": None, "violation_shares_absent_reason": why}
    return out


def _why(windows: list[tuple[Any, dict[str, Any]]], key: str, default: str) -> str:
    missing = [
        f"gpu{i}: {w.get('absent') or w.get(f'{key}_absent_reason') or default}"
        for i, w in windows
        if w.get(key) is None
    ]
    return "; ".join(missing) or "no GPU context"


def over_runs(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A result's clock conditions from its runs' metrics (module doc); empty when no run
    was on a GPU. Runs stored before the classification count only their slowdowns."""
    if not any("throttled" in m for m in runs):
        return {}
    reasons = sorted({r for m in runs for r in m.get("throttle_reasons") or [] if r in SLOWDOWNS})
    out: dict[str, Any] = {"throttled": bool(reasons), "throttle_reasons": reasons}
    for key in ("clocks_event_shares", "violation_shares"):
        values = [m.get(key) for m in runs]
        if None in values:
            out |= {key: None, f"{key}_absent_reason": _runs_why(runs, key)}
            continue
        names = sorted({n for v in values for n in v})
        out[key] = {n: statistics.fmean(v.get(n, 0.0) for v in values) for n in names}
    capped = [m.get("power_capped_share") for m in runs]
    if None in capped:
        why = _runs_why(runs, "power_capped_share")
        out |= {"power_capped_share": None, "power_capped_share_absent_reason": why}
    else:
        out["power_capped_share"] = statistics.fmean(capped)
    cvs = [m.get("sm_clock_cv") for m in runs]
    if None in cvs:
        out |= {"sm_clock_cv": None, "sm_clock_cv_absent_reason": _runs_why(runs, "sm_clock_cv")}
    else:
        out["sm_clock_cv"] = max(cvs)
    return out


def _runs_why(runs: Sequence[dict[str, Any]], key: str) -> str:
    reasons = {
        m.get(f"{key}_absent_reason") or "not recorded (a run stored before it was)"
        for m in runs
        if m.get(key) is None
    }
    return "; ".join(sorted(reasons))


def instability(metrics: dict[str, Any]) -> list[str]:
    """Why a run or result on GPUs is unstable, in words: each thermal or hardware
    slowdown with its share of the window where it is known, and an SM clock that varied
    beyond ``SM_CLOCK_CV_UNSTABLE``. Empty when neither (a power cap alone is not)."""
    out = []
    for name in metrics.get("throttle_reasons") or []:
        kind = SLOWDOWNS.get(name)
        if kind is None:
            continue  # a result stored before the classification: a condition now
        if name.endswith("_violation"):
            share = (metrics.get("violation_shares") or {}).get(name.removesuffix("_violation"))
        else:
            share = (metrics.get("clocks_event_shares") or {}).get(name)
        text = f"{kind} slowdown ({name})"
        if share:
            text += f" {_percent(share)} of the window"
        out.append(text)
    cv = metrics.get("sm_clock_cv")
    if cv is not None and cv > SM_CLOCK_CV_UNSTABLE:
        out.append(
            f"SM clock varied {cv:.1%} during the window "
            f"(coefficient of variation, above {SM_CLOCK_CV_UNSTABLE:.0%})"
        )
    return out


def _percent(share: float) -> str:
    return f"{share:.0%}" if share >= 0.01 else "under 1%"
