"""Do the energy and context probes slow the benchmark? Throughput with them vs without.

One model, optimizer and batch are built once; blocks of N measured steps then alternate,
ABBA, between trainperf's measured loop with the case probes (energy meters: NVML's energy
counter or its power-sampling fallback on a GPU, RAPL on the CPU; clock and thermal
context at both edges) and the same loop without them. Interleaving short blocks cancels
what the machine adds by itself. Prints per pair the ratio on/off of the reported
samples/s and of the wall time of the block; the overhead (1 - median ratio) must stay
under 1%: exit code 1 otherwise. Also prints which energy sources were live, since a
machine with no readable counter measures only the cost of finding that out.

    python benchmarks/energy_overhead.py [--model cifarnet --batch-size 32 --size 32]
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from common import abba, overhead_parser, warmed_up_step
from trainperf.measure.policy import FixedPolicy
from trainperf.measure.probes import CaseProbes
from trainperf.measure.stats import summarize
from trainperf.measure.timed_steps import measure_steps
from trainperf.measure.timer import make_timer
from trainperf.step.training_step import TrainingStep

MAX_OVERHEAD = 0.01


def block(
    t: TrainingStep, device: torch.device, steps: int, probed: bool
) -> tuple[float, float, list]:
    """(reported samples/s, wall-clock samples/s, readings) of one block of N steps."""
    probes = CaseProbes(device) if probed else None
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    record = measure_steps(t.step, FixedPolicy(0, steps), make_timer(device.type), probes=probes)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    wall = t.samples_per_step * steps / (time.perf_counter() - start)
    reported = summarize(record.step_s, t.samples_per_step).samples_per_s_mean
    return reported, wall, probes.readings if probes else []


def main() -> int:
    args = overhead_parser(__doc__, steps=50, pairs=20).parse_args()

    _, device, training = warmed_up_step(args)

    reported, wall, readings = [], [], []
    blocks = abba(
        args.pairs,
        lambda: block(training, device, args.steps, True),
        lambda: block(training, device, args.steps, False),
    )
    for pair, on, off in blocks:
        readings = on[2]
        reported.append(on[0] / off[0])
        wall.append(on[1] / off[1])
        print(
            f"pair {pair + 1:2d}: off {off[0]:8.1f}  on {on[0]:8.1f}"
            f" samples/s  on/off {reported[-1]:.4f}  wall on/off {wall[-1]:.4f}",
            flush=True,
        )
    live = [f"{r.source}:{r.domain}" for r in readings if r.energy_j is not None]
    absent = [f"{r.source}:{r.domain} ({r.absent_reason})" for r in readings if r.energy_j is None]
    median, median_wall = statistics.median(reported), statistics.median(wall)
    print(
        f"{args.model} b{args.batch_size} @{args.size} on {args.device}, "
        f"{args.pairs} pairs of {args.steps} steps"
    )
    print(
        f"energy sources live: {', '.join(live) or 'none'}; absent: {', '.join(absent) or 'none'}"
    )
    print(
        f"median on/off: reported {median:.4f}, wall {median_wall:.4f}; overhead {1 - median:+.2%}"
    )
    if 1 - median > MAX_OVERHEAD:
        print(f"FAIL: the probes cost more than {MAX_OVERHEAD:.0%}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
