"""Where does a DDP step's exposed communication go? Each gradient bucket's timeline on 2
gloo ranks of this machine, against the same all-reduces run alone in the same processes.

`trainperf predict` prices a DDP step as the backward with each bucket's all-reduce
overlapping it (slowed by the contention `micro collective --under-load` measures), the last
bucket's after it (trainperf.predict.model, module doc 3). On this 2-core VM it predicts
less exposed communication than `trainperf run --parallel ddp` measures (docs/predict.md,
"Interleaved rounds"). This script measures the parts that price sets apart, with the step
a ddp case runs (trainperf.step.training_step's ``build_model`` and ``make_step``, wrapped by
trainperf.parallel.wrap: the same model, bucket size and optimizer), its all-reduces timed
by a communication hook that calls DDP's own (``default_hooks.allreduce_hook``) and records
when each bucket was handed over and when its future completed. Per rank, medians over the
``--steps`` synchronized steps (and as many ``no_sync`` ones, alternating step by step):

- the step, synchronized and not;
- the backward: from the end of the forward to the last bucket handed over, against the
  whole backward of the ``no_sync`` steps: how much the overlapped all-reduces and DDP's
  copies slowed it (a ratio);
- the tail: from the last bucket handed over to the backward's return;
- each bucket's all-reduce from its hand-over to its end, against the same bytes
  all-reduced with the ranks in step and nothing else running (after the steps,
  ``--lockstep`` times per size): a ratio, which inside the backward is the contention, and
  which also holds any wait for the other rank's hand-over and for an all-reduce still
  running before it (ProcessGroupGloo's pool of threads runs two at once).

A report, not a gate: exit code 0 when every rank finished. CPU and gloo only (one
intra-op thread a rank, as predict_vs_measured.py): on a GPU the copies and NCCL's kernels
are another story (``trainperf profile``'s timeline shows them).

    python benchmarks/ddp_bucket_timeline.py [--network resnet18:8:128] [--steps 8]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MIB = 2**20


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--network", default="resnet18:8:128", help="MODEL:BATCH:SIZE")
    parser.add_argument("--steps", type=int, default=8, help="synchronized steps (and no_sync)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--lockstep", type=int, default=8, help="all-reduces alone per size")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # the output directory, in torchrun
    return parser.parse_args()


def worker(args: argparse.Namespace) -> None:
    """One rank: warm-up, then synchronized and no_sync steps alternating, then lockstep
    all-reduces of each bucket's bytes; its timings to ``rank.json`` in ``args.worker``."""
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    from trainperf import models
    from trainperf.case.spec import make_case
    from trainperf.parallel.wrap import wrap_parallel
    from trainperf.step.training_step import StepOptions, build_model, make_step

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    name, batch, size = args.network.split(":")
    spec = models.get(name)
    case = make_case(
        model=name,
        batch_size=int(batch),
        device="cpu",
        devices=world,
        parallel="ddp",
        threads=1,
        **{spec.size_name: int(size)},
    )
    device = torch.device("cpu")
    # The step a ddp case runs (build_training_step's parts): model, DDP wrapping, optimizer.
    model = build_model(spec, device, case.precision, case.seed, rank)
    wrap = functools.partial(wrap_parallel, case=case, device=device)
    step = make_step(spec, model, device, StepOptions.of(case), wrap=wrap)
    inputs, targets = spec.task.example_batch(case.device_batch, int(size), device)
    batch_of = lambda: (inputs, targets)  # noqa: E731
    marks: dict[str, float] = {}
    handed: list[tuple[float, float, int]] = []

    # No annotations: DDP checks them, and this module's are strings (``annotations``).
    def timed_hook(state, bucket):  # noqa: ANN001, ANN202
        buffer = bucket.buffer()
        start, nbytes = time.perf_counter(), buffer.numel() * buffer.element_size()
        future = default_hooks.allreduce_hook(None, bucket)

        def done(f: torch.futures.Future) -> torch.Tensor:
            handed.append((start, time.perf_counter(), nbytes))
            return f.value()

        return future.then(done)

    step.wrapped.register_comm_hook(None, timed_hook)
    # The forward's end and the backward's return (the optimizer's step comes right after).
    step.wrapped.register_forward_hook(lambda *_: marks.__setitem__("forward", time.perf_counter()))
    step.optimizer.register_step_pre_hook(
        lambda *_: marks.__setitem__("backward", time.perf_counter())
    )
    steps: dict[str, list[dict]] = {"sync": [], "no_sync": []}
    for i in range(args.warmup + 2 * args.steps):
        sync = i % 2 == 0
        dist.barrier()
        handed.clear()
        start = time.perf_counter()
        step(batch_of, sync=sync)
        end = time.perf_counter()
        if i >= args.warmup:
            forward_end = marks["forward"]
            steps["sync" if sync else "no_sync"].append(
                {
                    "forward_s": forward_end - start,
                    "backward_s": marks["backward"] - forward_end,
                    "step_s": end - start,
                    "buckets": [(a - forward_end, b - forward_end, n) for a, b, n in handed],
                }
            )
    sizes = sorted({n for s in steps["sync"] for _, _, n in s["buckets"]})
    lockstep = {}
    for nbytes in sizes:
        buffer = torch.ones(nbytes // 4)  # fp32 gradients: the case's precision
        times = []
        for _ in range(args.lockstep):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(buffer)
            times.append(time.perf_counter() - t0)
        lockstep[nbytes] = statistics.median(times)
    out = Path(args.worker) / f"{rank}.json"
    out.write_text(json.dumps({"steps": steps, "lockstep": list(lockstep.items())}))
    dist.destroy_process_group()


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:7.1f}"


def summarize(doc: dict) -> dict:
    """One rank's medians (seconds) and ratios from its ``rank.json`` (``worker``)."""
    sync, alone = doc["steps"]["sync"], doc["steps"]["no_sync"]
    lockstep = {int(nbytes): seconds for nbytes, seconds in doc["lockstep"]}
    median = statistics.median
    to_last = median(max(b[0] for b in s["buckets"]) for s in sync)
    no_sync_backward = median(s["backward_s"] for s in alone)
    # Buckets in the order they were handed over (the same every step: DDP's bucket order).
    # "behind": steps in which the bucket before it was still being all-reduced when it was
    # handed over (ProcessGroupGloo runs collectives on a pool of worker threads, so the two
    # may overlap or queue; its time from hand-over then holds that too).
    per_step = [sorted(s["buckets"]) for s in sync]
    buckets = []
    for position, (_, _, nbytes) in enumerate(per_step[0]):
        took = median(b[position][1] - b[position][0] for b in per_step)
        buckets.append(
            {
                "bytes": nbytes,
                "handed_over_s": median(b[position][0] for b in per_step),
                "in_step_s": took,
                "alone_s": lockstep[nbytes],
                "ratio": took / lockstep[nbytes],
                "behind": sum(
                    position > 0 and b[position - 1][1] > b[position][0] for b in per_step
                ),
            }
        )
    return {
        "steps": (len(sync), len(alone)),
        "step_s": (median(s["step_s"] for s in sync), median(s["step_s"] for s in alone)),
        "to_last_bucket_s": to_last,
        "no_sync_backward_s": no_sync_backward,
        "backward_ratio": to_last / no_sync_backward,
        "tail_s": median(s["backward_s"] - max(b[0] for b in s["buckets"]) for s in sync),
        "buckets": buckets,
    }


def report(rank: int, summary: dict) -> None:
    synced, alone = summary["steps"]
    print(
        f"rank {rank}: medians over {synced} synchronized and {alone} no_sync steps; "
        "times from the forward's end; an all-reduce in the step includes waiting for the "
        "other rank to hand over the same bucket"
    )
    step_sync, step_alone = summary["step_s"]
    print(f"  step {ms(step_sync)} ms synchronized, {ms(step_alone)} without")
    print(
        f"  backward to the last bucket handed over {ms(summary['to_last_bucket_s'])} ms, the "
        f"no_sync backward {ms(summary['no_sync_backward_s'])}: ratio "
        f"{summary['backward_ratio']:.3f}"
    )
    print(f"  tail: last bucket handed over to the backward's return {ms(summary['tail_s'])} ms")
    for position, b in enumerate(summary["buckets"]):
        print(
            f"  bucket {position + 1:2d} ({b['bytes'] / MIB:6.1f} MiB): handed over at "
            f"{ms(b['handed_over_s'])} ms, all-reduce {ms(b['in_step_s'])} in the step "
            f"({b['behind']}/{synced} behind the one before), {ms(b['alone_s'])} alone: "
            f"ratio {b['ratio']:.2f}"
        )


def main() -> int:
    args = parse()
    if args.worker:
        worker(args)
        return 0
    with tempfile.TemporaryDirectory(prefix="ddp-timeline-") as out:
        command = [
            sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={args.ranks}", __file__, "--worker", out,
            "--network", args.network, "--steps", str(args.steps),
            "--warmup", str(args.warmup), "--lockstep", str(args.lockstep),
        ]  # fmt: skip
        env = dict(os.environ, OMP_NUM_THREADS="1")
        if subprocess.run(command, env=env).returncode != 0:
            print("a rank failed", file=sys.stderr)
            return 1
        print(f"{args.network} on {args.ranks} gloo ranks, 1 thread each")
        for rank in range(args.ranks):
            report(rank, summarize(json.loads((Path(out) / f"{rank}.json").read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
