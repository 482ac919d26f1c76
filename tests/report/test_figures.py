"""The report's figures from the two-system fixture: every kind, valid SVG, escaped, stable."""

import copy
import re
import xml.etree.ElementTree as ET
from dataclasses import replace

import pytest

from report_fixture import HOSTILE_MODEL, build
from trainperf.report.figure_kit import Drawing, Figure, plain, slug, unique_keys
from trainperf.report.figure_set import all_figures
from trainperf.store.database import Store

KINDS = (
    "throughput-per-case",
    "throughput-vs-devices",
    "scaling-efficiency",
    "throughput-vs-batch",
    "speedup-vs-devices",
    "step-breakdown",
    "layer-breakdown",
    "collective-busbw",
    "gemm-tflops",
    "power-vs-performance",
    "energy-per-sample",
)
# Both systems measured these kinds in the fixture; the profile and energy only one each.
BOTH_SYSTEMS = (
    "throughput-per-case",
    "throughput-vs-batch",
    "collective-busbw",
    "gemm-tflops",
    "throughput-vs-devices",
)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("figures") / "r.db"
    facts = build(path)
    with Store(path) as store:
        return facts, store.results(), store.micro()


@pytest.fixture(scope="module")
def figures(data):
    _, results, micro = data
    return all_figures(results, micro)


def kind(figure: Figure) -> str:
    return next(k for k in KINDS if figure.key.startswith(k))


def text_of(svg: str) -> str:
    """The character data of an SVG, unescaped (what a reader sees)."""
    return " ".join(ET.fromstring(svg).itertext())


def test_every_kind_is_drawn_once_at_least_with_unique_slug_keys(figures):
    keys = [f.key for f in figures]
    assert {kind(f) for f in figures} == set(KINDS)
    assert len(keys) == len(set(keys))
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", key) for key in keys)
    assert "throughput-vs-devices-cifarnet-b32-fp32-cpu" in keys


def test_svgs_are_inline_xml_with_ids_prefixed_by_their_key(figures):
    every_id = []
    for f in figures:
        assert f.svg.startswith("<svg") and f.svg.rstrip().endswith("</svg>")
        assert "<?xml" not in f.svg and "DOCTYPE" not in f.svg and "<metadata" not in f.svg
        ET.fromstring(f.svg)  # raises on malformed XML
        ids = re.findall(r'\sid="([^"]+)"', f.svg)
        assert ids and all(i.startswith(f.key + "-") for i in ids)
        for ref in re.findall(r'(?:href="#|url\(#)([^")]+)', f.svg):
            assert ref in ids  # every reference points inside its own figure
        every_id += ids
    assert len(every_id) == len(set(every_id))  # no clash between figures inlined together


def test_captions_say_how_and_on_which_systems(data, figures):
    facts, _, _ = data
    a, b = facts["hostnames"]["a"], facts["hostnames"]["b"]
    for f in figures:
        assert f.caption and f.title and f.system
        assert "Systems: " in f.caption
        assert all(host in f.caption for host in f.system.split(", "))
        if kind(f) in BOTH_SYSTEMS and "strong" not in f.key:
            assert a in f.caption and b in f.caption, f.key
    captions = {f.key: f.caption for f in figures} | {kind(f): f.caption for f in figures}
    assert "95% confidence interval" in captions["throughput-vs-batch"]
    assert "2(n-1)/n" in captions["collective-busbw-all-reduce-fp32"]
    assert "2·M·N·K" in captions["gemm-tflops"]
    assert "Pareto front" in captions["power-vs-performance"]


def test_failed_cases_are_marked_never_dropped(figures):
    batch = next(f for f in figures if f.key == "throughput-vs-batch-cifarnet-32-fp32-cpu")
    seen = text_of(batch.svg)
    for status, size in (("oom", "4096"), ("timeout", "2048"), ("error", "3")):
        assert re.search(rf"\b{status}\b", seen) and re.search(rf"\b{size}\b", seen)
    assert "oom at batch 4096" in batch.caption
    devices = next(f for f in figures if f.key == "throughput-vs-devices-cifarnet-b32-fp32-cpu")
    assert "crashed" in text_of(devices.svg) and "8 devices" in devices.caption


def test_text_from_the_data_is_escaped(data, figures):
    facts, _, _ = data
    for f in figures:
        assert "<script" not in f.svg.lower()
    host_b = facts["hostnames"]["b"]  # 'big-cpu<b>'
    gemm = next(f for f in figures if kind(f) == "gemm-tflops")
    assert host_b.replace("<", "&lt;").replace(">", "&gt;") in gemm.svg
    assert host_b in text_of(gemm.svg)


def hostile(results, micro):
    """The fixture with every model, layer and hostname a markup or mathtext attack."""
    results, micro = copy.deepcopy(results), copy.deepcopy(micro)
    model = HOSTILE_MODEL + " costs $5 per $GPU"
    for r in results:
        r["case"]["model"] = model
    # The results of a system share its record (Store.select decodes it once): each once.
    for system in {id(r["system"]): r["system"] for r in results}.values():
        system["hostname"] = "<script>h</script>$" + system["hostname"]
    for run in micro:
        if run["kind"] == "profile":
            run["params"]["case"]["model"] = model
            run["metrics"]["layers"][0]["name"] = "<script>layer</script>$a$"
    return results, micro


def test_markup_and_dollars_in_labels_stay_text(data):
    _, results, micro = data
    figures = all_figures(*hostile(results, micro))
    assert {kind(f) for f in figures} == set(KINDS)
    for f in figures:
        assert "<script" not in f.svg.lower()
        ET.fromstring(f.svg)
    layers = next(f for f in figures if kind(f) == "layer-breakdown")
    assert "<script>layer</script>$a$" in text_of(layers.svg)  # literal, not mathtext
    assert "&lt;script&gt;" in layers.svg
    split = next(f for f in figures if kind(f) == "step-breakdown")
    assert HOSTILE_MODEL + " costs $5 per $GPU b16" in text_of(split.svg)


def test_output_is_deterministic(data, figures):
    _, results, micro = data
    again = all_figures(results, micro)
    assert [f.key for f in again] == [f.key for f in figures]
    assert [f.svg for f in again] == [f.svg for f in figures]


def test_kinds_without_data_are_not_produced(data):
    _, results, micro = data
    assert all_figures([], []) == []
    only_micro = {kind(f) for f in all_figures([], micro)}
    assert only_micro == {"step-breakdown", "layer-breakdown", "collective-busbw", "gemm-tflops"}
    no_energy = [r for r in results if not r["metrics"].get("average_power_w")]
    kinds = {kind(f) for f in all_figures(no_energy, [])}
    assert "power-vs-performance" not in kinds and "energy-per-sample" not in kinds
    assert "throughput-vs-batch" in kinds


def test_micro_hostnames_fall_back_to_the_given_mapping(data):
    facts, _, micro = data
    figures = all_figures([], micro, hostnames={facts["systems"]["a"]: "node-a"})
    gemm = next(f for f in figures if kind(f) == "gemm-tflops")
    assert "node-a" in gemm.caption and facts["systems"]["b"] in gemm.caption


def test_helpers():
    assert plain("a $x$ b") == r"a \$x\$ b"
    assert slug("throughput-vs-batch", HOSTILE_MODEL, 32, None) == (
        "throughput-vs-batch-script-alert-1-script-32"
    )
    one = Figure("k", "t", "c", "s", Drawing(lambda fig: None))
    assert [f.key for f in unique_keys([one, one, replace(one, key="k-2"), one])] == [
        "k",
        "k-2",
        "k-2-2",
        "k-3",
    ]


def test_a_long_legend_label_is_cut_and_leaves_the_axes_their_room():
    from matplotlib.figure import Figure as MplFigure

    from trainperf.report.figure_kit import LEGEND_LABEL, legend

    fig = MplFigure(figsize=(6.4, 4.0), layout="constrained")
    ax = fig.add_subplot()
    ax.plot([1, 2], [1, 2], label="h" * 200)
    ax.plot([1, 2], [2, 1], label="short")
    legend(ax)
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert texts == ["h" * (LEGEND_LABEL - 1) + "…", "short"]
