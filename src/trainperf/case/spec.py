"""A case: one benchmark cell (model, batch, size, precision, device, step policy, flags).

A ``Case`` is frozen and validated when made; ``check_case`` then checks it against the
zoo and the devices this machine has. Both raise ``CaseError`` with one line naming the
field, the value given and what is allowed, which the CLI prints before writing anything.
The case travels to the worker as JSON (``case.model_dump()``) and is stored with its result.
"""

from __future__ import annotations

import contextlib
import importlib.util
from typing import TYPE_CHECKING, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from trainperf.case.modes import (
    RANK_MODES,
    LaunchKind,
    ParallelMode,
    Scaling,
    device_batch,
    launch_kind,
    parallel_mode,
    splits_evenly,
)
from trainperf.case.precision import JAX_PRECISIONS, Precision
from trainperf.core.limits import (
    BUCKET_MB_MAX,
    BUCKET_MB_MIN,
    INT64_MAX,
    INT64_MIN,
    MAX_COUNT,
    TIMEOUT_S_MAX,
    control_problem,
)
from trainperf.datasets.source import FORMS as DATA_FORMS
from trainperf.datasets.source import DataError, parse_data
from trainperf.measure.policy import PolicyError, default_timeout_s, parse_policy
from trainperf.measure.runs import FixedRuns, RunsError, parse_runs

if TYPE_CHECKING:
    from trainperf.models import ModelSpec

# The zoo and the data loaders (``trainperf.models``, ``trainperf.datasets``) import torch:
# they are imported where a case is checked against them, not here, so that a reader of
# stored cases (results, compare, report) starts without torch.

# TF32 tensor-core math exists from compute capability 8.0 (Ampere) on.
TF32_MIN_CAPABILITY = (8, 0)
# bf16 arithmetic on the GPU needs compute capability 8.0 too; earlier GPUs emulate it slowly.
BF16_MIN_CAPABILITY = (8, 0)


class CaseError(ValueError):
    """A case that cannot run as given; the message is one line for the user."""


class HardwareAbsent(CaseError):
    """A valid case that needs hardware this machine does not have (a suite skips it)."""


class DeviceKind(NamedTuple):
    """How many devices of one type this machine has, and their compute capability."""

    count: int
    capability: tuple[int, int] | None = None


class Case(BaseModel):
    """One benchmark cell. Field names are the suite-file and JSON names."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    model: str
    # The library that trains the case; jax: trainperf.jax (a Flax model, a jax.jit step).
    framework: Literal["pytorch", "jax"] = "pytorch"
    # Counts are at most MAX_COUNT and floats finite (trainperf.core.limits: what every reader
    # of the store, torch included, can handle).
    batch_size: int = Field(
        gt=0,
        le=MAX_COUNT,
        description="samples per step per device (weak scaling) or in all (strong)",
    )
    image_size: int | None = Field(default=None, gt=0, le=MAX_COUNT)
    seq_len: int | None = Field(default=None, gt=0, le=MAX_COUNT)
    precision: Precision = "fp32"
    device: Literal["cpu", "cuda"] = "cpu"
    devices: int = Field(default=1, gt=0, le=MAX_COUNT, description="devices (processes) per node")
    nodes: int = Field(default=1, gt=0, le=MAX_COUNT)
    data: str = Field(default="synthetic", description="training data (trainperf.datasets)")
    workers: int = Field(
        default=0, ge=0, le=MAX_COUNT, description="data-loader processes per device"
    )
    # Data parallelism: auto is ddp above one device (mesh with framework jax), none
    # otherwise. mesh: jax.sharding over the devices of one process (trainperf.jax.step);
    # fsdp: FSDP2, parameters, gradients and optimizer state sharded over the ranks
    # (trainperf.parallel.fsdp).
    parallel: ParallelMode = "auto"
    scaling: Scaling = "weak"
    bucket_mb: float | None = Field(
        default=None,
        ge=BUCKET_MB_MIN,
        le=BUCKET_MB_MAX,
        allow_inf_nan=False,
        description="DDP gradient bucket size in MiB",
    )
    grad_compression: Literal["none", "fp16", "bf16"] = "none"
    static_graph: bool = False
    # FSDP's options: free the gathered parameters after each block's forward (and gather
    # them again for the backward); the dtype of the gradient reduce-scatter under bf16.
    reshard_after_forward: bool = True
    fsdp_reduce: Literal["fp32", "bf16"] = "fp32"
    # Recompute each transformer block's activations in the backward: all of them (full)
    # or the element-wise ones only (selective); trainperf.parallel.fsdp.
    activation_checkpointing: Literal["none", "full", "selective"] = "none"
    grad_accum: int = Field(
        default=1, gt=0, le=MAX_COUNT, description="micro-batches per optimizer step"
    )
    steps: str = Field(default="adaptive", description="step policy, shared by the runs")
    runs: int | str = Field(
        default="adaptive", description="independent runs (worker processes) measuring it"
    )
    channels_last: bool = False
    compile: bool = False
    threads: int | None = Field(
        default=None, gt=0, le=MAX_COUNT, description="torch intra-op threads"
    )
    mkldnn: bool = Field(default=True, description="oneDNN (MKL-DNN) kernels on the CPU")
    cudnn_benchmark: bool = Field(
        default=True, description="cuDNN autotuning of convolutions (image models on CUDA)"
    )
    timeout_s: float | None = Field(default=None, gt=0, le=TIMEOUT_S_MAX, allow_inf_nan=False)
    seed: int = Field(default=0, ge=INT64_MIN, le=INT64_MAX)

    @field_validator("model", "data", "steps", "runs")
    @classmethod
    def _printable(cls, value: object) -> object:
        if isinstance(value, str) and (problem := control_problem(value)):
            raise ValueError(problem)
        return value

    @field_validator("steps")
    @classmethod
    def _steps_parse(cls, value: str) -> str:
        parse_policy(value)  # raises PolicyError (a ValueError) with the allowed forms
        return value

    @field_validator("runs", mode="before")
    @classmethod
    def _runs_parse(cls, value: object) -> object:
        # The one parser of run policies; it raises RunsError (a ValueError) with the
        # allowed forms. "3" from a flag or a quoted YAML value is the number 3.
        policy = parse_runs(value)  # type: ignore[arg-type]
        return policy.runs if isinstance(policy, FixedRuns) else value

    @field_validator("data")
    @classmethod
    def _data_parse(cls, value: str) -> str:
        try:
            parse_data(value)
        except DataError as exc:  # a form it has, naming a home that cannot be expanded
            raise ValueError(str(exc)) from None
        except ValueError:
            raise ValueError(f"not a data source: allowed {', '.join(DATA_FORMS)}") from None
        return value

    def label(self) -> str:
        """A short human description: 'resnet50 b32 @64 fp32 cpu'."""
        return label_of(self.model_dump())

    @property
    def run_timeout_s(self) -> float:
        """Seconds one run (worker process) of this case may take before it is killed:
        ``timeout_s``, or by default a generous bound from the step policy
        (``trainperf.measure.policy.default_timeout_s``), so that a hang always ends."""
        return self.timeout_s or default_timeout_s(parse_policy(self.steps))

    @property
    def mode(self) -> str:
        """The parallel mode, with ``auto`` resolved."""
        return parallel_mode(self.model_dump())

    @property
    def launch(self) -> LaunchKind:
        """How the case is launched (``trainperf.case.modes.launch_kind``)."""
        return launch_kind(self.model_dump())

    @property
    def processes(self) -> int:
        """Processes in the job: one per device under torchrun (ddp, fsdp), else one."""
        return self.devices * self.nodes if self.launch == "torchrun" else 1

    @property
    def replicas(self) -> int:
        """Devices working on one step's data (each its own slice of the batch)."""
        world = self.devices * self.nodes
        if self.mode in RANK_MODES:
            return world
        return self.devices if self.mode in ("dp", "mesh") else 1

    @property
    def device_batch(self) -> int:
        """Samples per micro-batch on each device."""
        return device_batch(self.batch_size, self.replicas, self.scaling)

    @property
    def global_batch(self) -> int:
        """Samples per optimizer step over all devices (all micro-batches)."""
        return self.device_batch * self.replicas * self.grad_accum


def label_of(fields: dict) -> str:
    """The label of a case given as a dict of its fields (``batch_size`` may be 'max')."""
    size = fields.get("image_size") or fields.get("seq_len")
    parts = [fields["model"], f"b{fields['batch_size']}"]
    if size:
        parts.append(f"@{size}")
    parts += [fields.get("precision", "fp32"), fields.get("device", "cpu")]
    if (framework := fields.get("framework", "pytorch")) != "pytorch":
        parts.append(framework)
    devices, nodes = fields.get("devices", 1), fields.get("nodes", 1)
    mode = parallel_mode(fields)
    if devices * nodes > 1 or mode != "none":
        parts.append(f"{mode} x{devices}" + (f"x{nodes}n" if nodes > 1 else ""))
    return " ".join(parts + label_options(fields))


def label_options(fields: dict) -> list[str]:
    """The end of a case's label: what sets it apart beyond model, batch, size, precision,
    device, framework and placement (strong scaling, checkpointing, sharding options,
    flags, data source), as the tables show it beside those columns."""
    parts = []
    parallel = fields.get("devices", 1) * fields.get("nodes", 1) > 1
    if (parallel or parallel_mode(fields) != "none") and fields.get("scaling") == "strong":
        parts.append("strong")
    if (checkpointing := fields.get("activation_checkpointing", "none")) != "none":
        parts.append(f"ac-{checkpointing}")
    if fields.get("reshard_after_forward") is False:
        parts.append("no-reshard")
    if fields.get("fsdp_reduce", "fp32") != "fp32":
        parts.append(f"reduce-{fields['fsdp_reduce']}")
    parts += [flag for flag in ("channels_last", "compile") if fields.get(flag)]
    if fields.get("threads"):
        parts.append(f"t{fields['threads']}")
    if fields.get("mkldnn") is False:
        parts.append("no-onednn")
    if fields.get("cudnn_benchmark") is False:
        parts.append("no-cudnn-benchmark")
    if (data := fields.get("data", "synthetic")) != "synthetic":
        with contextlib.suppress(ValueError):  # a stored case from elsewhere: as given
            data = parse_data(data).short_name
        parts += [data, f"w{fields.get('workers', 0)}"]
    return parts


def make_case(**fields: object) -> Case:
    """Build a case, turning pydantic's report into one ``CaseError`` line."""
    try:
        return Case(**fields)
    except ValidationError as exc:
        raise CaseError(describe_validation_error(exc)) from None


def stored_case_problem(fields: object, *, max_batch: bool = False) -> str | None:
    """What is wrong with a case read from elsewhere (an imported file), checked as a case
    of a suite is: the ``Case`` model's types and ranges, and a model of the zoo or a
    well-formed ``module:function`` (whose module need not exist here: the network ran
    where it was measured). ``max_batch``: ``batch_size`` may be ``max`` (a request whose
    largest-batch search failed). None when nothing is."""
    if not isinstance(fields, dict):
        return "expected an object"
    if max_batch and fields.get("batch_size") == "max":
        fields = fields | {"batch_size": 1}
    try:
        case = Case.model_validate(fields)
    except ValidationError as exc:
        return describe_validation_error(exc)
    from trainperf import models
    from trainperf.models.custom import is_well_formed

    if case.model not in models.names() and not is_well_formed(case.model):
        return (
            f"model {case.model!r} is neither a model of this trainperf's zoo nor a "
            "package.module:function reference"
        )
    return None


def describe_validation_error(exc: ValidationError) -> str:
    """The first problem of a pydantic error as one line: field, value given, what is allowed."""
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "case"
    given = err.get("input")
    kind = err["type"]
    if kind == "extra_forbidden":
        return f"unknown case field '{field}': allowed {', '.join(Case.model_fields)}"
    if kind == "missing":
        return f"case field '{field}' is required"
    if kind == "literal_error":
        allowed = err.get("ctx", {}).get("expected", "")
        return f"{field} {given!r} is not valid: allowed {allowed}"
    if field == "seed" and kind in ("greater_than_equal", "less_than_equal"):
        return f"seed must be an integer from {INT64_MIN} to {INT64_MAX}, got {given!r}"
    if field == "bucket_mb" and kind in ("greater_than_equal", "less_than_equal"):
        return f"bucket_mb must be from {BUCKET_MB_MIN:g} to {BUCKET_MB_MAX:.0f} MiB, got {given!r}"
    if kind == "less_than_equal":
        return f"{field} must be at most {err['ctx']['le']}, got {given!r}"
    if kind == "finite_number":
        return f"{field} must be a finite number, got {given!r}"
    if kind == "greater_than_equal":
        return f"{field} must be an integer of 0 or more, got {given!r}"
    if kind in ("greater_than", "int_type", "int_parsing", "int_from_float"):
        if field == "workers":
            return f"{field} must be an integer of 0 or more, got {given!r}"
        if Case.model_fields[field].annotation in (int, int | None):
            return f"{field} must be a positive integer, got {given!r}"
        return f"{field} must be a positive number, got {given!r}"
    if kind in ("bool_type", "bool_parsing"):
        return f"{field} must be true or false, got {given!r}"
    if kind in ("string_type", "float_type"):
        expected = "a string" if kind == "string_type" else "a number"
        return f"{field} must be {expected}, got {given!r}"
    message = err["msg"].removeprefix("Value error, ")  # a parser's, e.g. parse_policy's
    if str(given) not in message:  # most name the value and the field already
        message += f", got {given!r}"
    return message if message.startswith(f"{field} ") else f"{field}: {message}"


def check_case(case: Case, capabilities: dict[str, DeviceKind]) -> ModelSpec | None:
    """Check ``case`` against the zoo and this machine; return the model spec.

    ``capabilities`` maps a device type to what this machine has of it; a device type
    missing from it is not on this machine. A valid case that needs absent hardware raises
    ``HardwareAbsent`` (a suite records it as skipped); any other problem ``CaseError``.

    A user's network (``module:function``) is only found here, never run (None is
    returned): its code runs in the case's worker, which checks it there (``model_of``),
    so that one that hangs, crashes or raises is the case's recorded failure.
    """
    from trainperf import models

    try:
        spec = models.look_up(case.model)
    except ValueError as exc:  # UnknownModelError, CustomModelError
        raise CaseError(str(exc)) from None
    if case.framework == "jax":
        _check_jax(case)
    if case.workers and case.data == "synthetic":
        raise CaseError(
            "workers (data-loader processes) need a real data set (data cifar10:DIR, "
            "imagefolder:DIR, tokens:FILE or jpeg-sample); synthetic batches are made on "
            "the device: use workers 0"
        )
    _check_parallel(case)
    if not case.mkldnn and case.device != "cpu":
        raise CaseError("mkldnn false (no oneDNN) applies to the CPU only")
    if not case.cudnn_benchmark and case.device != "cuda":
        raise CaseError("cudnn_benchmark false (no cuDNN autotuning) applies to cuda only")
    if spec is not None:
        _check_model(case, spec)
    _check_blocks(case)
    _check_hardware(case, capabilities)
    return spec


def model_of(case: Case) -> ModelSpec:
    """The case's model spec, in the process that trains it. A user's network is built
    here, and checked against the case's size and data as ``check_case`` checks the zoo's
    (CaseError); what the user's code raises propagates as it is."""
    from trainperf import models
    from trainperf.models.custom import CustomModelError

    try:
        spec = models.get(case.model, image_size=case.image_size)
    except (models.UnknownModelError, CustomModelError) as exc:
        raise CaseError(str(exc)) from None
    if models.is_custom_reference(case.model):
        _check_model(case, spec)
    return spec


def _check_model(case: Case, spec: ModelSpec) -> None:
    from trainperf import models
    from trainperf.datasets import check_source

    if spec.is_language_model and case.image_size is not None:
        raise CaseError(f"{spec.name} is a language model: give seq_len, not image_size")
    if not spec.is_language_model and case.seq_len is not None:
        raise CaseError(f"{spec.name} takes images: give image_size, not seq_len")
    try:
        spec.resolve_size(getattr(case, spec.size_name))
    except models.SizeError as exc:
        raise CaseError(str(exc)) from None
    if case.channels_last and spec.is_language_model:
        raise CaseError("channels_last applies to image models only")
    try:
        check_source(parse_data(case.data), spec, getattr(case, spec.size_name))
    except DataError as exc:
        raise CaseError(f"data {case.data}: {exc}") from None
    except models.SizeError as exc:
        raise CaseError(str(exc)) from None


def _check_blocks(case: Case) -> None:
    """parallel fsdp and activation checkpointing wrap a transformer's repeated blocks: a
    model without them is refused (trainperf.models.blocks.blocks_refusal)."""
    if case.framework != "pytorch":
        return
    if case.mode != "fsdp" and case.activation_checkpointing == "none":
        return
    from trainperf.models.blocks import blocks_refusal

    if refusal := blocks_refusal(case.model):
        raise CaseError(refusal)


def _check_jax(case: Case) -> None:
    """What a case with framework jax can ask for: a model of the Flax zoo, synthetic data,
    the precisions of trainperf.jax.step, data parallelism over one node's devices (mesh),
    and none of PyTorch's own switches."""
    from trainperf import models

    if models.is_custom_reference(case.model):
        raise CaseError("a network of your own (module:function) runs with framework pytorch")
    if not all(importlib.util.find_spec(name) for name in ("jax", "flax", "optax")):
        raise CaseError(
            "framework jax needs jax, flax and optax: pip install 'trainperf[jax]' "
            "(on a CUDA machine also 'jax[cuda12]')"
        )
    from trainperf.models.flax_zoo import NoFlaxModel, check_model

    try:
        check_model(case.model)
    except NoFlaxModel as exc:
        raise CaseError(str(exc)) from None
    if case.precision not in JAX_PRECISIONS:
        raise CaseError(
            f"precision {case.precision} is not available with framework jax: "
            f"allowed {', '.join(JAX_PRECISIONS)}"
        )
    if case.data != "synthetic":
        raise CaseError("framework jax trains on synthetic data only: use data synthetic")
    if case.mode not in ("none", "mesh"):
        raise CaseError(f"framework jax runs parallel mesh (or auto, none), not {case.mode}")
    if case.nodes > 1:
        raise CaseError(
            "framework jax runs on the devices of one node here; for several nodes see "
            "docs/jax.md (jax.distributed.initialize)"
        )
    pytorch_only = {
        "compile": case.compile,  # jax.jit always compiles with XLA
        "channels_last": case.channels_last,  # JAX's convolutions are NHWC already
        "threads": case.threads,
        "mkldnn false": not case.mkldnn,
        "cudnn_benchmark false": not case.cudnn_benchmark,  # XLA autotunes on its own
        "activation_checkpointing": case.activation_checkpointing != "none",
    }
    for name, given in pytorch_only.items():
        if given:
            raise CaseError(f"{name} applies to framework pytorch, not jax")


def _check_parallel(case: Case) -> None:
    mode, world = case.mode, case.devices * case.nodes
    if case.activation_checkpointing != "none" and mode in ("dp", "mesh"):
        raise CaseError(
            f"activation_checkpointing applies to parallel none, ddp or fsdp, not {mode}"
        )
    if mode == "mesh" and case.framework != "jax":
        raise CaseError("parallel mesh (jax.sharding) needs framework jax; pytorch uses ddp or dp")
    if mode == "none" and world > 1:
        raise CaseError(f"{world} devices need parallel ddp, fsdp or dp (or auto), not none")
    if mode == "dp" and (case.device != "cuda" or case.nodes > 1):
        raise CaseError("parallel dp (DataParallel) runs on the CUDA GPUs of one node only")
    if mode != "ddp":
        for name in ("bucket_mb", "static_graph"):
            if getattr(case, name):
                raise CaseError(f"{name} applies to parallel ddp, not {mode}")
        if case.grad_compression != "none":
            raise CaseError(f"grad_compression applies to parallel ddp, not {mode}")
    if mode != "fsdp":
        if not case.reshard_after_forward:
            raise CaseError(f"reshard_after_forward false applies to parallel fsdp, not {mode}")
        if case.fsdp_reduce != "fp32":
            raise CaseError(f"fsdp_reduce applies to parallel fsdp, not {mode}")
    if mode == "fsdp":
        if case.precision == "fp16":
            raise CaseError(
                "precision fp16 with parallel fsdp is not supported (no sharded loss "
                "scaling here): use bf16, fp32 or tf32"
            )
        if case.fsdp_reduce == "bf16" and case.precision != "bf16":
            raise CaseError("fsdp_reduce bf16 needs precision bf16 (the gradients are fp32)")
    if case.static_graph and case.grad_accum > 1:
        # Seen with torch 2.13: the reducer aborts the process (SIGABRT) when a static
        # graph meets the no_sync micro-batches of gradient accumulation.
        raise CaseError("static_graph cannot be combined with grad_accum above 1 in DDP")
    if case.grad_compression == "bf16" and case.device != "cuda":
        raise CaseError("grad_compression bf16 needs NCCL (CUDA GPUs); gloo on the CPU takes fp16")
    if not splits_evenly(case.batch_size, case.replicas, case.scaling):
        raise CaseError(
            f"strong scaling splits batch_size {case.batch_size} over {case.replicas} "
            "devices: give a multiple of the device count"
        )


def _check_hardware(case: Case, capabilities: dict[str, DeviceKind]) -> None:
    kind = capabilities.get(case.device)
    if kind is None:
        raise HardwareAbsent(
            f"device '{case.device}' is not available on this machine: "
            f"available {', '.join(capabilities)}"
        )
    if case.device == "cuda" and kind.count < case.devices:
        raise HardwareAbsent(
            f"needs {case.devices} cuda devices per node; {kind.count} visible to CUDA "
            "here (CUDA_VISIBLE_DEVICES, the batch system's binding or MIG may hide others)"
        )
    if case.device == "cpu" and case.framework == "pytorch" and case.devices > kind.count:
        # A torch rank on the CPU is a process that computes on cores of its own; past one
        # per core the ranks time-share them, and the throughput measures the sharing (and
        # 2^31 ranks would start 2^31 processes). JAX's CPU devices live in one process.
        raise HardwareAbsent(
            f"needs {case.devices} CPU ranks per node, one process each; this machine has "
            f"{kind.count} cores for them (a rank per core at most)"
        )
    if case.device == "cpu" and case.threads and case.threads > kind.count:
        raise HardwareAbsent(
            f"needs {case.threads} CPU cores for its threads; this machine has {kind.count}"
        )
    _check_precision(case, kind.capability)


def _check_precision(case: Case, capability: tuple[int, int] | None) -> None:
    if case.device == "cpu":
        if case.precision == "tf32":
            raise CaseError(
                "precision tf32 needs a CUDA GPU of compute capability 8.0 or "
                "newer; on cpu use fp32, bf16 or fp16"
            )
        return
    needs = {"tf32": TF32_MIN_CAPABILITY, "bf16": BF16_MIN_CAPABILITY}.get(case.precision)
    if needs and capability is not None and capability < needs:
        raise HardwareAbsent(
            f"precision {case.precision} needs compute capability "
            f"{needs[0]}.{needs[1]} or newer; this GPU has "
            f"{capability[0]}.{capability[1]} (use fp32 or fp16)"
        )


__all__ = [
    "Case",
    "CaseError",
    "DeviceKind",
    "HardwareAbsent",
    "PolicyError",
    "RunsError",
    "check_case",
    "make_case",
    "model_of",
]
