"""From predict's flags to the predictor's inputs: catalog entries looked up (an unknown id
is bad input naming the valid ones), links checked for their scope, --system's placement,
--pcie-uplink and --nics-per-node checked against the node, FSDP's options, the --devices min
search, --comm-cores, and a calibration's figures filled in where the user left them out.
Each refusal is a ``BadInput`` that names the flag; the command itself is trainperf.cli.predict."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from trainperf.cli.common import warn_deprecated
from trainperf.cli.flag_types import BadInput, given_once, positive_int

if TYPE_CHECKING:
    from trainperf.models.spec import ModelSpec

# Options of one parallel mode only: their flag and the value that leaves them unused.
DDP_ONLY = {"bucket_mb": ("--bucket-mb", 25.0), "grad_compression": ("--grad-compression", "none")}
FSDP_ONLY = {
    "activation_checkpointing": ("--activation-checkpointing", "none"),
    "reshard_after_forward": ("--no-reshard-after-forward", True),
    "fsdp_reduce": ("--fsdp-reduce", "fp32"),
}


def catalog_error(exc: Exception) -> BadInput:
    return BadInput(str(exc.args[0]) if exc.args else str(exc))


def catalog_entry(lookup: Any, entry_id: str) -> Any:
    """``lookup(entry_id)`` of the catalog (a device, link or system), its unknown id bad
    input (the message lists the valid ones)."""
    from trainperf.predict.catalog import CatalogError

    try:
        return lookup(entry_id)
    except CatalogError as exc:
        raise catalog_error(exc) from None


def catalog_link(catalog: Any, link_id: str) -> Any:
    return catalog_entry(catalog.link, link_id)


# The flags a --system fills, by the name of their field in catalog.SystemPlacement.
SYSTEM_FLAGS = {
    "device": "--device",
    "per_node": "--per-node",
    "intra": "--intra",
    "inter": "--inter",
    "nics_per_node": "--nics-per-node",
}


def system_placement(
    catalog: Any, system_id: str, device_id: str | None, intra_id: str | None, inter_id: str | None
) -> Any:
    """--system's placement (``System.placement``), each of SYSTEM_FLAGS given on the command
    line (not left at its default) replacing the system's value; its note names the flags."""
    ctx = click.get_current_context()
    given: dict[str, Any] = {"device": device_id, "intra": intra_id, "inter": inter_id}
    for name in ("per_node", "nics_per_node"):
        if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT:
            given[name] = ctx.params[name]
    return catalog_entry(catalog.system, system_id).placement(given, labels=SYSTEM_FLAGS)


def scoped_link(catalog: Any, link_id: str | None, scope: str) -> Any:
    if link_id is None:
        return None
    link = catalog_link(catalog, link_id)
    if link.scope != scope:
        raise BadInput(
            f"--{scope} {link_id} is an {link.scope}-node link: give it as --{link.scope}"
        )
    return link


def model_spec(model: str, image_size: int | None) -> ModelSpec:
    """The zoo's spec, or a user's network built here: predict runs no worker, so what the
    user's function raises (or a sys.exit in it) is a bad input, not a traceback; a sweep's
    worker records it as the case's failure instead (``case.spec.model_of``)."""
    from trainperf import models
    from trainperf.models.custom import CustomModelError

    if not models.is_custom_reference(model):
        return models.get(model)
    try:
        return models.get(model, image_size=image_size)
    except CustomModelError:
        raise
    except (Exception, SystemExit) as exc:
        raise BadInput(f"{model} raised {type(exc).__name__} when called: {exc}") from None


def size_option(spec: ModelSpec, options: dict[str, Any]) -> int | None:
    """The image side or sequence length: --image-size or --seq-len, the one the model
    takes, as ``run`` has them; or the deprecated --size, which meant either."""
    image_size, seq_len = options.pop("image_size"), options.pop("seq_len")
    old_size = options.pop("old_size")
    if old_size is not None:
        warn_deprecated("--size", "--image-size (images) or --seq-len (sequences)")
    given = given_once({"--image-size": image_size, "--seq-len": seq_len, "--size": old_size})
    if given is None:
        return None
    flag, size = given
    wanted = "--seq-len" if spec.size_name == "seq_len" else "--image-size"
    if flag not in (wanted, "--size"):
        kind = "a language model" if wanted == "--seq-len" else "an image model"
        raise BadInput(f"{spec.name} is {kind}: give {wanted}, not {flag}")
    return size


def pcie_uplink(catalog: Any, text: str | None) -> tuple[Any, int] | None:
    """``LINK:K`` of --pcie-uplink: a catalog intra-node link and a GPU count."""
    if text is None:
        return None
    link_id, _, count = text.partition(":")
    try:
        sharing = positive_int(count)
    except ValueError:
        raise BadInput(
            f"--pcie-uplink {text}: give LINK:K, K a positive integer (e.g. pcie3:4)"
        ) from None
    link = catalog_link(catalog, link_id)
    if link.scope != "intra":
        raise BadInput(f"--pcie-uplink {link_id} is an inter-node link: give one like pcie3:4")
    if not link.is_pcie_generation:
        allowed = ", ".join(i for i in catalog.links if catalog.link(i).is_pcie_generation)
        raise BadInput(
            f"--pcie-uplink {link_id}: a PCIe switch's uplink is a PCIe link, allowed {allowed}"
        )
    return link, sharing


def check_within_node(per_node: int, nics_per_node: int, uplink: tuple[Any, int] | None) -> None:
    """--nics-per-node and --pcie-uplink's K count things inside one node: neither may exceed
    its devices (--per-node, or the --system's). Checked here to name the flag; the library
    (inputs.check_nics, inputs.link_costs) refuses the same without knowing the flags."""
    if nics_per_node > per_node:
        raise BadInput(
            f"--nics-per-node {nics_per_node}: at most one NIC per device, allowed 1 to the "
            f"{per_node} devices per node (--per-node)"
        )
    if uplink is not None and uplink[1] > per_node:
        raise BadInput(
            f"--pcie-uplink {uplink[0].id}:{uplink[1]}: K is the GPUs behind one switch, "
            f"allowed 1 to the {per_node} devices per node (--per-node)"
        )


def staged_intra(catalog: Any, device: Any, notes: list[str]) -> Any:
    """The intra-node link of a device without peer-to-peer (GeForce), None for any other:
    taken only where no --intra is given (nor fitted), and said in the assumptions."""
    staged = getattr(device, "host_staged_intra", None)
    if staged is None:
        return None
    notes.append(
        f"intra-node link: {staged}, {device.id} has no peer-to-peer access over PCIe, so "
        "its GPUs exchange data through host memory (NCCL's SHM transport); --intra overrides"
    )
    return catalog_link(catalog, staged)


def fitted_link(calibration: Any, scope: str) -> Any:
    link = calibration.link(scope)
    if link is None:
        why = calibration.absent.get("link") or f"the link it fitted is {calibration.link_scope}"
        raise BadInput(f"give --{scope}: the calibration has no {scope}-node link ({why})")
    return link


def sharding_of(options: dict[str, Any]) -> Any:
    """FSDP's options for --parallel fsdp, None for ddp; an option of the other mode refused."""
    from trainperf.predict.inputs import PredictError

    mode = options.pop("parallel")
    sharding = {key: options.pop(key) for key in FSDP_ONLY}
    other = DDP_ONLY if mode == "fsdp" else FSDP_ONLY
    for key, (flag, unused) in other.items():
        if {**options, **sharding}[key] != unused:
            raise BadInput(f"{flag} does not apply to --parallel {mode}")
    if mode == "ddp":
        return None
    from trainperf.predict.fsdp import Sharding

    try:
        return Sharding(**sharding)
    except PredictError as exc:
        raise BadInput(str(exc)) from None


def smallest_count(
    spec: ModelSpec, device: Any, per_node: int, sharding: Any, options: dict
) -> Any:
    """The search of --devices min, which only sharding makes meaningful."""
    from trainperf.predict.fsdp_search import smallest_devices
    from trainperf.predict.inputs import PredictError

    if sharding is None:
        raise BadInput(
            "--devices min needs --parallel fsdp: ddp keeps a whole replica on every device, "
            "so more devices never make it fit"
        )
    if options["scaling"] != "weak":
        raise BadInput("--devices min searches at --batch-size per device: use --scaling weak")
    try:
        return smallest_devices(
            spec,
            device,
            per_node,
            options["batch_size"],
            options["precision"],
            options["size"],
            sharding,
        )
    except PredictError as exc:
        raise BadInput(str(exc)) from None


def reserved_cores_contention(device: Any, count: int, measured: Any) -> Any:
    """The contention of --comm-cores: ``count`` of the CPU ``device``'s cores given to the
    communication (``terms.reserved_cores``); a calibration's neighbour slowdown is kept."""
    from trainperf.predict.terms import reserved_cores

    if getattr(device, "kind", "gpu") != "cpu":
        raise BadInput(
            f"--comm-cores is for CPU devices: {device.id} is a GPU, whose collectives run "
            "on engines of their own"
        )
    if getattr(device, "cores", None) is None:
        raise BadInput(
            f"--comm-cores needs a core count, which {device.id} has not: give --device, a "
            "catalog CPU node (see `trainperf catalog`)"
        )
    if count >= device.cores:
        raise BadInput(
            f"--comm-cores must be 1 to {device.cores - 1} ({device.id} has {device.cores} "
            f"cores), got {count}"
        )
    source = f"--comm-cores {count}"
    contention = reserved_cores(count, device.cores, source)
    if measured is not None:
        contention = replace(
            contention,
            neighbour_slowdown=measured.neighbour_slowdown,
            source=f"{source}; the neighbours' slowdown as calibrated",
        )
    return contention


def data_parallel_terms(catalog: Any, calibration: Any) -> tuple[dict[str, Any], list[str]]:
    """Step noise and per-step overhead: measured where the calibration has them, else
    the catalog's (fitted to published runs); the notes say which is which."""
    noise = calibration.noise if calibration is not None else None
    overhead = calibration.overhead if calibration is not None else None
    notes = []
    if noise is None:
        noise = catalog.data_parallel.noise()
        notes.append("step-time noise: the catalog's (fitted to published runs)")
    if overhead is None:
        overhead = catalog.data_parallel.overhead()
        notes.append("data-parallel overhead: the catalog's (fitted to published runs)")
    return {"noise": noise, "overhead": overhead}, notes


def calibrate_from(
    db: Path, spec: ModelSpec, this_machine: Any, same: bool, options: dict[str, Any]
) -> tuple[Any, list[str]]:
    """Fit from ``db``; fill the compute options the user left out; say what was used.

    The measured throughput stands for the target device only when this machine is it
    (``same``); the achieved fraction carries over to another device's peak.
    """
    from trainperf.predict.calibrate import CalibrationError, calibrate

    try:
        cal = calibrate(
            db,
            spec,
            this_machine,
            precision=options["precision"],
            batch_size=options["batch_size"],
            size=options["size"],
        )
    except CalibrationError as exc:
        raise BadInput(str(exc)) from None
    notes = []
    given = options["achieved_fraction"] or options["single_device_throughput"]
    if given:
        notes.append("calibration: compute as given on the command line, not as measured")
    elif inputs := cal.compute_inputs(same_device=same):
        options.update(inputs)
        notes.append(compute_note(inputs, this_machine))
    if cal.contention is not None and same:
        options["contention"] = cal.contention
        notes.append(
            f"calibration: compute {cal.contention.compute_slowdown:.3g}x and all-reduce "
            f"{cal.contention.comm_slowdown:.3g}x slower beside each other, and compute "
            f"{cal.contention.neighbour_slowdown:.3g}x slower beside the other ranks', measured"
        )
    if cal.memory_bytes_per_s is not None and same:
        options["memory_bytes_per_s"] = cal.memory_bytes_per_s
    if cal.alpha_s is not None:
        notes.append(
            "calibration: a link flag left out takes the measured bus-bandwidth curve "
            "(α and β fitted beside it)"
        )
    if cal.noise is not None:
        notes.append(f"calibration: step-time noise from {cal.noise.source}")
    if cal.overhead is not None:
        notes.append(f"calibration: data-parallel overhead {cal.overhead.source}")
    notes += [f"calibration: {k} absent: {reason}" for k, reason in cal.absent.items()]
    return cal, notes


def compute_note(inputs: dict[str, Any], this_machine: Any) -> str:
    """The line that names the measured compute figure ``inputs`` holds
    (``Calibration.compute_inputs``)."""
    if "achieved_fraction" in inputs:
        return f"calibration: achieved fraction measured on {this_machine.id}"
    if "batch_curve" in inputs:
        batches = ", ".join(str(b) for b in inputs["batch_curve"].batches)
        return f"calibration: the step time against the batch measured at {batches}"
    return f"calibration: single-device throughput measured at batch {inputs['throughput_batch']}"
