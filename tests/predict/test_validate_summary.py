"""The summary of docs/validate_predict.py: the model beside the two trivial guesses, on
rows whose answers are known by hand."""

from __future__ import annotations

import importlib.util
import math
import re
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from trainperf.predict.catalog_file import load_catalog

SCRIPT = Path(__file__).parents[2] / "docs" / "validate_predict.py"


@pytest.fixture(scope="module")
def validate():
    spec = importlib.util.spec_from_file_location("validate_predict", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_leave_one_out_means(validate):
    assert validate.leave_one_out_means([1.0, 2.0, 3.0]) == [2.5, 2.0, 1.5]


def test_summary_on_rows_with_known_errors(validate):
    row = validate.Row
    rows = [
        # efficiency 0.9 predicted 0.95; per GPU 90 of 100 on one GPU, predicted 95
        row(0.9, 0.95, per_gpu=90.0, one_gpu=100.0, predicted_per_gpu=95.0),
        row(0.7, 0.8, per_gpu=70.0, one_gpu=100.0, predicted_per_gpu=80.0),
        row(0.8, 0.8),  # efficiency only: no throughput from its source
    ]
    scores = validate.summary(rows)
    efficiency = scores["efficiency MAE (points)"]
    assert efficiency["model"] == pytest.approx((5 + 10 + 0) / 3)
    assert efficiency["perfect scaling"] == pytest.approx((10 + 30 + 20) / 3)
    # leave-one-out means: 0.75, 0.85, 0.8 -> errors 15, 15, 0 points
    assert efficiency["mean of the other rows"] == pytest.approx(10.0)
    throughput = scores["per-GPU throughput at N, median abs. error"]
    assert throughput["model"] == pytest.approx((95 / 90 - 1 + 80 / 70 - 1) / 2)
    assert throughput["perfect scaling"] == pytest.approx((100 / 90 - 1 + 100 / 70 - 1) / 2)
    assert throughput["mean of the other rows"] == pytest.approx(
        (70 / 90 * -1 + 1 + 90 / 70 - 1) / 2
    )


def test_a_perfect_model_scores_zero(validate):
    rows = [
        validate.Row(e, e, per_gpu=e * 10, one_gpu=10.0, predicted_per_gpu=e * 10)
        for e in (0.5, 0.9)
    ]
    scores = validate.summary(rows)
    assert scores["efficiency MAE (points)"]["model"] == 0
    assert scores["per-GPU throughput at N, median abs. error"]["model"] == 0


def test_every_published_row_is_predicted_or_excluded_with_a_reason(validate):
    """docs/predict-sources.md's tables, row by row: a point (replicated or sharded) or an
    exclusion, never silence."""
    sources = (SCRIPT.parent / "predict-sources.md").read_text()
    ids = re.findall(r"^\| `([a-z0-9-]+)`", sources, flags=re.MULTILINE)
    points = {p.id for p in validate.POINTS} | {p.id for p in validate.FSDP_POINTS}
    split = {key for key in validate.EXCLUDED if "split into" in validate.EXCLUDED[key]}
    assert len(ids) == len(set(ids)) > 30
    assert set(ids) == (points - {p for p in points if p.rsplit("-", 1)[0] in split}) | set(
        validate.EXCLUDED
    )
    assert all(validate.EXCLUDED[key].strip() for key in validate.EXCLUDED)


def test_the_catalog_holds_the_fit_over_the_gpu_fabric_rows(validate):
    """The fitted terms in catalog.yaml are what docs/validate_predict.py fits (rounded) to
    the rows of CATALOG_FIT (the GPU-fabric rows; docs/predict.md says why not all rows)."""
    catalog = load_catalog()
    rows = [p for p in validate.POINTS if p.category == validate.CATALOG_FIT]
    assert validate.CATALOG_FIT == "gpu-fabric" and len(rows) == 32
    fitted = validate.fit(rows, catalog)
    held = validate.Params.from_catalog(catalog)
    assert held.step_noise_cv == pytest.approx(fitted.step_noise_cv, abs=5e-4)
    assert held.sync_overhead_s == pytest.approx(fitted.sync_overhead_s, abs=5e-5)
    assert held.tcp_efficiency == pytest.approx(fitted.tcp_efficiency, abs=5e-3)


def test_mpt_shapes_have_llm_foundrys_parameter_counts(validate):
    """The MPT models built from (d_model, heads, layers) hold exactly the NumParams of
    llm-foundry's tables at 2048 tokens (docs/predict-sources.md)."""
    published = {
        "mpt-760m": 760_470_528,
        "mpt-1b": 1_315_950_592,
        "mpt-3b": 2_651_837_440,
        "mpt-7b": 6_658_859_008,
        "mpt-13b": 12_853_954_560,
        "mpt-30b": 29_975_214_080,
        "mpt-70b": 64_862_437_376,
    }
    for name, count in published.items():
        spec = validate.model_spec(name, 2048)
        with torch.device("meta"):
            net = spec.build()
        assert sum(p.numel() for p in net.parameters()) == count, name


def test_the_llama2_shapes_count_llama2s_published_parameters(validate):
    """IBM's fms-fsdp rows: the zoo's Llama at fms-fsdp's shapes holds Llama 2's parameter
    counts as Meta published them (the Hugging Face model cards' checkpoints); 34B, which
    Meta did not release, has 70B's block at 48 layers and 22,016 wide."""
    published = {
        "llama2-7b": 6_738_415_616,
        "llama2-13b": 13_015_864_320,
        "llama2-70b": 68_976_648_192,
    }
    for name, count in published.items():
        with torch.device("meta"):
            net = validate.model_spec(name, 4096).build()
        assert sum(p.numel() for p in net.parameters()) == count, name
    shape = validate.LLAMA2_SHAPES["llama2-34b"]
    assert (shape.dim, shape.layers, shape.heads, shape.kv_heads, shape.ffn_dim) == (
        8192,
        48,
        64,
        8,
        22016,
    )
    ibm = [p for p in validate.FSDP_POINTS if p.id.startswith("ibm-")]
    assert {(p.model, p.generation) for p in ibm} == {
        (m, g) for m in ("llama2-34b", "llama2-70b") for g in ("a100", "h100")
    }
    assert all(p.size == 4096 and p.fsdp_reduce == "bf16" and p.nics == 2 for p in ibm)


def test_the_gemm_fit_interpolates_the_zero_of_the_mean_log_ratio(validate):
    grid = validate.GEMM_GRID
    # two points whose log ratio is linear in the fraction, zero at 0.5 and 0.6
    curves = [[g - 0.5 for g in grid], [g - 0.6 for g in grid]]
    assert validate.fit_gemm(curves) == pytest.approx(0.55)
    assert validate.fit_gemm([[1.0] * len(grid)]) == grid[0]  # always too fast
    assert validate.fit_gemm([[-1.0] * len(grid)]) == grid[-1]  # always too slow


def test_every_fsdp_point_names_a_known_model_device_and_link(validate):
    catalog = load_catalog()
    assert len(validate.FSDP_POINTS) >= 6
    assert {p.generation for p in validate.FSDP_POINTS} >= {"a100", "h100"}
    for point in validate.FSDP_POINTS:
        catalog.device(point.device), catalog.link(point.intra)
        assert point.inter is None or catalog.link(point.inter)
        assert validate.model_spec(point.model, point.size).name == point.model


def test_every_point_has_a_known_category_and_each_category_its_rows(validate):
    """Issue 33 item 6: GPU-fabric, PCIe-without-P2P and CPU rows, each kind enough rows."""
    counts = {c: sum(p.category == c for p in validate.POINTS) for c in validate.CATEGORIES}
    assert set(p.category for p in validate.POINTS) == set(validate.CATEGORIES)
    assert counts["cpu"] >= 8 and counts["pcie-no-p2p"] >= 4
    catalog = load_catalog()
    for point in validate.POINTS:
        device = catalog.device(point.device)
        assert (device.kind == "cpu") == (point.category == "cpu")
        if point.category == "pcie-no-p2p":
            assert not device.peer_to_peer and point.intra == device.host_staged_intra
        if point.category == "cpu":
            assert point.per_node == 1 and point.intra is None  # one node = one rank
    ids = [p.id for p in validate.POINTS]
    assert len(ids) == len(set(ids))


def test_category_summary_scores_each_kind_apart_and_all_together(validate):
    row = validate.Row
    rows = [
        row(0.9, 0.92, category="gpu-fabric"),
        row(0.8, 0.80, category="gpu-fabric"),
        row(0.6, 0.70, category="pcie-no-p2p"),
        row(0.7, 0.70, category="pcie-no-p2p"),
        row(0.5, 0.45, category="cpu"),
    ]
    scores = validate.category_summary(rows)
    assert list(scores) == ["gpu-fabric", "pcie-no-p2p", "cpu", "all"]
    assert scores["gpu-fabric"]["model"] == pytest.approx(1.0)
    assert scores["gpu-fabric"]["perfect scaling"] == pytest.approx(15.0)
    # the other row of the same kind: 0.8 for 0.9 and 0.9 for 0.8
    assert scores["gpu-fabric"]["mean of the other rows"] == pytest.approx(10.0)
    assert scores["pcie-no-p2p"]["model"] == pytest.approx(5.0)
    assert scores["pcie-no-p2p"]["mean of the other rows"] == pytest.approx(10.0)
    assert scores["cpu"]["rows"] == 1 and scores["cpu"]["model"] == pytest.approx(5.0)
    assert math.isnan(scores["cpu"]["mean of the other rows"])  # no other row of its kind
    assert scores["all"]["rows"] == 5
    assert scores["all"]["model"] == pytest.approx((2 + 0 + 10 + 0 + 5) / 5)
    assert scores["all"]["perfect scaling"] == pytest.approx((10 + 20 + 40 + 30 + 50) / 5)


def test_a_cpu_and_a_host_staged_point_are_predicted(validate):
    """One point of each new kind through the model (no fit): finite, below perfect."""
    catalog = load_catalog()
    params = validate.Params.from_catalog(catalog)
    for kind in ("cpu", "pcie-no-p2p"):
        point = next(p for p in validate.POINTS if p.category == kind)
        predicted = validate.predict_point(point, params, catalog)
        assert 0 < predicted.efficiency < 1 and predicted.comm_share >= 0


def test_the_xla_runs_reduce_their_gradients_after_the_backward(validate):
    """Lambda's runs are TensorFlow with XLA: one all-reduce of every gradient after the
    backward (validate_predict's XLA_AFTER_BACKWARD), which exposes more of it than DDP's
    25 MiB buckets overlapping the backward would."""
    catalog = load_catalog()
    params = validate.Params.from_catalog(catalog)
    lambdas = [p for p in validate.POINTS if p.category == "pcie-no-p2p"]
    assert lambdas and all(p.bucket_mb == validate.XLA_AFTER_BACKWARD for p in lambdas)
    vgg = next(p for p in lambdas if p.model == "vgg16" and p.gpus == 8)
    after = validate.predict_point(vgg, params, catalog)
    overlapped = validate.predict_point(replace(vgg, bucket_mb=25.0), params, catalog)
    assert after.comm_share > overlapped.comm_share + 0.05
    assert after.efficiency < overlapped.efficiency


def test_intel_caffe_runs_communicate_on_cores_of_their_own(validate):
    """Intel Caffe's MLSL endpoint servers run on cores reserved for them (its scripts):
    every Intel Caffe row carries that, and its all-reduce then costs the backward nothing,
    where the host model's default for a CPU time-shares the cores. MLPerf's runs reserved
    them on one node too; Dell's (Intel Caffe 1.0.4) only above one node, 2 of 40 cores."""
    catalog = load_catalog()
    params = validate.Params.from_catalog(catalog)
    caffe = [p for p in validate.POINTS if p.id.startswith(("dell-zenith", "mlperf05-intel"))]
    dell = [p for p in caffe if p.id.startswith("dell-zenith")]
    assert len(caffe) == 4 and all(p.contention.free for p in caffe)
    assert all(p.contention == validate.MLSL_104_SERVERS for p in dell)
    assert validate.MLSL_104_SERVERS.reserved_communication_cores == (2, 40)
    assert validate.MLSL_104_SERVERS.compute_factor(2, 1) == pytest.approx(40 / 38)
    others = [p for p in validate.POINTS if p.category == "cpu" and p not in caffe]
    assert others and all(p.contention is None for p in others)
    mlperf = next(p for p in caffe if p.id.startswith("mlperf05"))
    assert mlperf.contention == validate.MLSL_SERVERS
    assert validate.MLSL_SERVERS.compute_factor(8, 1) == 1
    own = validate.predict_point(mlperf, params, catalog)
    shared = validate.predict_point(replace(mlperf, contention=None), params, catalog)
    assert own.efficiency > shared.efficiency + 0.05
    assert mlperf.measured_efficiency == pytest.approx(1043.3 / (8 * 134.2))
    # the two cores Dell's multi-node runs gave MLSL cost their compute 40/38
    row = dell[0]
    reserved = validate.predict_point(row, params, catalog).efficiency
    free = validate.predict_point(
        replace(row, contention=validate.MLSL_SERVERS), params, catalog
    ).efficiency
    assert reserved == pytest.approx(free * 38 / 40, rel=0.02)


def test_dells_rows_compare_with_one_node_at_its_larger_batch(validate):
    """Dell's efficiencies are against one node at a batch larger than the 256- and 314-node
    runs' (its paper, p. 4): the rows carry that baseline, and the CPU batch curve then
    prices the smaller per-node batch, (B + k) / B per sample against (64 + k) / 64, where a
    weak-scaling comparison at each row's own batch priced nothing of it."""
    from trainperf.predict.compute import CPU_FIXED_SAMPLES as k

    catalog = load_catalog()
    params = validate.Params.from_catalog(catalog)
    dell = {p.gpus: p for p in validate.POINTS if p.id.startswith("dell-zenith")}
    assert {p.one_gpu_batch for p in dell.values()} == {64} and dell[128].batch == 64
    for nodes, point in dell.items():
        against_64 = validate.predict_point(point, params, catalog).efficiency
        weak = validate.predict_point(replace(point, one_gpu_batch=None), params, catalog)
        slower = (point.batch + k) / point.batch * 64 / (64 + k)
        assert against_64 == pytest.approx(weak.efficiency / slower, rel=0.01), nodes
    # A measured one-node throughput is taken at the baseline's batch: 60 img/s at 64 is
    # 60 / slower at 26, the rate a weak-scaling row at 26 would have measured.
    row = dell[314]
    slower = (26 + k) / 26 * 64 / (64 + k)
    against_64 = validate.predict_point(replace(row, one_gpu=60.0), params, catalog)
    weak = validate.predict_point(
        replace(row, one_gpu=60.0 / slower, one_gpu_batch=None), params, catalog
    )
    assert against_64.efficiency == pytest.approx(weak.efficiency / slower, rel=0.01)


def test_every_sweep_has_one_reference_row_and_known_parts(validate):
    """The sequence-length sweeps (docs/predict.md, "Attention by its kernel and length"):
    each holds one 2,048-token row to divide by, lengths at most the benchmark figure's, and
    a model whose heads are 128 wide, the figure's."""
    catalog = load_catalog()
    for sweep in validate.SWEEPS:
        lengths = [row[0] for row in sweep.rows]
        assert lengths.count(2048) == 1 and len(set(lengths)) == len(lengths)
        assert max(lengths) <= 16384
        d, heads, _ = validate.MPT_SHAPES[sweep.model]
        assert d // heads == 128
        catalog.device(sweep.device)
    first = validate.SWEEPS[0]
    relative = validate.sweep_relative(first, catalog, "flash-attention-triton")
    reference = [r for r in relative if r[0] == 2048]
    assert reference == [(2048, 1.0, 1.0)]


def test_each_source_runs_its_own_attention_kernel(validate):
    """llm-foundry's tables ran attn_impl triton, torchtitan PyTorch's SDPA (FlashAttention-2):
    the validation prices each run's attention at its own kernel's rate (predict-sources.md)."""
    kernels = {p.id.split("-")[0]: set() for p in validate.FSDP_POINTS}
    for point in validate.FSDP_POINTS:
        kernels[point.id.split("-")[0]].add(point.attention_kernel)
    assert kernels == {
        "lf": {"flash-attention-triton"},
        "tt": {"flash-attention-2"},
        "ibm": {"flash-attention-2"},
    }
