"""The hardware catalog: ids, figures against shared/reference/hardware.md, training peaks
(one table for the predictor and for MFU), strict loading."""

import re
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from trainperf.analysis import peaks
from trainperf.predict.catalog import PRECISIONS, Catalog, CatalogError
from trainperf.predict.catalog_file import CatalogFileError, builtin_path, load_catalog
from trainperf.report.catalog import devices_table, links_table, systems_table

DEVICES = (
    "p100-pcie-16gb",
    "p100-sxm2-16gb",
    "v100-pcie-16gb",
    "v100-pcie-32gb",
    "v100-sxm2-16gb",
    "v100-sxm2-32gb",
    "rtx-2080-ti",
    "a100-sxm4-80gb",
    "h100-sxm",
    "h200-sxm",
    "xeon-phi-7250",
)
LINKS = (
    "pcie3",
    "pcie3-staged",
    "pcie4",
    "pcie5",
    "nvlink1",
    "nvlink2",
    "nvlink3",
    "nvlink4",
    "nvswitch-v100",
    "ethernet-10g",
    "ethernet-25g",
    "ethernet-100g",
    "ib-edr",
    "ib-hdr",
    "ib-ndr",
    "omnipath",
    "aries",
)


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


def _write(tmp_path: Path, document: dict) -> Path:
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture()
def document() -> dict:
    """The shipped catalog as plain data, to break one thing at a time."""
    return yaml.safe_load(builtin_path().read_text(encoding="utf-8"))


def test_every_listed_id_exists(catalog):
    for device_id in DEVICES:
        assert catalog.device(device_id).peak_flops("fp32") > 0
    for link_id in LINKS:
        assert catalog.link(link_id).bytes_per_s > 0


def test_builtin_catalog_is_loaded_once(catalog):
    assert load_catalog() is catalog


def test_figures_match_reference_hardware_md(catalog):
    v100 = catalog.device("v100-sxm2-16gb")
    assert v100.peak_tflops["fp32"] == 15.7
    assert v100.peak_tflops["fp16"] == 125
    assert v100.peak_flops("fp16") == pytest.approx(125e12)
    h200 = catalog.device("h200-sxm")
    assert h200.memory_gb == 141
    assert h200.memory_bytes == 141_000_000_000
    assert h200.memory_bandwidth_gbps == 4800
    assert h200.memory_bytes_per_s == pytest.approx(4.8e12)
    assert catalog.link("pcie3").bandwidth_gbps == 15.75
    assert catalog.link("nvlink2").bandwidth_gbps == 150
    assert catalog.link("ib-edr").bandwidth_gbps == 12.5
    assert catalog.link("aries").bandwidth_gbps == 8


def test_rtx_2080_ti_fp16_peak_is_the_fp32_accumulate_rate(catalog):
    """Mixed precision accumulates in FP32: 53.8 TFLOP/s (Turing whitepaper), not the
    data sheet's FP16-accumulate 107; measured MFU divides by the same figure."""
    rtx = catalog.device("rtx-2080-ti")
    assert rtx.peak_tflops["fp16"] == 53.8
    for name in ("NVIDIA GeForce RTX 2080 Ti", "GeForce RTX 2080 Ti"):
        lookup = peaks.peak_flops(name, "fp16")
        assert lookup.flops_per_s == rtx.peak_flops("fp16") == pytest.approx(53.8e12)
        assert "FP32 Accumulate" in lookup.source and "rtx-2080-ti" in lookup.source


def test_p100_fp16_peak_is_its_fp32_rate(catalog):
    """No tensor cores: 2x fp32 only with FP16 accumulation (half2), so a mixed-precision
    step's matmuls run at the FP32 rate."""
    for device_id in ("p100-pcie-16gb", "p100-sxm2-16gb"):
        p100 = catalog.device(device_id)
        assert p100.peak_tflops["fp16"] == p100.peak_tflops["fp32"]


def test_efficiencies_re_derived_against_the_training_peaks(catalog):
    """The efficiencies that were set against the old (FP16-accumulate) peaks now read
    against the training peak, keeping the compute rate their reasoning gave."""
    rtx, v100 = catalog.device("rtx-2080-ti"), catalog.device("v100-sxm2-16gb")
    assert rtx.efficiency("fp16") == v100.efficiency("fp16") == 0.3
    assert rtx.peak_tflops["fp16"] * rtx.efficiency("fp16") == pytest.approx(107 * 0.15, rel=0.01)
    assert "FP32-accumulate" in rtx.sources["default_efficiency.fp16"]
    for device_id, half2 in (("p100-pcie-16gb", 18.7), ("p100-sxm2-16gb", 21.2)):
        p100 = catalog.device(device_id)
        assert p100.efficiency("fp16") == 0.6 > p100.efficiency("fp32")
        assert p100.peak_tflops["fp16"] * 0.6 == pytest.approx(half2 * 0.3, rel=0.01)


def test_mfu_peaks_are_the_predictors_peaks(catalog):
    """One table: every CUDA name of the catalog gives MFU the predictor's peak at every
    precision a case trains in, absent where the predictor has none; every GPU has a name,
    or says in its note that none is known (a part seen only in a publication)."""
    precisions = ("fp32", "tf32", "fp16", "bf16")
    for device in catalog.devices.values():
        unnamed = "no CUDA name" in (device.note or "")
        assert bool(device.cuda_names) == (device.kind == "gpu" and not unnamed), device.id
        for name in device.cuda_names:
            assert catalog.device_named(name) is device
            for precision in precisions:
                lookup = peaks.peak_flops(name, precision)
                assert lookup.flops_per_s == device.peak_flops(precision), (name, precision)
                assert (lookup.flops_per_s is None) == bool(lookup.absent_reason)


def test_an_unknown_cuda_name_finds_no_device(catalog):
    for name in ("NVIDIA H100 PCIe", "NVIDIA H200 NVL", "NVIDIA GeForce RTX 2080", "h100-sxm"):
        assert catalog.device_named(name) is None
        assert "no training peak known" in peaks.peak_flops(name, "bf16").absent_reason


def test_a_cuda_name_of_two_devices_is_refused(tmp_path, document):
    document["devices"]["h200-sxm"]["cuda_names"].append("NVIDIA H100 80GB HBM3")
    with pytest.raises(CatalogFileError, match="a CUDA name belongs to one device: "):
        load_catalog(_write(tmp_path, document))


def test_cuda_names_on_a_cpu_are_refused(tmp_path, document):
    document["devices"]["xeon-phi-7250"]["cuda_names"] = ["Xeon Phi"]
    with pytest.raises(CatalogFileError, match="cuda_names are for GPUs only"):
        load_catalog(_write(tmp_path, document))


def test_absent_precision_is_none_not_a_neighbour(catalog):
    v100 = catalog.device("v100-sxm2-16gb")
    assert v100.peak_flops("bf16") is None
    assert v100.peak_flops("tf32") is None
    assert v100.efficiency("bf16") is None
    assert v100.precisions == ("fp32", "fp16")
    with pytest.raises(ValueError, match="unknown precision 'fp64': valid are fp32, tf32"):
        v100.peak_flops("fp64")


def test_every_figure_has_a_source_and_an_efficiency(catalog):
    for device in catalog.devices.values():
        assert set(device.default_efficiency) == set(device.peak_tflops)
        assert set(device.sources) == set(device.figures())
        assert all(0 < e <= 1 for e in device.default_efficiency.values())
    for link in catalog.links.values():
        assert set(link.sources) == {"bandwidth_gbps", "latency_us", "efficiency"}


def test_link_conveniences(catalog):
    pcie3 = catalog.link("pcie3")
    assert pcie3.scope == "intra"
    assert pcie3.bytes_per_s == pytest.approx(15.75e9 * pcie3.efficiency)
    assert pcie3.peak_bytes_per_s == pytest.approx(15.75e9)
    assert pcie3.latency_s == pytest.approx(pcie3.latency_us * 1e-6)
    assert catalog.link("ib-hdr").scope == "inter"


def test_unknown_id_lists_the_valid_ones(catalog):
    with pytest.raises(CatalogError) as raised:
        catalog.device("v100")
    message = str(raised.value)
    assert message.startswith("unknown device 'v100': valid devices are k80, p40, p100-pcie-16gb")
    assert "h200-sxm" in message and "\n" not in message
    assert isinstance(raised.value, KeyError)
    with pytest.raises(CatalogError, match="unknown link 'nvlink': valid links are pcie3, "):
        catalog.link("nvlink")


def test_a_copy_of_the_shipped_file_loads(tmp_path, document, catalog):
    loaded = load_catalog(_write(tmp_path, document))
    assert loaded == catalog
    assert loaded.digest == catalog.digest


def test_digest_follows_the_figures(tmp_path, document, catalog):
    document["links"]["pcie3"]["efficiency"] = 0.7
    assert load_catalog(_write(tmp_path, document)).digest != catalog.digest


def test_missing_source_is_refused_naming_it(tmp_path, document):
    del document["devices"]["v100-sxm2-16gb"]["sources"]["peak_tflops.fp16"]
    del document["links"]["ib-edr"]["sources"]["latency_us"]
    with pytest.raises(CatalogFileError) as raised:
        load_catalog(_write(tmp_path, document))
    message = str(raised.value)
    assert "devices.v100-sxm2-16gb: no source for peak_tflops.fp16" in message
    assert "links.ib-edr: no source for latency_us" in message
    assert "\n" not in message


def test_empty_source_is_refused(tmp_path, document):
    document["devices"]["h100-sxm"]["sources"]["tdp_w"] = "  "
    with pytest.raises(CatalogFileError, match="devices.h100-sxm: no source for tdp_w"):
        load_catalog(_write(tmp_path, document))


def test_source_for_an_absent_figure_is_refused(tmp_path, document):
    document["devices"]["v100-sxm2-16gb"]["sources"]["peak_tflops.bf16"] = "wishful"
    with pytest.raises(CatalogFileError, match="sources for figures the entry does not have"):
        load_catalog(_write(tmp_path, document))


def test_unknown_field_is_refused_naming_it(tmp_path, document):
    document["devices"]["h100-sxm"]["peak_tflop"] = {"fp32": 67}
    with pytest.raises(CatalogFileError) as raised:
        load_catalog(_write(tmp_path, document))
    message = str(raised.value)
    assert "devices.h100-sxm: unknown field 'peak_tflop' (allowed: name, kind, " in message


def test_unknown_precision_is_refused(tmp_path, document):
    document["devices"]["h100-sxm"]["peak_tflops"]["fp64"] = 34
    with pytest.raises(CatalogFileError, match=r"devices\.h100-sxm\.peak_tflops\.fp64"):
        load_catalog(_write(tmp_path, document))


def test_device_without_fp32_peak_is_refused(tmp_path, document):
    entry = document["devices"]["h100-sxm"]
    del entry["peak_tflops"]["fp32"], entry["default_efficiency"]["fp32"]
    del entry["sources"]["peak_tflops.fp32"], entry["sources"]["default_efficiency.fp32"]
    with pytest.raises(CatalogFileError, match="peak_tflops has no fp32 entry"):
        load_catalog(_write(tmp_path, document))


def test_peak_without_efficiency_is_refused(tmp_path, document):
    entry = document["devices"]["a100-sxm4-80gb"]
    del entry["default_efficiency"]["tf32"], entry["sources"]["default_efficiency.tf32"]
    with pytest.raises(CatalogFileError, match="default_efficiency must cover exactly"):
        load_catalog(_write(tmp_path, document))


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("efficiency", 1.5, "links.pcie3.efficiency: Input should be less than or equal to 1"),
        ("bandwidth_gbps", "fast", "links.pcie3.bandwidth_gbps: Input should be a valid number"),
        ("scope", "rack", "links.pcie3.scope: Input should be 'intra' or 'inter'"),
    ],
)
def test_bad_values_are_refused_naming_the_field(tmp_path, document, field, value, expected):
    document["links"]["pcie3"][field] = value
    with pytest.raises(CatalogFileError, match=expected):
        load_catalog(_write(tmp_path, document))


def test_missing_field_is_refused(tmp_path, document):
    del document["links"]["aries"]["latency_us"]
    with pytest.raises(CatalogFileError, match="links.aries: field 'latency_us' is required"):
        load_catalog(_write(tmp_path, document))


def test_duplicate_id_is_refused(tmp_path):
    path = tmp_path / "catalog.yaml"
    path.write_text("devices:\n  a: {}\n  a: {}\nlinks: {}\n", encoding="utf-8")
    with pytest.raises(
        CatalogFileError, match=r"catalog.yaml:3: duplicate key 'a' \(first given on"
    ):
        load_catalog(path)


def test_file_that_is_not_a_mapping_is_refused(tmp_path):
    path = tmp_path / "catalog.yaml"
    path.write_text("- devices\n", encoding="utf-8")
    with pytest.raises(CatalogFileError, match="expected a mapping with devices and links"):
        load_catalog(path)


def test_tables_render_every_entry(catalog):
    console = Console(width=300, record=True)
    console.print(devices_table(catalog))
    console.print(links_table(catalog))
    console.print(systems_table(catalog))
    text = console.export_text()
    for entry_id in (*catalog.devices, *catalog.links, *catalog.systems):
        assert entry_id in text
    for precision in PRECISIONS:
        assert precision in text


def test_entries_know_their_id(catalog):
    assert catalog.device("h100-sxm").id == "h100-sxm"
    assert catalog.link("ib-ndr").id == "ib-ndr"
    data = catalog.as_dict()
    assert data["digest"] == catalog.digest
    assert data["devices"]["h200-sxm"]["memory_gb"] == 141


def test_an_id_that_contradicts_its_key_is_refused(tmp_path, document):
    document["links"]["pcie3"]["id"] = "pcie4"
    with pytest.raises(CatalogFileError, match="links.pcie3: the key is the id"):
        load_catalog(_write(tmp_path, document))


def test_geforce_lacks_peer_to_peer_and_stages_through_host_memory(catalog):
    """The RTX 2080 Ti has no PCIe peer-to-peer: its intra-node link is host-staged PCIe 3.0,
    half the per-direction rate of pcie3 (two copies of every byte), NCCL's PCI latency,
    and the efficiency that a measured bus bandwidth of 4.0 GB/s gives (2 x RTX 2080 Ti)."""
    rtx = catalog.device("rtx-2080-ti")
    assert not rtx.peer_to_peer and rtx.host_staged_intra == "pcie3-staged"
    staged, pcie3 = catalog.link("pcie3-staged"), catalog.link("pcie3")
    assert staged.scope == "intra"
    assert staged.bandwidth_gbps == pcie3.bandwidth_gbps / 2
    assert staged.latency_us == pcie3.latency_us
    assert staged.efficiency == pytest.approx(4.0 / staged.bandwidth_gbps, abs=0.005)
    assert "measured" in staged.sources["efficiency"]
    others = [d for d in catalog.devices.values() if d.id != "rtx-2080-ti"]
    assert all(d.peer_to_peer and d.host_staged_intra is None for d in others)


def test_a_host_staged_link_needs_a_source_and_an_intra_link(tmp_path, document):
    rtx = document["devices"]["rtx-2080-ti"]
    del rtx["sources"]["host_staged_intra"]
    with pytest.raises(CatalogFileError, match="no source for host_staged_intra"):
        load_catalog(_write(tmp_path, document))
    rtx["sources"]["host_staged_intra"] = "a test"
    for link in ("ib-edr", "pcie9"):
        rtx["host_staged_intra"] = link
        with pytest.raises(CatalogFileError, match=f"host_staged_intra '{link}' is not an intra"):
            load_catalog(_write(tmp_path, document))


def test_kernel_rates_for_the_llm_step(catalog):
    """The per-op model's kernel rates (issue 33, item 7): on every 16-bit tensor-core GPU
    from A100 on, GEMMs faster than the fused attention kernel, both within the peak."""
    for device in ("a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm", "h200-sxm"):
        for precision in ("fp16", "bf16"):
            rates = catalog.device(device).kernel_fractions(precision)
            assert 0 < rates["attention"] < rates["gemm"] <= 1, (device, rates)
    assert catalog.device("v100-sxm2-16gb").kernel_fractions("fp16") is None
    assert catalog.device("h100-sxm").kernel_fractions("fp32") is None


def test_kernel_rates_need_both_kernels_and_a_peak(tmp_path, document):
    entry = document["devices"]["h100-sxm"]
    del entry["attention_efficiency"]["bf16"], entry["sources"]["attention_efficiency.bf16"]
    with pytest.raises(CatalogFileError, match="must cover the same precisions"):
        load_catalog(_write(tmp_path, document))
    entry = yaml.safe_load(builtin_path().read_text(encoding="utf-8"))["devices"]["k80"]
    document["devices"]["k80"] = entry | {
        "gemm_efficiency": {"fp16": 0.5},
        "attention_efficiency": {"fp16": 0.3},
        "sources": entry["sources"]
        | {"gemm_efficiency.fp16": "x", "attention_efficiency.fp16": "y"},
    }
    with pytest.raises(CatalogFileError, match="gemm_efficiency for precisions without a peak"):
        load_catalog(_write(tmp_path, document))


CPU_NODES = (
    "xeon-phi-7250",
    "xeon-phi-7230",
    "xeon-gold-6148-2s",
    "xeon-gold-6126-2s",
    "xeon-platinum-8180-2s",
    "epyc-9654-2s",
)


def test_cpu_nodes_are_one_rank_each_with_sourced_figures(catalog):
    """Issue 33 item 5: the CPU nodes of published scaling studies, one node = one rank,
    every figure sourced; a figure no source gives (installed memory, TDP) is left out."""
    for key in CPU_NODES:
        node = catalog.device(key)
        assert node.kind == "cpu" and node.precisions == ("fp32",)
        assert set(node.sources) == set(node.figures())
    for key in CPU_NODES[1:]:
        assert "one rank" in catalog.device(key).note.lower()
    gold = catalog.device("xeon-gold-6148-2s")
    assert gold.memory_gb is None and gold.memory_bytes is None and gold.tdp_w is None
    # cores x nominal clock x 2 FMA units x 16 lanes x 2
    assert gold.peak_tflops["fp32"] == pytest.approx(40 * 2.4 * 64 / 1e3, abs=0.01)
    assert "84.08" in gold.sources["default_efficiency.fp32"]
    assert catalog.device("xeon-phi-7230").peak_tflops["fp32"] == pytest.approx(
        64 * 1.3 * 64 / 1e3, abs=0.01
    )
    for link in ("omnipath", "aries"):
        assert catalog.link(link).scope == "inter" and catalog.link(link).sources


def test_every_cpu_node_has_its_sourced_core_count_and_no_gpu_has_one(catalog, tmp_path, document):
    """--comm-cores takes its share of ``cores``: each CPU node's count, the one its peak is
    derived from; a GPU with cores is refused."""
    counts = {node: catalog.device(node).cores for node in CPU_NODES}
    assert counts == {
        "xeon-phi-7250": 68,
        "xeon-phi-7230": 64,
        "xeon-gold-6148-2s": 40,
        "xeon-gold-6126-2s": 24,
        "xeon-platinum-8180-2s": 56,
        "epyc-9654-2s": 192,
    }
    for node, cores in counts.items():
        assert str(cores) in catalog.device(node).sources["cores"]
        assert str(cores) in catalog.device(node).sources["peak_tflops.fp32"]
    assert all(d.cores is None for d in catalog.devices.values() if d.kind == "gpu")
    h100 = document["devices"]["h100-sxm"]
    h100["cores"], h100["sources"]["cores"] = 132, "a test"
    with pytest.raises(CatalogFileError, match="cores are for CPUs only"):
        load_catalog(_write(tmp_path, document))


def test_a_figure_left_out_needs_no_source_but_a_stray_source_is_refused(tmp_path, document):
    node = document["devices"]["xeon-gold-6148-2s"]
    node["sources"]["tdp_w"] = "a source for a figure the entry does not have"
    with pytest.raises(CatalogFileError, match="sources for figures the entry does not have"):
        load_catalog(_write(tmp_path, document))


def _rail_node(**changes) -> dict:
    """A system entry of 8 H100 on NVLink, 8 NDR NICs, with a source for every figure."""
    entry = {
        "name": "a test node",
        "device": "h100-sxm",
        "devices_per_node": 8,
        "intra": "nvlink4",
        "inter": "ib-ndr",
        "nics_per_node": 8,
        "sources": {
            name: "a test"
            for name in ("device", "devices_per_node", "intra", "inter", "nics_per_node")
        },
    }
    entry.update(changes)
    return entry


def test_every_system_names_catalog_entries_of_the_right_scope_with_sources(catalog):
    """A system is a node of catalog parts: its device, an intra link where a node holds
    more than one, an inter link with its NIC count (at most one per device), each sourced."""
    assert catalog.systems, "the catalog ships systems"
    for system in catalog.systems.values():
        assert system.device in catalog.devices
        if system.devices_per_node > 1:
            assert catalog.link(system.intra).scope == "intra"
        if system.inter is not None:
            assert catalog.link(system.inter).scope == "inter"
            assert 1 <= system.nics_per_node <= system.devices_per_node
        for figure in system.figures():
            assert system.sources[figure].strip(), (system.id, figure)
    assert catalog.system("dgx-h100").nics_per_node == 8
    with pytest.raises(CatalogError, match="unknown system 'dgx-9'.*valid systems are"):
        catalog.system("dgx-9")


def test_a_system_loads_and_joins_the_digest(tmp_path, document, catalog):
    document["systems"] = {"rail-node": _rail_node()}
    loaded = load_catalog(_write(tmp_path, document))
    node = loaded.system("rail-node")
    assert (node.id, node.device, node.devices_per_node, node.nics_per_node) == (
        "rail-node",
        "h100-sxm",
        8,
        8,
    )
    assert loaded.digest != catalog.digest
    assert loaded.as_dict()["systems"]["rail-node"]["inter"] == "ib-ndr"


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"device": "h900"}, "systems.rail-node: unknown device 'h900': valid devices are"),
        ({"intra": "ib-ndr"}, "intra 'ib-ndr' is not an intra-node link of the catalog: valid"),
        ({"inter": "nvlink4"}, "inter 'nvlink4' is not an inter-node link of the catalog"),
        ({"nics_per_node": 9}, "nics_per_node must be 1 to devices_per_node \\(8\\)"),
        ({"nics_per_node": 0}, "nics_per_node: Input should be greater than or equal to 1"),
        ({"intra": None}, "8 devices to a node need the intra link that joins them"),
        ({"nics_per_node": None}, "inter and nics_per_node go together"),
        ({"devices_per_node": 1, "nics_per_node": 1}, "one device to a node has no intra-node"),
        ({"site": "x"}, "unknown field 'site' \\(allowed: name, device, devices_per_node"),
    ],
)
def test_a_bad_system_is_refused_naming_what_is_wrong(tmp_path, document, changes, expected):
    entry = _rail_node(**changes)
    for figure, value in changes.items():
        if value is None:
            entry.pop(figure)
            entry["sources"].pop(figure)
    document["systems"] = {"rail-node": entry}
    with pytest.raises(CatalogFileError, match=expected):
        load_catalog(_write(tmp_path, document))


def test_a_system_figure_without_a_source_is_refused(tmp_path, document):
    entry = _rail_node()
    del entry["sources"]["nics_per_node"]
    document["systems"] = {"rail-node": entry}
    with pytest.raises(CatalogFileError, match="systems.rail-node: no source for nics_per_node"):
        load_catalog(_write(tmp_path, document))


def test_a_systems_placement_takes_its_parts_unless_given_and_says_which(catalog):
    """System.placement, the one answer of --system: the system's five parts, each replaced
    by a given value; a node used in part keeps a NIC per device at most."""
    dgx = catalog.system("dgx-h100")
    whole = dgx.placement()
    assert (whole.device, whole.per_node, whole.intra, whole.inter, whole.nics_per_node) == (
        "h100-sxm",
        8,
        "nvlink4",
        "ib-ndr",
        8,
    )
    assert whole.note.endswith("8 x ib-ndr between nodes (the catalog's)")
    half = dgx.placement({"per_node": 4, "inter": None})
    assert (half.per_node, half.nics_per_node, half.inter) == (4, 4, "ib-ndr")
    assert half.note.endswith("replaced as given: per_node 4")
    named = dgx.placement({"nics_per_node": 2}, labels={"nics_per_node": "--nics-per-node"})
    assert named.nics_per_node == 2 and named.note.endswith("--nics-per-node 2")
    knl = catalog.system("stampede2-knl").placement()
    assert (knl.per_node, knl.intra, knl.nics_per_node) == (1, None, 1)
    with pytest.raises(ValueError, match="a system has no gpus"):
        dgx.placement({"gpus": 8})


def _doubling_aliases(levels):
    """YAML whose every level lists the level before it twice: 2**levels nodes repeated."""
    lines = ["l0: &l0 [1, 2]"]
    lines += [f"l{i}: &l{i} [*l{i - 1}, *l{i - 1}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    "text, message",
    [
        (
            _doubling_aliases(12),
            "catalog.yaml:8: YAML aliases repeat more than 1,000 nodes in all "
            "(the shipped catalog has none)",
        ),
        ("devices:\n  a: {tdp_w: " + "9" * 200 + "}\n", "catalog.yaml:2: an integer of 200 digits"),
    ],
)
def test_a_catalog_is_read_by_the_suites_strict_loader(tmp_path, text, message):
    """The catalog's loader is the suite file's (trainperf.core.strict_yaml): an alias bomb
    and an integer Python would not convert are refused in one line, as in a suite."""
    path = tmp_path / "catalog.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(CatalogFileError, match=re.escape(message)):
        load_catalog(path)
