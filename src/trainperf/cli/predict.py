"""The verbs of performance prediction: ``predict`` (scaling of a model on catalog hardware,
replicated or sharded, optionally calibrated by this machine's measurements, or the smallest
number of devices that holds it) and ``catalog`` (the hardware known). Registered in
trainperf.cli."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from trainperf.case.modes import RANK_MODES
from trainperf.cli.common import (
    apply_options,
    batch_size_option,
    choice_option,
    count_option,
    emit_json,
    grad_compression_option,
    one_output,
    precision_option,
    scaling_option,
    sharding_options,
    show_table,
    stdout,
    table_output_options,
    table_width,
    warn_deprecated,
)
from trainperf.cli.flag_types import (
    BadInput,
    CountList,
    FiniteFloat,
    NonEmptyPath,
    PositiveInt,
    given_once,
    positive_int,
)
from trainperf.core.limits import (
    ACHIEVED_FRACTION_MIN,
    BUCKET_MB_MAX,
    BUCKET_MB_MIN,
    THROUGHPUT_MAX,
    THROUGHPUT_MIN,
)

if TYPE_CHECKING:
    from trainperf.models.spec import ModelSpec

GIB = 2**30
# Options of one parallel mode only: their flag and the value that leaves them unused.
DDP_ONLY = {"bucket_mb": ("--bucket-mb", 25.0), "grad_compression": ("--grad-compression", "none")}
FSDP_ONLY = {
    "activation_checkpointing": ("--activation-checkpointing", "none"),
    "reshard_after_forward": ("--no-reshard-after-forward", True),
    "fsdp_reduce": ("--fsdp-reduce", "fp32"),
}


class DeviceCounts(CountList):
    """'1,8,64', or 'min': the smallest count that holds the model (sharded)."""

    name = "counts or min"

    def convert(self, value: Any, param: Any, ctx: Any) -> list[int] | str:
        if str(value).strip() == "min":
            return "min"
        return super().convert(value, param, ctx)


def _catalog_error(exc: Exception) -> BadInput:
    return BadInput(str(exc.args[0]) if exc.args else str(exc))


def _catalog_entry(lookup: Any, entry_id: str) -> Any:
    """``lookup(entry_id)`` of the catalog (a device, link or system), its unknown id bad
    input (the message lists the valid ones)."""
    from trainperf.predict.catalog import CatalogError

    try:
        return lookup(entry_id)
    except CatalogError as exc:
        raise _catalog_error(exc) from None


def _catalog_link(catalog: Any, link_id: str) -> Any:
    return _catalog_entry(catalog.link, link_id)


# The flags a --system fills, by the name of their field in catalog.SystemPlacement.
SYSTEM_FLAGS = {
    "device": "--device",
    "per_node": "--per-node",
    "intra": "--intra",
    "inter": "--inter",
    "nics_per_node": "--nics-per-node",
}


def _system_placement(
    catalog: Any, system_id: str, device_id: str | None, intra_id: str | None, inter_id: str | None
) -> Any:
    """--system's placement (``System.placement``), each of SYSTEM_FLAGS given on the command
    line (not left at its default) replacing the system's value; its note names the flags."""
    ctx = click.get_current_context()
    given: dict[str, Any] = {"device": device_id, "intra": intra_id, "inter": inter_id}
    for name in ("per_node", "nics_per_node"):
        if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT:
            given[name] = ctx.params[name]
    return _catalog_entry(catalog.system, system_id).placement(given, labels=SYSTEM_FLAGS)


def _link(catalog: Any, link_id: str | None, scope: str) -> Any:
    if link_id is None:
        return None
    link = _catalog_link(catalog, link_id)
    if link.scope != scope:
        raise BadInput(
            f"--{scope} {link_id} is an {link.scope}-node link: give it as --{link.scope}"
        )
    return link


@click.command()
@click.option("--model", "-m", required=True, help="zoo model (see `trainperf models`)")
@click.option(
    "--system",
    "system_id",
    help="catalog system (see `trainperf catalog`), e.g. dgx-h100: its device, devices per "
    "node, links and NICs per node; a flag given beside it replaces that one",
)
@click.option(
    "--device",
    "device_id",
    help="catalog device (see `trainperf catalog`); may be left out with --calibrate: "
    "then this machine's device as measured",
)
@click.option(
    "--devices",
    type=DeviceCounts(),
    required=True,
    help="device counts, e.g. 1,8,64; or min: the smallest count of --device whose memory "
    "holds each rank's share (--parallel fsdp, weak scaling)",
)
@count_option("--per-node", 8)
@click.option("--intra", "intra_id", help="intra-node link (per device), e.g. nvlink2")
@click.option("--inter", "inter_id", help="inter-node link (per node), e.g. ib-edr")
@batch_size_option(32)
@precision_option
@scaling_option
@click.option("--image-size", type=PositiveInt(), help="square image side (image models)")
@click.option("--seq-len", type=PositiveInt(), help="sequence length (language models)")
@click.option("--size", "old_size", type=PositiveInt(), hidden=True)  # deprecated: the pair
@click.option(
    "--single-device-throughput",
    type=FiniteFloat(min=THROUGHPUT_MIN, max=THROUGHPUT_MAX),
    help="measured samples/s of one device at the batch per device (replaces FLOPs/peak)",
)
@click.option(
    "--achieved-fraction",
    type=FiniteFloat(min=ACHIEVED_FRACTION_MIN, max=1),
    help="fraction of peak FLOP/s a whole training step reaches (default: the catalog's)",
)
@click.option(
    "--bucket-mb",
    type=FiniteFloat(min=BUCKET_MB_MIN, max=BUCKET_MB_MAX),
    default=25.0,
    show_default=True,
    help="DDP gradient bucket size in MiB",
)
@grad_compression_option
@choice_option(
    "--parallel",
    RANK_MODES,
    "ddp",
    "ddp: a replica per device, gradients all-reduced; fsdp: FSDP2, parameters, "
    "gradients and optimizer state sharded over the devices",
)
@apply_options(sharding_options)
@click.option(
    "--pcie-uplink",
    metavar="LINK:K",
    help="the K GPUs behind one PCIe switch reach the NIC through one LINK uplink "
    "(e.g. pcie3:4); default: every GPU has its own path to the NIC",
)
@count_option(
    "--nics-per-node",
    1,
    "NICs per node (rail-optimised clusters: one per GPU or per few GPUs), 1 to --per-node: "
    "the inter-node phase runs over that many NICs in parallel",
)
@click.option(
    "--comm-cores",
    type=PositiveInt(),
    help="CPU devices: cores of each rank reserved for its communication (MLSL's endpoint "
    "servers, oneCCL's workers); the collectives overlap at no cost, the compute runs on "
    "the other cores [default: none, the cores time-shared]",
)
@click.option(
    "--calibrate",
    "calibrate_db",
    type=NonEmptyPath(path_type=Path),
    help="results database of this machine: fit the achieved fraction (or throughput), "
    "the step-time noise, the data-parallel overhead and, for a link flag left out, "
    "the link from `micro collective`",
)
@click.option(
    "--calibrate-device",
    help="catalog device this machine is, for --calibrate's fraction (default: --device)",
)
@click.option(
    "--explain",
    is_flag=True,
    help="also show one device's compute time against its batch, the curve the rows read",
)
@table_output_options()
def predict(
    model: str,
    system_id: str | None,
    device_id: str | None,
    devices: list[int] | str,
    per_node: int,
    intra_id: str | None,
    inter_id: str | None,
    calibrate_db: Path | None,
    calibrate_device: str | None,
    as_json: bool,
    table_format: str,
    wide: bool,
    **options: Any,
) -> None:
    """Predict data-parallel training throughput and scaling efficiency of MODEL on
    catalog hardware before buying it: compute from FLOPs, peak and achieved fraction,
    gradient all-reduce in the α–β model, DDP's buckets overlapping the backward pass; or,
    with --parallel fsdp, FSDP2's per-block all-gathers and reduce-scatters and the memory
    per rank (--devices min: the fewest devices that hold the model)."""
    from trainperf import models
    from trainperf.models.custom import CustomModelError
    from trainperf.predict.catalog import load_catalog
    from trainperf.predict.fsdp import predict_fsdp
    from trainperf.predict.inputs import Measured, Placement, PredictError, Workload
    from trainperf.predict.model import predict as predict_ddp

    one_output(as_json, table_format)
    try:
        spec = _model_spec(model, options["image_size"])
        options["size"] = _size(spec, options)
        spec.resolve_size(options["size"])
    except (models.UnknownModelError, models.SizeError, CustomModelError) as exc:
        raise BadInput(str(exc)) from None
    if spec.name != model:  # a user's function returning a ModelSpec: labelled as given
        spec = replace(spec, name=model)
    sharding = _sharding(options)
    catalog = load_catalog()
    system_notes: list[str] = []
    if system_id is not None:
        placed = _system_placement(catalog, system_id, device_id, intra_id, inter_id)
        device_id, per_node, intra_id, inter_id = (
            placed.device,
            placed.per_node,
            placed.intra,
            placed.inter,
        )
        options["nics_per_node"] = placed.nics_per_node
        system_notes.append(placed.note)
    if devices == "min" and device_id is None:
        raise BadInput("--devices min needs --device: the catalog device whose memory to fill")
    if device_id is None and calibrate_db is None:
        raise BadInput("give --device or --system (see `trainperf catalog`), or --calibrate DB")
    if calibrate_device is not None and calibrate_db is None:
        raise BadInput("--calibrate-device needs --calibrate DB")
    machine_id = calibrate_device or device_id
    device = _catalog_entry(catalog.device, device_id) if device_id else None
    this_machine = _catalog_entry(catalog.device, machine_id) if machine_id else None
    intra, inter = _link(catalog, intra_id, "intra"), _link(catalog, inter_id, "inter")
    uplink = _uplink(catalog, options.pop("pcie_uplink"))
    nics_per_node = options.pop("nics_per_node")
    _check_within_node(per_node, nics_per_node, uplink)
    search = None
    if devices == "min":
        search = _smallest(spec, device, per_node, sharding, options)
        if search.smallest is None:
            _show_none_fits(model, device, search, options, as_json)
            return
        devices = [search.smallest]

    calibration, notes = None, []
    if calibrate_db is not None:
        same = device_id is None or machine_id == device_id
        calibration, notes = _calibrate(calibrate_db, spec, this_machine, same, options)
        # no --device: this machine, as --calibrate-device names it in the catalog, else as
        # the calibration measured it
        device = device or this_machine or calibration.measured_device
        if device is None:
            raise BadInput(f"{calibrate_db} holds no ok single-device result of {model}")
        if intra is None and min(max(devices), per_node) > 1:
            intra = _fitted_link(calibration, "intra")
        if inter is None and max(devices) > per_node:
            inter = _fitted_link(calibration, "inter")
    if intra is None and min(max(devices), per_node) > 1:
        intra = _staged_intra(catalog, device, notes)
    if (comm_cores := options.pop("comm_cores")) is not None:
        calibrated = options.get("contention")
        options["contention"] = _reserved_cores(device, comm_cores, calibrated)
        if calibrated is not None:
            notes.append(
                "--comm-cores: the calibration's slowdowns beside the all-reduce not used "
                "(the communication has cores of its own)"
            )
    terms, term_notes = _data_parallel_terms(catalog, calibration)
    workload = Workload(
        spec, options["batch_size"], options["precision"], options["scaling"], options["size"]
    )
    placement = Placement(device, devices, per_node, intra, inter, uplink, nics_per_node)
    measured = Measured(
        options["single_device_throughput"],
        options["achieved_fraction"],
        **terms,
        batch_curve=options.get("batch_curve"),
        contention=options.get("contention"),
        memory_bytes_per_s=options.get("memory_bytes_per_s"),
        throughput_batch=options.get("throughput_batch"),
    )
    try:
        if sharding is None:
            ddp_options = {key: options[key] for key in DDP_ONLY}
            prediction = predict_ddp(
                workload, placement, measured, **ddp_options, explain=options["explain"]
            )
        else:
            prediction = predict_fsdp(
                workload, placement, measured, sharding, explain=options["explain"]
            )
    except PredictError as exc:
        found = f"the smallest count that holds {model} is {devices[0]}: " if search else ""
        raise BadInput(found + str(exc)) from None
    prediction["assumptions"] = system_notes + prediction["assumptions"] + notes + term_notes
    if system_id is not None:
        prediction["inputs"]["system"] = system_id
    if comm_cores is not None:
        prediction["inputs"]["comm_cores"] = comm_cores
    prediction["inputs"]["catalog_digest"] = catalog.digest
    prediction["calibration"] = calibration.as_dict() if calibration else None
    if search is not None:
        prediction["search"] = search.as_dict()
    _show(prediction, as_json, table_format, wide)


def _model_spec(model: str, image_size: int | None) -> ModelSpec:
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


def _size(spec: ModelSpec, options: dict[str, Any]) -> int | None:
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


def _uplink(catalog: Any, text: str | None) -> tuple[Any, int] | None:
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
    link = _catalog_link(catalog, link_id)
    if link.scope != "intra":
        raise BadInput(f"--pcie-uplink {link_id} is an inter-node link: give one like pcie3:4")
    if not link.is_pcie_generation:
        allowed = ", ".join(i for i in catalog.links if catalog.link(i).is_pcie_generation)
        raise BadInput(
            f"--pcie-uplink {link_id}: a PCIe switch's uplink is a PCIe link, allowed {allowed}"
        )
    return link, sharing


def _check_within_node(per_node: int, nics_per_node: int, uplink: tuple[Any, int] | None) -> None:
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


def _staged_intra(catalog: Any, device: Any, notes: list[str]) -> Any:
    """The intra-node link of a device without peer-to-peer (GeForce), None for any other:
    taken only where no --intra is given (nor fitted), and said in the assumptions."""
    staged = getattr(device, "host_staged_intra", None)
    if staged is None:
        return None
    notes.append(
        f"intra-node link: {staged}, {device.id} has no peer-to-peer access over PCIe, so "
        "its GPUs exchange data through host memory (NCCL's SHM transport); --intra overrides"
    )
    return _catalog_link(catalog, staged)


def _fitted_link(calibration: Any, scope: str) -> Any:
    link = calibration.link(scope)
    if link is None:
        why = calibration.absent.get("link") or f"the link it fitted is {calibration.link_scope}"
        raise BadInput(f"give --{scope}: the calibration has no {scope}-node link ({why})")
    return link


def _sharding(options: dict[str, Any]) -> Any:
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


def _smallest(spec: ModelSpec, device: Any, per_node: int, sharding: Any, options: dict) -> Any:
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


def _reserved_cores(device: Any, count: int, measured: Any) -> Any:
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


def _data_parallel_terms(catalog: Any, calibration: Any) -> tuple[dict[str, Any], list[str]]:
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


def _calibrate(
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
        notes.append(_compute_note(inputs, this_machine))
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


def _compute_note(inputs: dict[str, Any], this_machine: Any) -> str:
    """The line that names the measured compute figure ``inputs`` holds
    (``Calibration.compute_inputs``)."""
    if "achieved_fraction" in inputs:
        return f"calibration: achieved fraction measured on {this_machine.id}"
    if "batch_curve" in inputs:
        batches = ", ".join(str(b) for b in inputs["batch_curve"].batches)
        return f"calibration: the step time against the batch measured at {batches}"
    return f"calibration: single-device throughput measured at batch {inputs['throughput_batch']}"


def _show_none_fits(model: str, device: Any, search: Any, options: dict, as_json: bool) -> None:
    """--devices min found no count up to the bound: say so, with what does not shrink."""
    if as_json:
        emit_json({"search": search.as_dict(), "rows": []})
        return
    stdout.print(
        f"no count of {device.id} up to {search.bound} holds {model} at batch "
        f"{options['batch_size']} per device: {search.memory.total_bytes / GIB:.1f} GiB per "
        f"rank at {search.bound} devices, {search.floor_bytes / GIB:.1f} GiB of which do not "
        f"shrink with more devices (activations, gathered parameters and gradients, context), "
        f"against {search.memory.available_bytes / GIB:.1f} GiB",
        markup=False,
        highlight=False,
    )


def _show(prediction: dict[str, Any], as_json: bool, table_format: str, wide: bool) -> None:
    if as_json:
        emit_json(prediction)
        return
    from trainperf.report.predict import (
        assumptions_text,
        calibration_table,
        compute_curve_table,
        fsdp_prediction_table,
        prediction_table,
    )

    fsdp = prediction["inputs"].get("parallel") == "fsdp"
    make = fsdp_prediction_table if fsdp else prediction_table
    table = make(prediction, wide=wide, width=table_width(table_format, wide))
    show_table(table, table_format, wide)
    markdown = table_format == "md"
    text = assumptions_text(prediction["assumptions"], markdown, table_width(table_format, wide))
    if markdown:
        sys.stdout.write("\n" + text)
    else:
        stdout.print(text, markup=False, highlight=False, soft_wrap=True)
    if prediction["calibration"]:
        if table_format == "md":
            sys.stdout.write("\n")
        show_table(calibration_table(prediction["calibration"]), table_format)
    if "compute_curve" in prediction:
        if table_format == "md":
            sys.stdout.write("\n")
        show_table(compute_curve_table(prediction), table_format)


@click.command()
@table_output_options()
def catalog(as_json: bool, table_format: str, wide: bool) -> None:
    """List the devices, links and systems of the hardware catalog that `trainperf predict`
    uses."""
    from trainperf.predict.catalog import load_catalog

    one_output(as_json, table_format)
    known = load_catalog()
    if as_json:
        emit_json(known.as_dict())
        return
    from trainperf.report.catalog import devices_table, links_table, systems_table

    width = table_width(table_format, wide)
    show_table(devices_table(known, width), table_format, wide)
    show_table(links_table(known, width), table_format, wide)
    show_table(systems_table(known, width), table_format, wide)
