"""The verbs of performance prediction: ``predict`` (scaling of a model on catalog hardware,
replicated or sharded, optionally calibrated by this machine's measurements, or the smallest
number of devices that holds it) and ``catalog`` (the hardware known). Registered in
trainperf.cli."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

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
)
from trainperf.cli.flag_types import BadInput, CountList, FiniteFloat, NonEmptyPath, PositiveInt
from trainperf.cli.predict.inputs import (
    DDP_ONLY,
    calibrate_from,
    catalog_entry,
    check_within_node,
    data_parallel_terms,
    fitted_link,
    model_spec,
    pcie_uplink,
    reserved_cores_contention,
    scoped_link,
    sharding_of,
    size_option,
    smallest_count,
    staged_intra,
    system_placement,
)
from trainperf.core.limits import (
    ACHIEVED_FRACTION_MIN,
    BUCKET_MB_MAX,
    BUCKET_MB_MIN,
    THROUGHPUT_MAX,
    THROUGHPUT_MIN,
)

GIB = 2**30


class DeviceCounts(CountList):
    """'1,8,64', or 'min': the smallest count that holds the model (sharded)."""

    name = "counts or min"

    def convert(self, value: Any, param: Any, ctx: Any) -> list[int] | str:
        if str(value).strip() == "min":
            return "min"
        return super().convert(value, param, ctx)


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
    from trainperf.predict.catalog_file import load_catalog
    from trainperf.predict.fsdp import predict_fsdp
    from trainperf.predict.inputs import Measured, Placement, PredictError, Workload
    from trainperf.predict.model import predict as predict_ddp

    one_output(as_json, table_format)
    try:
        spec = model_spec(model, options["image_size"])
        options["size"] = size_option(spec, options)
        spec.resolve_size(options["size"])
    except (models.UnknownModelError, models.SizeError, CustomModelError) as exc:
        raise BadInput(str(exc)) from None
    if spec.name != model:  # a user's function returning a ModelSpec: labelled as given
        spec = replace(spec, name=model)
    sharding = sharding_of(options)
    catalog = load_catalog()
    system_notes: list[str] = []
    if system_id is not None:
        placed = system_placement(catalog, system_id, device_id, intra_id, inter_id)
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
    device = catalog_entry(catalog.device, device_id) if device_id else None
    this_machine = catalog_entry(catalog.device, machine_id) if machine_id else None
    intra, inter = scoped_link(catalog, intra_id, "intra"), scoped_link(catalog, inter_id, "inter")
    uplink = pcie_uplink(catalog, options.pop("pcie_uplink"))
    nics_per_node = options.pop("nics_per_node")
    check_within_node(per_node, nics_per_node, uplink)
    search = None
    if devices == "min":
        search = smallest_count(spec, device, per_node, sharding, options)
        if search.smallest is None:
            _show_none_fits(model, device, search, options, as_json)
            return
        devices = [search.smallest]

    calibration, notes = None, []
    if calibrate_db is not None:
        same = device_id is None or machine_id == device_id
        calibration, notes = calibrate_from(calibrate_db, spec, this_machine, same, options)
        # no --device: this machine, as --calibrate-device names it in the catalog, else as
        # the calibration measured it
        device = device or this_machine or calibration.measured_device
        if device is None:
            raise BadInput(f"{calibrate_db} holds no ok single-device result of {model}")
        if intra is None and min(max(devices), per_node) > 1:
            intra = fitted_link(calibration, "intra")
        if inter is None and max(devices) > per_node:
            inter = fitted_link(calibration, "inter")
    if intra is None and min(max(devices), per_node) > 1:
        intra = staged_intra(catalog, device, notes)
    if (comm_cores := options.pop("comm_cores")) is not None:
        calibrated = options.get("contention")
        options["contention"] = reserved_cores_contention(device, comm_cores, calibrated)
        if calibrated is not None:
            notes.append(
                "--comm-cores: the calibration's slowdowns beside the all-reduce not used "
                "(the communication has cores of its own)"
            )
    terms, term_notes = data_parallel_terms(catalog, calibration)
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
    from trainperf.predict.catalog_file import load_catalog

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
