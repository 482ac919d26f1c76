"""The terms of a data-parallel step beyond compute and the α–β all-reduce, each measurable.

A synchronous data-parallel step on N ranks lasts (``trainperf.predict.model``)

    t_step(N) = E[max over N ranks of t_compute] + exposed communication + o(N)

and this module gives the two terms around the communication, and the measured link curve:

- **stragglers**: every step waits for its slowest rank, so a rank's step-time noise costs
  E[max of N draws] − E[one draw] per step. It grows with N (Hoefler, Schneider &
  Lumsdaine, "Characterizing the influence of system noise on large-scale applications by
  simulation", SC 2010): noise costs more at 512 ranks than at 8. From a measured
  distribution of step times x_1 ≤ … ≤ x_m (resampled, i.e. the N ranks draw independently
  from the empirical distribution), the order statistic is exact:

      E[max of N] = Σ_k x_(k) · ((k/m)^N − ((k−1)/m)^N)

  and from a standard deviation σ alone, for normal noise: E[max of N] − μ = σ · e_N, with
  e_N = ∫ x · N φ(x) Φ(x)^(N−1) dx (e_2 = 1/√π ≈ 0.564, e_8 ≈ 1.424, grows like √(2 ln N)).
  The empirical form cannot exceed the largest step it saw; for N far above the number of
  steps measured, the normal form extrapolates.

- **per-step overhead** o(N) of data parallelism that is neither compute nor the modelled
  all-reduce: gradient hooks and bucket copies, the launch and wait of each collective,
  the synchronisation itself, optimizer bookkeeping on flattened buckets. Modelled as

      o(1) = 0,   o(N) = a + b · log2(N)  for N ≥ 2

  (a: the cost of turning synchronisation on; b: what each doubling of the ranks adds, as
  the depth of a tree barrier grows with log2 N). Fitted by least squares to measured
  (N, o) pairs: ``fit_overhead``; with one device count, b = 0.

- **a measured link curve**: nccl-tests' bus bandwidth is defined so that it does not
  depend on the rank count (busbw = algbw · 2(p−1)/p for all-reduce; "Performance
  reported by NCCL tests", nccl-tests doc/PERFORMANCE.md), so an all-reduce of n bytes on
  p ranks takes t = n · 2(p−1)/p / busbw(n), with busbw(n) interpolated (log-log) between
  the message sizes `trainperf micro collective` measured, the largest size's busbw above
  them, and the smallest size's time below them (latency-bound); the curve of the nearest
  measured rank count is read, since latency does not cancel from busbw.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import integrate

SQRT_2, SQRT_2PI = math.sqrt(2.0), math.sqrt(2.0 * math.pi)


@lru_cache(maxsize=256)
def expected_max_standard_normal(n: int) -> float:
    """e_n = E[max of n independent N(0, 1)]: 0 for n = 1, 1/√π for n = 2."""
    if n < 1:
        raise ValueError(f"rank count must be >= 1, got {n}")
    if n == 1:
        return 0.0

    # φ and Φ from math, not scipy.stats.norm: the integrand is called ~250 times per n, and a
    # scalar call of a scipy.stats distribution costs ~60 µs (30 ms per n, nearly all of a
    # 1,024-count prediction); math's erfc is exact to double precision as well.
    def density(x: float) -> float:
        pdf = math.exp(-0.5 * x * x) / SQRT_2PI
        cdf = 0.5 * math.erfc(-x / SQRT_2)
        return x * n * pdf * cdf ** (n - 1)

    value, _ = integrate.quad(density, -12.0, 12.0, limit=200)
    return float(value)


def expected_max_empirical(samples: Sequence[float], n: int) -> float:
    """E[max of n draws with replacement from ``samples``] (exact order statistic)."""
    if n < 1:
        raise ValueError(f"rank count must be >= 1, got {n}")
    x = np.sort(np.asarray(samples, dtype=float))
    if x.size == 0:
        raise ValueError("no step times to draw from")
    k = np.arange(1, x.size + 1) / x.size
    weights = k**n - (k - 1 / x.size) ** n
    return float(np.dot(x, weights))


@dataclass(frozen=True)
class StepNoise:
    """A rank's step-time noise: a measured sample of step times, or a coefficient of variation.

    ``samples`` when stored runs give them (only their spread relative to their mean
    counts); else ``cv``, σ as a fraction of the mean step.
    """

    samples: tuple[float, ...] = ()
    cv: float | None = None
    source: str = ""

    def straggler_s(self, ranks: int, mean_step_s: float) -> float:
        """E[max of ``ranks`` steps] − E[one step], seconds, around a mean step of
        ``mean_step_s``; 0 on one rank or without noise.

        A measured sample is used relative to its own mean (its noise scales with the step,
        exact when the prediction is at the measured batch); beyond 4× as many ranks as it
        has steps, its coefficient of variation goes through the normal form instead.
        """
        if ranks <= 1:
            return 0.0
        if len(self.samples) >= 2:
            mean = float(np.mean(self.samples))
            if ranks <= 4 * len(self.samples):
                relative = expected_max_empirical(self.samples, ranks) / mean - 1
                return relative * mean_step_s
        return self.sigma(mean_step_s) * expected_max_standard_normal(ranks)

    def sigma(self, mean_step_s: float) -> float:
        """σ in seconds around a mean step of ``mean_step_s``."""
        if len(self.samples) >= 2:
            return float(np.std(self.samples, ddof=1) / np.mean(self.samples)) * mean_step_s
        if self.cv is not None:
            return self.cv * mean_step_s
        return 0.0


NO_NOISE = StepNoise(source="no step-time noise assumed")


@dataclass(frozen=True)
class Overhead:
    """o(N) = a + b·log2(N) seconds per step for N ≥ 2, 0 for N = 1 (module docstring)."""

    base_s: float = 0.0
    per_doubling_s: float = 0.0
    source: str = "none assumed"

    def seconds(self, ranks: int) -> float:
        if ranks <= 1:
            return 0.0
        return max(0.0, self.base_s + self.per_doubling_s * math.log2(ranks))


NO_OVERHEAD = Overhead()


def fit_overhead(points: Sequence[tuple[int, float]], source: str = "") -> Overhead:
    """Least-squares a, b of o(N) = a + b·log2 N from measured (N ≥ 2, o seconds) pairs.

    One distinct N gives b = 0 and a = the mean o. A negative b (more ranks cost less,
    which is noise) is refused by fitting b = 0.
    """
    usable = [(n, o) for n, o in points if n >= 2]
    if not usable:
        raise ValueError("no measured step overhead on 2 or more ranks")
    ranks = np.array([n for n, _ in usable], dtype=float)
    over = np.array([o for _, o in usable], dtype=float)
    if len(set(ranks.tolist())) < 2:
        return Overhead(float(over.mean()), 0.0, source)
    design = np.column_stack([np.ones_like(ranks), np.log2(ranks)])
    (a, b), *_ = np.linalg.lstsq(design, over, rcond=None)
    if b < 0:
        return Overhead(float(over.mean()), 0.0, source)
    return Overhead(float(a), float(b), source)


@dataclass(frozen=True)
class Contention:
    """How communication and compute slow each other when they run at once on one device:
    while both run, the compute advances at 1/``compute_slowdown`` and the collective at
    1/``comm_slowdown`` of its speed alone. A GPU's collectives run on their own engines
    (copy engines, NCCL's kernels beside the compute): 1 and 1, the overlap free. A CPU
    rank's gloo all-reduce runs on the cores and memory bus the backward pass uses: with
    nothing measured, the cores are time-shared, each half as fast (2 and 2), which makes
    overlapped work cost what it would in sequence. ``trainperf micro collective
    --under-load`` measures both factors, and a third: ``neighbour_slowdown``, how much
    slower a rank computes while the other ranks of its host compute too (cores, caches and
    the memory bus shared; 1 where each rank has a device of its own), which stretches every
    rank's compute whenever a host holds more than one.

    A CPU's communication can also have cores of its own (``reserved_communication_cores``):
    Intel's MLSL pins its endpoint servers, and oneCCL its workers, to k of the rank's C
    cores and starts the compute on the other C − k. The collectives then overlap the
    backward as on a GPU (1 and 1), and what they cost is those cores: on two ranks or
    more the compute takes C / (C − k) of its time on one device, which reserved none (the
    compute's rate taken as proportional to its cores).

    The two slowdowns depend on the message: a small all-reduce is mostly latency, and
    takes less of the cores and of the memory bus than a large one (2 gloo ranks on the
    2-vCPU dev VM, six runs: the all-reduce 1.2-1.8x slower beside a GEMM at 1 MiB, mean
    1.5x; 1.4-2.6x at 16 and 64 MiB, mean 2.0x). ``by_bytes`` holds them per message size
    where ``--under-load`` measured them, ``(bytes, compute_slowdown, comm_slowdown)`` in
    increasing size, and ``at`` reads them at a bucket's size; the two scalars summarise
    them (the medians over the sizes)."""

    compute_slowdown: float
    comm_slowdown: float
    source: str = ""
    neighbour_slowdown: float = 1.0
    # (k, C): k of each rank's C cores serve its communication on N >= 2 ranks; None: none.
    reserved_communication_cores: tuple[int, int] | None = None
    by_bytes: tuple[tuple[float, float, float], ...] = ()

    def __post_init__(self) -> None:
        reserved = self.reserved_communication_cores
        if reserved is not None and not 0 < reserved[0] < reserved[1]:
            raise ValueError(f"reserved cores must be 1 to C - 1 of C, got {reserved}")
        sizes = [size for size, _, _ in self.by_bytes]
        if any(size <= 0 for size in sizes) or sizes != sorted(set(sizes)):
            raise ValueError(f"by_bytes needs distinct positive sizes, increasing: {sizes}")

    @property
    def free(self) -> bool:
        """Communication overlaps compute at no cost to its speed (the neighbours and any
        reserved cores aside)."""
        slowdowns = [(self.compute_slowdown, self.comm_slowdown)]
        slowdowns += [(compute, comm) for _, compute, comm in self.by_bytes]
        return all(compute == 1 and comm == 1 for compute, comm in slowdowns)

    def at(self, n_bytes: float) -> tuple[float, float]:
        """(compute_slowdown, comm_slowdown) while an all-reduce of ``n_bytes`` runs: from
        ``by_bytes``, linear in log2(bytes) between the measured sizes and held beyond the
        smallest and the largest; the two scalars where none was measured."""
        if not self.by_bytes:
            return self.compute_slowdown, self.comm_slowdown
        sizes, computes, comms = zip(*self.by_bytes, strict=True)
        log_sizes = np.log2(sizes)
        where = math.log2(max(n_bytes, 1e-300))  # np.interp holds the ends beyond them
        compute, comm = (float(np.interp(where, log_sizes, values)) for values in (computes, comms))
        return compute, comm

    def compute_factor(self, ranks: int, ranks_per_host: int) -> float:
        """Factor on a rank's compute time on ``ranks`` ranks with ``ranks_per_host`` of
        them on its host: the neighbours' slowdown where a host holds more than one, times
        C / (C − k) where k of its C cores serve the communication (on two ranks or more)."""
        factor = self.neighbour_slowdown if ranks_per_host > 1 else 1.0
        if self.reserved_communication_cores is not None and ranks > 1:
            reserved, cores = self.reserved_communication_cores
            factor *= cores / (cores - reserved)
        return factor


OWN_ENGINE = Contention(1.0, 1.0, "collectives on their own engine (GPU copy engines, NCCL)")
TIME_SHARED = Contention(
    2.0, 2.0, "the cores time-shared between compute and gloo's all-reduce (not measured)"
)


def compute_stretch_words(contention: Contention) -> list[str]:
    """The assumptions a prediction states for what stretches every rank's compute
    (``Contention.compute_factor``): neighbours on its host, cores given to communication."""
    words = []
    if contention.neighbour_slowdown != 1:
        words.append(
            f"ranks sharing a host: each computes {contention.neighbour_slowdown:.3g}x slower "
            f"while the others compute ({contention.source})"
        )
    if contention.reserved_communication_cores is not None:
        reserved, cores = contention.reserved_communication_cores
        free = " the collectives overlap the backward at no cost to either, and"
        overlap = free if contention.free else ""
        words.append(
            f"communication on {reserved} of each rank's {cores} cores, reserved for it:"
            f"{overlap} on 2 ranks or more the compute runs on the other {cores - reserved}, "
            f"{cores / (cores - reserved):.3g}x its time on one device ({contention.source})"
        )
    return words


def reserved_cores(reserved: int, cores: int, source: str) -> Contention:
    """Communication on ``reserved`` of a CPU rank's ``cores`` cores, the compute on the
    rest (``Contention.reserved_communication_cores``)."""
    return Contention(1.0, 1.0, source, reserved_communication_cores=(reserved, cores))


@dataclass(frozen=True)
class BatchCurve:
    """One device's step time against its batch, t(B) = fixed_s + per_sample_s · B, fitted
    to single-device throughputs measured at several batch sizes. The rate a device
    achieves falls as its batch shrinks (strong scaling, small nodes): the fixed part (kernel
    launches, the optimizer step, the framework's own work) stays while the samples go.
    ``batches``: the batch sizes measured."""

    fixed_s: float
    per_sample_s: float
    batches: tuple[int, ...]
    source: str = ""

    def seconds(self, batch: int) -> float:
        return self.fixed_s + self.per_sample_s * batch

    def throughput(self, batch: int) -> float:
        return batch / self.seconds(batch)


def fit_batch_curve(
    points: Sequence[tuple[int, float]],
    source: str = "",
    through: tuple[int, float] | None = None,
) -> BatchCurve:
    """Least squares of t(B) = a + b·B to measured (batch B, samples/s X) pairs, t = B / X,
    each point weighed by its own t (relative errors: small and large batches alike);
    ``through`` (B*, X*): the line through that point with the fitted slope instead, so that
    the measurement the rest of the calibration stands on is reproduced exactly.

    Needs two distinct batches. A negative a (the larger batches are relatively slower, as
    when they leave the caches) cannot be a fixed cost: it is refused by fitting a = 0, the
    rate then the mean per-sample time (or the anchor's); b must come out positive.
    """
    usable = [(int(b), float(x)) for b, x in points if b >= 1 and x > 0 and math.isfinite(x)]
    if len({b for b, _ in usable}) < 2:
        raise ValueError("fewer than 2 distinct batch sizes measured on one device")
    batch = np.array([b for b, _ in usable], dtype=float)
    step = batch / np.array([x for _, x in usable], dtype=float)
    design = np.column_stack([np.ones_like(batch), batch]) / step[:, None]
    (a, b), *_ = np.linalg.lstsq(design, np.ones_like(step), rcond=None)
    if b <= 0:
        raise ValueError("the step time does not grow with the batch: no per-sample time")
    if through is not None:
        anchor_batch, anchor_rate = through
        a = anchor_batch / anchor_rate - b * anchor_batch
        if a < 0:
            a, b = 0.0, 1 / anchor_rate
    elif a < 0:
        a, b = 0.0, float(np.mean(step / batch))
    return BatchCurve(float(a), float(b), tuple(sorted({b for b, _ in usable})), source)


@dataclass(frozen=True)
class BusBandwidthCurve:
    """busbw (bytes/s) per rank count and all-reduce message size, as `micro collective`
    measured it. busbw is meant not to depend on the rank count, but its latency-bound
    part does (2(p−1)·α against 2(p−1)/p), so each rank count keeps its own curve and a
    prediction reads the curve of the nearest measured rank count."""

    curves: tuple[tuple[int, tuple[float, ...], tuple[float, ...]], ...]  # (p, sizes, busbw)
    source: str = ""

    @classmethod
    def from_rows(
        cls, rows: Sequence[tuple[int, float, float]], source: str = ""
    ) -> BusBandwidthCurve:
        """From (ranks, size bytes, busbw bytes/s) rows; rows of one size are averaged."""
        table: dict[int, dict[float, list[float]]] = {}
        for ranks, size, busbw in rows:
            if ranks >= 2 and size > 0 and busbw > 0:
                table.setdefault(int(ranks), {}).setdefault(float(size), []).append(float(busbw))
        if not table:
            raise ValueError("no all_reduce row on 2 or more ranks with a positive bandwidth")
        curves = tuple(
            (p, tuple(sorted(by_size)), tuple(float(np.mean(by_size[s])) for s in sorted(by_size)))
            for p, by_size in sorted(table.items())
        )
        return cls(curves, source)

    @property
    def ranks(self) -> list[int]:
        return [p for p, _, _ in self.curves]

    def _curve(self, ranks: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
        _, sizes, busbw = min(self.curves, key=lambda c: (abs(c[0] - ranks), -c[0]))
        return sizes, busbw

    def busbw(self, n_bytes: float, ranks: int) -> float:
        """Log-log interpolation in size; the largest size's busbw above the measured range."""
        sizes, busbw = self._curve(ranks)
        if len(sizes) == 1 or n_bytes >= sizes[-1]:
            return busbw[-1]
        if n_bytes <= sizes[0]:
            return busbw[0]
        return float(np.exp(np.interp(np.log(n_bytes), np.log(sizes), np.log(busbw))))

    def allreduce_s(self, n_bytes: float, ranks: int) -> float:
        """t = n · 2(p−1)/p / busbw(n); below the smallest size, that size's time."""
        if ranks <= 1 or n_bytes <= 0:
            return 0.0
        n = max(n_bytes, self._curve(ranks)[0][0])
        return n * 2 * (ranks - 1) / ranks / self.busbw(n, ranks)
