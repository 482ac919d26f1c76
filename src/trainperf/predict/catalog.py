"""The hardware catalog: sourced figures of devices, links and systems, for performance
prediction and for the model FLOP utilization (MFU) of measured results.

The catalog ships as package data (``trainperf/predict/catalog.yaml``), is read by
``trainperf.predict.catalog_file.load_catalog`` and validated strictly by the models here:
unknown fields are refused, every device has an fp32 peak, every precision with a peak has
a default efficiency, every numeric figure has an entry in its
``sources`` mapping saying where the number comes from, and no CUDA device name is claimed
by two devices. Devices, links and systems are looked up by id in explicit dicts; an unknown
id gets an error listing the valid ones. A system is a node type as sold or run (NVIDIA's
DGX servers, a cluster's nodes): which device, how many to a node, the links inside and
between nodes, and how many NICs carry the latter; it names devices and links of the same
catalog, which the loader checks. A measured GPU is found by the exact name CUDA reports
(``Catalog.device_named``), listed in its entry's ``cuda_names``; never by a near match.

Peaks are training peaks: per precision, the dense rate a training step's arithmetic runs
at (16-bit tensor-core math with FP32 accumulation, as mixed precision uses), which is not
always a data sheet's headline (see the comment at the top of the YAML). The predictor and
MFU (``trainperf.analysis.peaks``) read the same figure.

Units follow the names: ``peak_tflops`` (dense TFLOP/s), ``memory_gb`` (decimal GB),
``memory_bandwidth_gbps`` and ``bandwidth_gbps`` (GB/s, 1e9 bytes/s, per direction),
``tdp_w``, ``latency_us``. The convenience accessors return SI values (FLOP/s, bytes,
bytes/s, seconds). ``default_efficiency`` and a link's ``efficiency`` are stated
assumptions (see the comment at the top of the YAML), not measurements.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trainperf.predict.terms import Overhead, StepNoise

Precision = Literal["fp32", "tf32", "fp16", "bf16", "fp8"]
PRECISIONS: tuple[Precision, ...] = ("fp32", "tf32", "fp16", "bf16", "fp8")
TERA = 1e12
GIGA = 1e9

_ID = re.compile(r"[a-z0-9][a-z0-9.-]*")  # fullmatch: "$" lets a final "\n" by
# The sections whose entries are keyed by id (the loader gives each entry its key as ``id``).
SECTIONS = ("devices", "links", "systems")

Positive = Annotated[float, Field(gt=0)]
Fraction = Annotated[float, Field(gt=0, le=1)]


class CatalogError(KeyError):
    """An id the catalog does not hold; the message is one line listing the valid ids."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class _Sourced(BaseModel):
    """An entry whose every numeric figure must have a source."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    if TYPE_CHECKING:  # declared last by each subclass, so that it comes last in dumps
        sources: dict[str, str]

    # Scalar figures needing a source; mapping figures (peak_tflops...) list their keys.
    _SCALARS: ClassVar[tuple[str, ...]] = ()
    _MAPPINGS: ClassVar[tuple[str, ...]] = ()

    def figures(self) -> list[str]:
        """The names of this entry's figures, as the keys ``sources`` must have."""
        names = list(self._SCALARS)
        for mapping in self._MAPPINGS:
            names += [f"{mapping}.{key}" for key in getattr(self, mapping)]
        return names

    @model_validator(mode="after")
    def _every_figure_has_a_source(self) -> _Sourced:
        figures = self.figures()
        missing = [name for name in figures if not self.sources.get(name, "").strip()]
        if missing:
            raise ValueError(f"no source for {', '.join(missing)}")
        stray = sorted(set(self.sources) - set(figures))
        if stray:
            raise ValueError(
                f"sources for figures the entry does not have: {', '.join(stray)} "
                f"(its figures are {', '.join(figures)})"
            )
        return self


class Device(_Sourced):
    """One accelerator or CPU as its data sheet describes it."""

    id: str  # its key in the catalog (the loader sets it; the YAML does not repeat it)
    name: str
    kind: Literal["gpu", "cpu"]
    peak_tflops: dict[Precision, Positive]
    # None: no source gives it (a CPU node's installed memory, a TDP not retrieved); the
    # entry then leaves the figure out, and a prediction says "fits" is unknown.
    memory_gb: Positive | None = None
    memory_bandwidth_gbps: Positive
    tdp_w: Positive | None = None
    default_efficiency: dict[Precision, Fraction]
    # The batch per device that default_efficiency was derived at (a CPU's: its sources
    # state it). The default batch curve of a CPU (trainperf.predict.compute,
    # CPU_FIXED_SAMPLES) reproduces the efficiency there and lowers it at smaller batches.
    efficiency_batch: Annotated[int, Field(ge=1)] | None = None
    # A CPU's physical cores (all sockets of the node): what ``--comm-cores`` takes a share
    # of for the communication (terms.Contention.reserved_communication_cores).
    cores: Annotated[int, Field(ge=1)] | None = None
    # The fractions of the peak that the kernels of a training step reach on their own, for
    # the per-op model of an LLM step (``kernel_fractions``): large GEMMs, and the fused
    # attention kernel (its FLOPs counted as the kernel does them, a causal one half).
    gemm_efficiency: dict[Precision, Fraction] = Field(default_factory=dict)
    attention_efficiency: dict[Precision, Fraction] = Field(default_factory=dict)
    # A GPU's CUDA compute capability (major, minor): which fused attention kernel it runs
    # (FlashAttention needs 8.0; trainperf.models.attention).
    compute_capability: list[int] | None = None
    # The exact names CUDA reports for this part (torch.cuda.get_device_name, nvidia-smi),
    # by which a measured result finds its peak for MFU; a name not listed finds nothing.
    cuda_names: list[str] = Field(default_factory=list)
    # A GPU without peer-to-peer access over PCIe (GeForce cards): the id of the intra-node
    # link its collectives take instead, through host memory (NCCL's SHM transport); the
    # predictor takes it when no intra-node link is given. None: peer-to-peer works.
    host_staged_intra: str | None = None
    # A part run at a power limit below the one its peaks and fitted fractions hold at (a
    # 700 W H100 held at 500 W): the fraction of its training throughput it keeps there,
    # measured on that part. The forward and backward are priced that much slower.
    power_limit_throughput: Fraction | None = None
    note: str | None = None
    sources: dict[str, str]  # figure ("memory_gb", "peak_tflops.fp16") -> where it comes from

    _SCALARS: ClassVar[tuple[str, ...]] = ("memory_bandwidth_gbps",)
    _MAPPINGS: ClassVar[tuple[str, ...]] = (
        "peak_tflops",
        "default_efficiency",
        "gemm_efficiency",
        "attention_efficiency",
    )

    def figures(self) -> list[str]:
        optional = [
            name
            for name in (
                "memory_gb",
                "tdp_w",
                "efficiency_batch",
                "cores",
                "compute_capability",
                "host_staged_intra",
                "power_limit_throughput",
            )
            if getattr(self, name) is not None
        ]
        return super().figures() + optional

    @property
    def peer_to_peer(self) -> bool:
        """Whether the GPUs of one node reach each other's memory directly (P2P)."""
        return self.host_staged_intra is None

    @property
    def capability(self) -> tuple[int, int] | None:
        """``compute_capability`` as a tuple, None for a CPU or an entry without it."""
        cap = self.compute_capability
        return None if cap is None else (cap[0], cap[1])

    @model_validator(mode="after")
    def _precisions_agree(self) -> Device:
        if "fp32" not in self.peak_tflops:
            raise ValueError("peak_tflops has no fp32 entry: every device needs one")
        peaks, efficiencies = set(self.peak_tflops), set(self.default_efficiency)
        if peaks != efficiencies:
            raise ValueError(
                "default_efficiency must cover exactly the precisions of peak_tflops: "
                f"peaks for {', '.join(_ordered(peaks))}, "
                f"efficiencies for {', '.join(_ordered(efficiencies))}"
            )
        for kernels in ("gemm_efficiency", "attention_efficiency"):
            stray = set(getattr(self, kernels)) - peaks
            if stray:
                raise ValueError(
                    f"{kernels} for precisions without a peak: {', '.join(_ordered(stray))}"
                )
        if set(self.gemm_efficiency) != set(self.attention_efficiency):
            raise ValueError(
                "gemm_efficiency and attention_efficiency must cover the same precisions"
            )
        if self.kind == "cpu" and self.efficiency_batch is None:
            raise ValueError(
                "a CPU needs efficiency_batch, the batch its default_efficiency was derived at"
            )
        if self.cores is not None and self.kind != "cpu":
            raise ValueError(
                "cores are for CPUs only: a GPU's collectives run on engines of its own"
            )
        if self.cuda_names and self.kind != "gpu":
            raise ValueError("cuda_names are for GPUs only")
        blank = [name for name in self.cuda_names if not name or name != name.strip()]
        if blank:
            raise ValueError(f"cuda_names must be exact names, got {blank!r}")
        return self

    @property
    def precisions(self) -> tuple[str, ...]:
        """The precisions this device has a peak for, in the order of PRECISIONS."""
        return _ordered(self.peak_tflops)

    def peak_flops(self, precision: str) -> float | None:
        """The training peak in FLOP/s, or None when the device lacks ``precision``: the
        one peak of the device at that precision, for the predictor and for MFU alike.

        There is no fallback (tf32 to fp32, bf16 to fp16): the caller says it is absent."""
        tflops = self.peak_tflops.get(_precision(precision))
        return None if tflops is None else tflops * TERA

    def efficiency(self, precision: str) -> float | None:
        """The assumed whole-step fraction of peak at ``precision``, None when absent."""
        return self.default_efficiency.get(_precision(precision))

    def kernel_fractions(self, precision: str) -> dict[str, float] | None:
        """{"gemm": g, "attention": a}: the fractions of peak the step's GEMMs and its fused
        attention kernel reach at ``precision``, None where the catalog has none."""
        key = _precision(precision)
        if key not in self.gemm_efficiency:
            return None
        return {"gemm": self.gemm_efficiency[key], "attention": self.attention_efficiency[key]}

    @property
    def memory_bytes(self) -> int | None:
        return None if self.memory_gb is None else round(self.memory_gb * GIGA)

    @property
    def memory_bytes_per_s(self) -> float:
        return self.memory_bandwidth_gbps * GIGA


class Link(_Sourced):
    """One interconnect: inside a node (per device) or between nodes (per node)."""

    id: str  # its key in the catalog (the loader sets it; the YAML does not repeat it)
    name: str
    scope: Literal["intra", "inter"]
    bandwidth_gbps: Positive
    latency_us: Annotated[float, Field(ge=0)]
    efficiency: Fraction
    note: str | None = None
    sources: dict[str, str]  # figure ("latency_us", ...) -> where it comes from

    _SCALARS: ClassVar[tuple[str, ...]] = ("bandwidth_gbps", "latency_us", "efficiency")

    @property
    def bytes_per_s(self) -> float:
        """The bandwidth large messages reach: bandwidth_gbps x 1e9 x efficiency."""
        return self.bandwidth_gbps * GIGA * self.efficiency

    @property
    def peak_bytes_per_s(self) -> float:
        return self.bandwidth_gbps * GIGA

    @property
    def latency_s(self) -> float:
        return self.latency_us * 1e-6

    @property
    def is_pcie_generation(self) -> bool:
        """A plain PCIe link (pcie3, pcie4, ...): what a PCIe switch's uplink to its root port
        and NIC can be (``predict --pcie-uplink``). NVLink and NVSwitch join GPUs, not a switch
        to the host; ``pcie3-staged`` is a host-staged GPU-to-GPU path, not a link's rate."""
        return self.scope == "intra" and re.fullmatch(r"pcie\d+", self.id) is not None


@dataclass(frozen=True)
class SystemPlacement:
    """A system's placement of ranks (``System.placement``): catalog ids and counts."""

    device: str
    per_node: int
    intra: str | None
    inter: str | None
    nics_per_node: int
    note: str  # the assumption a prediction states: what the system gave, what was replaced


# What a placement places (the fields a caller may replace): all but its note.
PLACEMENT_FIELDS = tuple(f.name for f in fields(SystemPlacement) if f.name != "note")


class System(_Sourced):
    """One node type as its vendor or operator describes it: ``devices_per_node`` of the
    catalog device ``device``, joined by the ``intra`` link inside the node (None: one device
    to a node) and by ``nics_per_node`` NICs of the ``inter`` link between nodes (None: no
    network is stated, a single node). ``trainperf predict --system`` takes all five; a
    flag given beside it replaces that one."""

    id: str  # its key in the catalog (the loader sets it; the YAML does not repeat it)
    name: str
    device: str
    devices_per_node: Annotated[int, Field(ge=1)]
    intra: str | None = None
    inter: str | None = None
    nics_per_node: Annotated[int, Field(ge=1)] | None = None
    note: str | None = None
    sources: dict[str, str]  # figure ("devices_per_node", "nics_per_node", ...) -> source

    _SCALARS: ClassVar[tuple[str, ...]] = ("device", "devices_per_node")

    def figures(self) -> list[str]:
        optional = [
            name for name in ("intra", "inter", "nics_per_node") if getattr(self, name) is not None
        ]
        return super().figures() + optional

    def placement(
        self, given: Mapping[str, Any] | None = None, labels: Mapping[str, str] | None = None
    ) -> SystemPlacement:
        """Where ranks run on this system: its device id, devices per node, intra and inter
        link ids and NICs per node, each replaced by a value in ``given`` (keys as
        SystemPlacement's fields, e.g. ``{"inter": "ethernet-100g"}``; None or absent: the
        system's). A node used at fewer devices than it holds keeps at most a NIC per
        device used (the others' rails idle) unless ``nics_per_node`` is given. The
        placement's ``note`` says what came from the system and what was replaced, each
        replaced field named by ``labels`` (the CLI's flags) or by its field name."""
        replaced = {k: v for k, v in (given or {}).items() if v is not None}
        unknown = sorted(set(replaced) - set(PLACEMENT_FIELDS))
        if unknown:
            raise ValueError(
                f"a system has no {', '.join(unknown)}: give {', '.join(PLACEMENT_FIELDS)}"
            )
        per_node = replaced.get("per_node", self.devices_per_node)
        network = (
            f"{self.nics_per_node} x {self.inter} between nodes"
            if self.inter
            else "no network between nodes stated"
        )
        inside = f", {self.intra} inside" if self.intra else ""
        named = labels or {}
        swapped = ", ".join(f"{named.get(k, k)} {value}" for k, value in replaced.items())
        return SystemPlacement(
            device=replaced.get("device", self.device),
            per_node=per_node,
            intra=replaced.get("intra", self.intra),
            inter=replaced.get("inter", self.inter),
            nics_per_node=replaced.get("nics_per_node", min(self.nics_per_node or 1, per_node)),
            note=f"system {self.id} ({self.name}): {self.devices_per_node} x {self.device} "
            f"to a node{inside}, {network} (the catalog's)"
            + (f"; replaced as given: {swapped}" if swapped else ""),
        )

    @model_validator(mode="after")
    def _a_node_is_whole(self) -> System:
        if self.devices_per_node > 1 and self.intra is None:
            raise ValueError(
                f"{self.devices_per_node} devices to a node need the intra link that joins them"
            )
        if self.devices_per_node == 1 and self.intra is not None:
            raise ValueError("one device to a node has no intra-node link: leave intra out")
        if (self.inter is None) != (self.nics_per_node is None):
            raise ValueError("inter and nics_per_node go together: the link and its NICs")
        if self.nics_per_node is not None and self.nics_per_node > self.devices_per_node:
            raise ValueError(
                f"nics_per_node must be 1 to devices_per_node ({self.devices_per_node}): "
                f"the NICs the node's devices all-reduce through, got {self.nics_per_node}"
            )
        return self


class DataParallel(_Sourced):
    """The terms of a data-parallel step the model cannot derive from a data sheet
    (``trainperf.predict.terms``), fitted to published measurements where nothing of the
    machine has been measured: calibration from a results database replaces them."""

    step_noise_cv: Annotated[float, Field(ge=0, lt=1)]
    sync_overhead_ms: Annotated[float, Field(ge=0)]
    sources: dict[str, str]

    _SCALARS: ClassVar[tuple[str, ...]] = ("step_noise_cv", "sync_overhead_ms")

    def noise(self) -> StepNoise:
        return StepNoise(cv=self.step_noise_cv, source=f"the catalog's cv {self.step_noise_cv:g}")

    def overhead(self) -> Overhead:
        return Overhead(self.sync_overhead_ms * 1e-3, 0.0, "the catalog's")


class Catalog(BaseModel):
    """Devices, links and systems keyed by id, and the defaults of the data-parallel terms."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    devices: dict[str, Device]
    links: dict[str, Link]
    systems: dict[str, System] = Field(default_factory=dict)
    data_parallel: DataParallel

    @model_validator(mode="before")
    @classmethod
    def _entries_know_their_id(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for section in SECTIONS:
            entries = data.get(section)
            if not isinstance(entries, dict):
                continue
            data[section] = {
                key: {"id": key, **entry} if isinstance(entry, dict) else entry
                for key, entry in entries.items()
            }
        return data

    @model_validator(mode="after")
    def _ids_are_plain_keys(self) -> Catalog:
        for section in SECTIONS:
            for key, entry in getattr(self, section).items():
                if entry.id != key:
                    raise ValueError(f"{section}.{key}: the key is the id; do not write 'id'")
        bad = [i for section in SECTIONS for i in getattr(self, section) if not _ID.fullmatch(i)]
        if bad:
            raise ValueError(
                f"ids must be lower-case letters, digits, '-' and '.': {', '.join(bad)}"
            )
        owners: dict[str, list[str]] = {}
        for device in self.devices.values():
            for name in device.cuda_names:
                owners.setdefault(name, []).append(device.id)
        shared = [f"{name!r} ({', '.join(ids)})" for name, ids in owners.items() if len(ids) > 1]
        if shared:
            raise ValueError(f"a CUDA name belongs to one device: {', '.join(shared)}")
        for device in self.devices.values():
            staged = device.host_staged_intra
            if staged is not None and getattr(self.links.get(staged), "scope", None) != "intra":
                raise ValueError(
                    f"devices.{device.id}: host_staged_intra {staged!r} is not an intra-node "
                    "link of the catalog"
                )
        for system in self.systems.values():
            self._check_system(system)
        return self

    def _check_system(self, system: System) -> None:
        """A system's device and links are entries of this catalog, each of its scope."""
        where = f"systems.{system.id}"
        if system.device not in self.devices:
            raise ValueError(
                f"{where}: unknown device {system.device!r}: valid devices are "
                f"{', '.join(self.devices)}"
            )
        for scope in ("intra", "inter"):
            link_id = getattr(system, scope)
            if link_id is None:
                continue
            link = self.links.get(link_id)
            if link is None or link.scope != scope:
                valid = [i for i, known in self.links.items() if known.scope == scope]
                raise ValueError(
                    f"{where}: {scope} {link_id!r} is not an {scope}-node link of the catalog: "
                    f"valid are {', '.join(valid)}"
                )

    def device(self, device_id: str) -> Device:
        """The device ``device_id``; CatalogError listing the valid ids when unknown."""
        if device_id not in self.devices:
            raise CatalogError(
                f"unknown device {device_id!r}: valid devices are {', '.join(self.devices)}"
            )
        return self.devices[device_id]

    def device_named(self, cuda_name: str) -> Device | None:
        """The device whose ``cuda_names`` list ``cuda_name`` exactly, None when none does
        (an unknown part, a CPU): never the nearest name."""
        for device in self.devices.values():
            if cuda_name in device.cuda_names:
                return device
        return None

    def link(self, link_id: str) -> Link:
        """The link ``link_id``; CatalogError listing the valid ids when unknown."""
        if link_id not in self.links:
            raise CatalogError(f"unknown link {link_id!r}: valid links are {', '.join(self.links)}")
        return self.links[link_id]

    def system(self, system_id: str) -> System:
        """The system ``system_id``; CatalogError listing the valid ids when unknown."""
        if system_id not in self.systems:
            raise CatalogError(
                f"unknown system {system_id!r}: valid systems are {', '.join(self.systems)}"
            )
        return self.systems[system_id]

    def as_dict(self) -> dict[str, Any]:
        """The catalog as plain JSON-able data, with its digest."""
        return {"digest": self.digest, **self.model_dump(mode="json")}

    @property
    def digest(self) -> str:
        """12 hex of SHA-256 over the catalog's canonical JSON, to store with predictions:
        any change of a figure, efficiency or source changes it; comments do not."""
        canonical = json.dumps(self.model_dump(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def _ordered(precisions: Any) -> tuple[str, ...]:
    return tuple(p for p in PRECISIONS if p in precisions)


def _precision(precision: str) -> Precision:
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}: valid are {', '.join(PRECISIONS)}")
    return cast(Precision, precision)
