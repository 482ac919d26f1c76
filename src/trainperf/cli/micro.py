"""``trainperf micro KIND``: the micro-benchmark verbs (parse, run in a child, store, print).

Registered on the main group in trainperf.cli.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from trainperf.cli.common import (
    apply_options,
    batch_size_option,
    choice_option,
    count_option,
    db_option,
    device_option,
    emit_json,
    fail,
    format_option,
    json_option,
    one_output,
    rdzv_option,
    resolve_device,
    show_table,
    stderr,
    stdout,
    warn_deprecated,
)
from trainperf.cli.flag_types import (
    EXIT_FAILED_CASES,
    BadInput,
    PositiveInt,
    count_range,
    given_once,
    timeout_seconds,
)
from trainperf.cli.store_access import exit_if_not_stored, open_machine, stored_micro
from trainperf.core.limits import comma_items

DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8")
P2P_BYTES = "256M"  # bytes per copy of `micro p2p` by default


def _timing_options(warmup: int, iters: int) -> Any:
    def decorate(function: Any) -> Any:
        function = click.option("--iters", type=PositiveInt(), default=iters, show_default=True)(
            function
        )
        return click.option("--warmup", type=count_range(), default=warmup, show_default=True)(
            function
        )

    return decorate


def _timeout_option(function: Any) -> Any:
    return click.option(
        "--timeout",
        "timeout_s",
        type=timeout_seconds(),
        default=3600,
        show_default=True,
        help="seconds before the run is killed",
    )(function)


class _KindGroup(click.Group):
    """A group of one command per kind of trainperf.micro.KINDS: an unknown kind is refused
    with the registry's message, which lists the valid ones (click's names none)."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and not ctx.resilient_parsing:
            from trainperf.micro import unknown_kind

            raise BadInput(unknown_kind(cmd_name))
        return command


@click.group(cls=_KindGroup)
def micro() -> None:
    """Micro-benchmarks with the field's definitions (DeepBench, nccl-tests)."""


def _checked_device(device: str, capabilities: dict) -> str:
    """``--device`` resolved (auto) and checked against this machine."""
    device = resolve_device(device, capabilities)
    if device not in capabilities:
        raise BadInput(f"device '{device}' is not available on this machine")
    return device


@dataclass(frozen=True)
class _OneDevice:
    """The options every single-device kind shares, given to its command as one value."""

    device: str
    warmup: int
    iters: int
    timeout_s: float
    db: Path
    as_json: bool
    table_format: str

    def open(self) -> tuple[dict, str]:
        """This machine's record and the checked device (after the output options)."""
        one_output(self.as_json, self.table_format)
        record, capabilities = open_machine(self.db)
        return record, _checked_device(self.device, capabilities)

    def measure(self, record: dict, document: dict[str, Any], table: Any) -> None:
        """Run ``document`` with these timings, store it, print it with ``table``."""
        from trainperf.launch.runner import ChildJob

        document = document | {"warmup": self.warmup, "iters": self.iters}
        result = _execute(document, self.db, record, ChildJob(timeout_s=self.timeout_s))
        finish(result, self.as_json, lambda m: show_table(table(m), self.table_format))


def _one_device(warmup: int, iters: int) -> Any:
    """Decorator: the shared options of a single-device kind, passed as ``run``."""

    def decorate(command: Any) -> Any:
        @functools.wraps(command)
        def with_run(**options: Any) -> None:
            shared = {f.name: options.pop(f.name) for f in dataclasses.fields(_OneDevice)}
            command(run=_OneDevice(**shared), **options)

        shared_options = (
            device_option,
            _timing_options(warmup=warmup, iters=iters),
            _timeout_option,
            db_option(),
            json_option,
            format_option,
        )
        for option in reversed(shared_options):
            with_run = option(with_run)
        return with_run

    return decorate


def _execute(
    document: dict[str, Any],
    db: Path,
    record: dict,
    job: Any,
    rendezvous: str | None = None,
    where: str | None = None,
) -> dict[str, Any]:
    """Run the document in a child (or torchrun job), store it, return the result.
    ``where`` says where it runs (default: on the document's device)."""
    from trainperf.launch.runner import Interrupted, StopFlag, job_directory, run_job

    where = where or f"on {document['device']}"
    stderr.print(f"running micro {document['kind']} {where}", markup=False)
    try:
        with (
            job_directory() as tmp,
            StopFlag().installed() as stop,
        ):
            result = run_job(document, job, tmp, stop, rendezvous)
    except Interrupted as exc:
        fail(f"interrupted by {exc}: nothing stored", 128 + exc.signum)
    if result.get("follower"):
        stderr.print("this node took part; the node of rank 0 stores the result")
        sys.exit(0)
    return stored_micro(db, record, document, result)


def finish(result: dict[str, Any], as_json: bool, render: Any) -> None:
    """Print a micro-benchmark's result (``--json``: the document; else ``render`` of its
    metrics, or its failure); exit 1 when it failed or was not stored."""
    if as_json:
        emit_json(result)
    elif result["status"] == "ok":
        render(result["metrics"])
    else:
        stdout.print(
            f"{result['status']}: {(result.get('error') or {}).get('message', '')}", markup=False
        )
    exit_if_not_stored(result)
    if result["status"] != "ok":
        sys.exit(EXIT_FAILED_CASES)


def _bytes_options(default: str | None, help: str) -> Any:
    """``--bytes`` of a buffer (``micro memory``, ``micro p2p``), and ``--size``, its
    deprecated spelling (hidden): the same value, e.g. 256M."""
    return apply_options(
        (
            click.option("--bytes", "bytes_text", help=help, show_default=default or False),
            click.option("--size", "old_size", hidden=True),
        )
    )


def _buffer_bytes(bytes_text: str | None, old_size: str | None, default: str | None) -> int | None:
    """The bytes of a buffer from --bytes (or --size, deprecated): at least one byte (0
    must not fall back to a default); ``default`` when neither is given."""

    if old_size is not None:
        warn_deprecated("--size", "--bytes")
    flag, text = given_once({"--bytes": bytes_text, "--size": old_size}) or ("--bytes", default)
    if text is None:
        return None
    return byte_count(flag, text)


def byte_count(flag: str, text: str) -> int:
    """The bytes ``flag`` gives (``harness.parse_bytes``: 8M), at least 1, or bad input
    naming the flag."""
    from trainperf.micro.harness import parse_bytes

    try:
        size_bytes = parse_bytes(text)
    except ValueError as exc:
        raise BadInput(f"{flag}: {exc}") from None
    if size_bytes < 1:
        raise BadInput(f"{flag} {text}: a buffer needs at least 1 byte, e.g. 256M")
    return size_bytes


class DtypeList(click.ParamType):
    """'fp32,bf16': one or more of ``allowed``, each measured in turn."""

    name = "dtypes"

    def __init__(self, allowed: tuple[str, ...]) -> None:
        self.allowed = allowed

    def convert(self, value: Any, param: Any, ctx: Any) -> list[str]:
        if isinstance(value, list):
            return value
        try:
            names = list(comma_items(str(value), "--dtype"))
        except ValueError as exc:
            raise BadInput(f"{exc} (allowed {', '.join(self.allowed)})") from None
        if any(d not in self.allowed for d in names):
            raise BadInput(
                f"--dtype '{value}' is not valid: allowed {', '.join(self.allowed)} (comma list)"
            )
        return names


def dtypes_option(allowed: tuple[str, ...]) -> Any:
    """``--dtype``: a comma list of a kind's dtypes, declared once for ``gemm`` and ``conv``."""
    return click.option(
        "--dtype",
        "dtypes",
        type=DtypeList(allowed),
        default="fp32",
        show_default=True,
        help="comma list of " + ", ".join(allowed),
    )


@micro.command()
@dtypes_option(DTYPES)
@choice_option(
    "--shapes",
    ["deepbench", "square", "all"],
    "all",
    "the 160 DeepBench training GEMMs, a square sweep, or both",
)
@click.option("--limit", type=PositiveInt(), help="only the first N shapes")
@click.option("--no-flush", is_flag=True, help="do not flush the caches between iterations")
@_one_device(warmup=3, iters=10)
def gemm(
    dtypes: list[str], shapes: str, limit: int | None, no_flush: bool, run: _OneDevice
) -> None:
    """Matrix multiply TFLOP/s (2·M·N·K / time): mean, median and best per shape (fp8 with
    and without fast accumulation)."""
    from trainperf.report.micro import gemm_table

    record, device = run.open()
    document = {"kind": "gemm", "device": device, "dtypes": dtypes, "shapes": shapes}
    run.measure(record, document | {"limit": limit, "flush": not no_flush}, gemm_table)


@micro.command()
@dtypes_option(DTYPES[:4])
@click.option("--model", "-m", help="the convolutions of a zoo model instead of DeepBench's")
@click.option("--no-cudnn-benchmark", is_flag=True, help="switch cuDNN autotuning off")
@batch_size_option(32, "with --model")
@click.option("--limit", type=PositiveInt(), help="only the first N shapes")
@click.option("--no-flush", is_flag=True, help="do not flush the caches between iterations")
@_one_device(warmup=2, iters=5)
def conv(
    dtypes: list[str],
    model: str | None,
    no_cudnn_benchmark: bool,
    batch_size: int,
    limit: int | None,
    no_flush: bool,
    run: _OneDevice,
) -> None:
    """Convolution forward, backward-data and backward-filter times and TFLOP/s."""
    from trainperf.report.micro import conv_table

    if model is not None:
        from trainperf import models

        try:
            models.look_up(model)  # a user's network runs only in the worker
        except ValueError as exc:
            raise BadInput(str(exc)) from None
    record, resolved = run.open()
    if "tf32" in dtypes and resolved != "cuda":
        raise BadInput("--dtype tf32 is a CUDA tensor-core mode: on the CPU use fp32, fp16 or bf16")
    document = {
        "kind": "conv",
        "device": resolved,
        "dtypes": dtypes,
        "cudnn_benchmark": not no_cudnn_benchmark,
        "model": model,
        "batch_size": batch_size,
        "limit": limit,
        "flush": not no_flush,
    }
    run.measure(record, document, conv_table)


@micro.command()
@_bytes_options(None, "bytes per copy, e.g. 256M (default: 256M on a GPU, 64M on a CPU)")
@_one_device(warmup=3, iters=20)
def memory(bytes_text: str | None, old_size: str | None, run: _OneDevice) -> None:
    """Copy bandwidth: device to device (CPU: memory copy), host to/from device."""
    from trainperf.report.micro import memory_table

    size_bytes = _buffer_bytes(bytes_text, old_size, None)
    record, device = run.open()
    document = {"kind": "memory", "device": device, "size_bytes": size_bytes}
    run.measure(record, document, memory_table)


@micro.command()
@_bytes_options(P2P_BYTES, "bytes per copy, e.g. 256M")
@_timeout_option
@db_option()
@json_option
def p2p(
    bytes_text: str | None, old_size: str | None, timeout_s: float, db: Path, as_json: bool
) -> None:
    """GPU pairs: connectivity, uni/bidirectional bandwidth and latency matrices (device
    time, copies queued behind a spin kernel as in p2pBandwidthLatencyTest)."""
    from trainperf.launch.runner import ChildJob
    from trainperf.report.micro import p2p_text

    size_bytes = _buffer_bytes(bytes_text, old_size, P2P_BYTES)
    record, capabilities = open_machine(db)
    gpus = capabilities["cuda"].count if "cuda" in capabilities else 0
    # Every GPU pair, so no one device; a machine without two says so, not "on cuda".
    where = f"on {gpus} CUDA GPUs"
    if gpus < 2:
        where = f"(this machine has {gpus} CUDA GPU{'' if gpus == 1 else 's'}: no pair)"
    document = {"kind": "p2p", "device": "cuda", "size_bytes": size_bytes}
    result = _execute(document, db, record, ChildJob(timeout_s=timeout_s), where=where)
    if result["status"] == "ok" and result["metrics"].get("status") == "skipped":
        result["status"] = "skipped"
        result["error"] = {"type": "skipped", "message": result["metrics"]["reason"]}
    if as_json:
        emit_json(result)
    elif result["status"] == "ok":
        stdout.print(p2p_text(result["metrics"]), markup=False)
    else:
        stdout.print(f"{result['status']}: {result['error']['message']}", markup=False)
    if result["status"] not in ("ok", "skipped"):
        sys.exit(EXIT_FAILED_CASES)


@micro.command()
@click.option(
    "--ops",
    default="all_reduce,all_gather,reduce_scatter,broadcast,reduce,all_to_all,sendrecv",
    show_default=True,
    help="comma list of collectives",
)
@click.option(
    "--devices",
    type=PositiveInt(),
    help="devices per node, one process each, as in run [default: 2]",
)
@click.option("--nprocs", type=PositiveInt(), hidden=True)  # deprecated: --devices
@count_option("--nodes", 1)
@rdzv_option
@click.option("--min-bytes", default="1K", show_default=True)
@click.option("--max-bytes", default="64M", show_default=True)
@count_option("--factor", 2)
@click.option(
    "--dtype", default="fp32", show_default=True, type=click.Choice(["fp32", "fp16", "bf16"])
)
@click.option(
    "--under-load",
    is_flag=True,
    help="all_reduce beside a GEMM on the same ranks: busbw and GEMM TFLOP/s alone, together "
    "and the slowdowns",
)
@click.option(
    "--gemm-size",
    type=PositiveInt(),
    help="with --under-load: side N of the N×N×N GEMM [default: 256 on a CPU, 4096 on a GPU]",
)
@click.option(
    "--repeats",
    type=PositiveInt(),
    help="with --under-load: alone/together repetitions, interleaved [default: 3]",
)
@device_option
@_timing_options(warmup=5, iters=20)
@_timeout_option
@db_option()
@json_option
def collective(
    ops: str,
    devices: int | None,
    nprocs: int | None,
    nodes: int,
    rdzv_endpoint: str | None,
    min_bytes: str,
    max_bytes: str,
    factor: int,
    dtype: str,
    under_load: bool,
    gemm_size: int | None,
    repeats: int | None,
    device: str,
    warmup: int,
    iters: int,
    timeout_s: float,
    db: Path,
    as_json: bool,
) -> None:
    """Collectives over torch.distributed with nccl-tests' algbw and busbw definitions
    (--under-load: all_reduce and a GEMM competing, each against itself alone)."""
    from trainperf.launch.runner import ChildJob
    from trainperf.micro import collective as coll

    if nprocs is not None:
        warn_deprecated("--nprocs", "--devices")
    nprocs = (given_once({"--devices": devices, "--nprocs": nprocs}) or ("", 2))[1]

    try:
        names = list(comma_items(ops, "--ops"))
    except ValueError as exc:
        raise BadInput(f"{exc} (allowed {', '.join(coll.OPS)})") from None
    unknown = [o for o in names if o not in coll.OPS]
    if unknown:
        raise BadInput(f"--ops '{ops}' is not valid: allowed {', '.join(coll.OPS)}")
    load = _under_load(under_load, gemm_size, repeats, names, nprocs * nodes)
    if load is not None:
        names = list(load.pop("ops"))
    low, high = byte_count("--min-bytes", min_bytes), byte_count("--max-bytes", max_bytes)
    if factor < 2:
        raise BadInput(f"--factor {factor}: each size is the last times at least 2")
    if high < low:
        raise BadInput(f"--max-bytes {max_bytes} is smaller than --min-bytes {min_bytes}")
    record, capabilities = open_machine(db)
    resolved = _checked_device(device, capabilities)
    if capabilities[resolved].count < nprocs:  # a CPU rank per core at most (check_case)
        have = capabilities[resolved].count
        units = "GPUs" if resolved == "cuda" else "CPU cores (a rank per core at most)"
        raise BadInput(f"--devices {nprocs} needs {nprocs} {units}; this machine has {have}")
    document = {
        "kind": "collective",
        "ops": names,
        "min_bytes": low,
        "max_bytes": high,
        "factor": factor,
        "dtype": dtype,
        "warmup": warmup,
        "iters": iters,
        "device": resolved,
        "timeout_s": timeout_s,
    }
    if load is not None:
        from trainperf.micro.contention import DEFAULT_GEMM_N

        document["under_load"] = {"gemm_n": load["gemm_n"] or DEFAULT_GEMM_N[resolved]} | {
            "repeats": load["repeats"]
        }
    job = ChildJob(True, nprocs, nodes, timeout_s, "trainperf-collective")
    if rdzv_endpoint:
        stderr.print("start this same command on each node")
    result = _execute(document, db, record, job, rdzv_endpoint)

    def render(metrics: dict) -> None:
        world = (result.get("device") or {}).get("world_size", nprocs * nodes)
        backend = (result.get("device") or {}).get("backend", "")
        if "under_load" in metrics:
            from trainperf.micro.contention import format_table as load_table

            table = load_table(metrics, world, backend)
        else:
            table = coll.format_table(metrics["rows"], world, backend, metrics.get("skipped"))
        stdout.print(table, markup=False, highlight=False)

    finish(result, as_json, render)


def _under_load(
    under_load: bool, gemm_size: int | None, repeats: int | None, ops: list[str], ranks: int
) -> dict[str, Any] | None:
    """``--under-load``'s settings (ops, gemm_n or None for the device's default, repeats),
    or None without the flag; its options without it, another op or one rank are refused."""
    from trainperf.micro.contention import DEFAULT_REPEATS, UNDER_LOAD_OPS

    if not under_load:
        given = [f for f, v in (("--gemm-size", gemm_size), ("--repeats", repeats)) if v]
        if given:
            raise BadInput(f"{given[0]} applies with --under-load only")
        return None
    ctx = click.get_current_context()
    if ctx.get_parameter_source("ops") is click.core.ParameterSource.DEFAULT:
        ops = list(UNDER_LOAD_OPS)  # the default list of every op means "the one that applies"
    if tuple(ops) != UNDER_LOAD_OPS:
        raise BadInput(
            f"--under-load measures {', '.join(UNDER_LOAD_OPS)} only; --ops is {','.join(ops)}"
        )
    if ranks < 2:
        raise BadInput(
            f"--under-load needs at least 2 ranks (one moves nothing across the bus); "
            f"this job has {ranks}"
        )
    return {"ops": ops, "gemm_n": gemm_size, "repeats": repeats or DEFAULT_REPEATS}
