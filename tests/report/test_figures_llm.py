"""The language-model figure from results built by hand: workloads and methods grouped,
tokens/s per device and its interval, the stacked memory parts and exposed communication,
the absent activations named, a failed method noted and not drawn, and the section."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import matplotlib
import pytest
from matplotlib.figure import Figure as MplFigure
from matplotlib.patches import Rectangle

from report_fixture import hand_result, numbered, stored_and_rendered
from trainperf.report.figure_kit import STYLE
from trainperf.report.figures_llm import (
    comm_parts,
    draw,
    llm_figures,
    memory_parts,
    method_of,
    tokens_per_device,
    workloads,
)

MIB = 2**20
METHODS = {  # method -> its case fields
    "ddp": {"parallel": "ddp"},
    "fsdp": {"parallel": "fsdp"},
    "fsdp + full ckpt": {"parallel": "fsdp", "activation_checkpointing": "full"},
}
# Training state per rank in MiB: (parameters, gradients, optimizer state, activations).
MEMORY = {"ddp": (8, 8, 16, 40), "fsdp": (1, 1, 2, 40), "fsdp + full ckpt": (1, 1, 2, 5)}
SAMPLES_PER_S = {"ddp": 10.0, "fsdp": 12.0, "fsdp + full ckpt": 9.0}
COMM_S = {  # ddp: all-reduce; fsdp: (all-gather, reduce-scatter)
    "ddp": {"comm_exposed_s": 0.020},
    "fsdp": {"comm_exposed_all_gather_s": 0.012, "comm_exposed_reduce_scatter_s": 0.004},
    "fsdp + full ckpt": {
        "comm_exposed_all_gather_s": 0.006,
        "comm_exposed_reduce_scatter_s": -0.001,
    },
}
TOKENS, DEVICES = 4096, 8


def result(method, status="ok", model="llama3.2-1b", device="cuda", devices=DEVICES, host="gpu-a"):
    case = {"model": model, "batch_size": 1, "seq_len": TOKENS, "precision": "bf16"}
    case |= {"device": device, "devices": devices, "nodes": 1, "scaling": "weak"}
    case |= {"steps": "adaptive", "runs": 3, "seed": 0, "activation_checkpointing": "none"}
    case |= METHODS.get(method, {"parallel": method})
    rate = SAMPLES_PER_S.get(method, 5.0)
    params, grads, optimizer, activations = (b * MIB for b in MEMORY.get(method, (1, 1, 1, 1)))
    metrics = {
        "samples_per_s_median": rate,
        "samples_per_s_ci95": [0.8 * rate, 1.2 * rate],
        "ci95_relative": 0.2,
        "run_samples_per_s": [0.9 * rate, rate, 1.1 * rate],
        "tokens_per_sample": TOKENS,
        "tokens_per_s_median": rate * TOKENS,
        "device_count": devices,
        "mfu": 0.41,
        "mem_params_bytes": params,
        "mem_grads_bytes": grads,
        "mem_optimizer_bytes": optimizer,
        "mem_peak_bytes": params + grads + optimizer + activations + 4 * MIB,
        "mem_peak_source": "torch.cuda.max_memory_allocated",
        "comm_exposed_share": 0.1,
        **COMM_S.get(method, {}),
    }
    if device == "cuda":
        metrics["mem_activations_bytes"] = activations
    else:
        metrics |= {"mfu": None, "mfu_absent_reason": "no data-sheet peak for this CPU"}
        metrics["mem_activations_absent"] = "the CPU allocator keeps no count of live bytes"
    return hand_result(case, metrics, status, "CUDA out of memory", host)


def study(**kwargs):
    return [result(method, **kwargs) for method in METHODS]


@pytest.fixture(scope="module")
def results():
    """Three methods of llama3.2-1b on 8 GPUs and on 2 CPUs, the same model on 1 GPU (one
    method), llama3-8b under fsdp only, and an image model under two DDP bucket sizes."""
    one_device = result("none", devices=1)
    one_method = result("fsdp", model="llama3-8b")
    images = [result("ddp", model="resnet50") | {"metrics": {"samples_per_s_median": 1.0}}]
    images.append(images[0] | {"case": images[0]["case"] | {"bucket_mb": 1.0}})
    cpu = study(device="cpu", devices=2, host="cpu-a")
    return numbered([*study(), *cpu, one_device, one_method, *images])


def drawn(w) -> list:
    """The axes of the figure of workload ``w``, drawn as the report draws it."""
    with matplotlib.rc_context(STYLE):
        fig = MplFigure(layout="constrained")
        draw(fig, w)
    return fig.axes


def bars(ax) -> dict[int, list[tuple[float, float]]]:
    """x slot -> (bottom, height) of each bar drawn there."""
    found: dict[int, list[tuple[float, float]]] = {}
    for patch in ax.patches:
        if isinstance(patch, Rectangle):
            x = round(patch.get_x() + patch.get_width() / 2)
            found.setdefault(x, []).append((patch.get_y(), patch.get_height()))
    return found


def test_methods_are_named_from_the_parallel_mode_checkpointing_and_options():
    assert [method_of(result(m)["case"]) for m in METHODS] == list(METHODS)
    assert method_of({"devices": 1}) == "none"
    assert method_of({"devices": 2, "parallel": "auto", "bucket_mb": 1.0}) == "ddp (bucket 1 MiB)"
    fsdp = {"parallel": "fsdp", "reshard_after_forward": False, "fsdp_reduce": "bf16"}
    fsdp["activation_checkpointing"] = "selective"
    assert method_of(fsdp) == "fsdp (no reshard, bf16 reduce) + selective ckpt"


def test_a_workload_per_system_model_and_device_count_with_two_methods_or_more(results):
    found = workloads(results)
    assert [(w.hostname, w.devices, w.device_type) for w in found] == [
        ("gpu-a", 8, "cuda"),
        ("cpu-a", 2, "cpu"),
    ]
    assert [list(w.results) for w in found] == [list(METHODS)] * 2
    assert found[0].setting == "llama3.2-1b b1 @4096 bf16 cuda"
    keys = [f.figure.key for f in llm_figures(results)]
    assert keys == [
        "llm-llama3-2-1b-b1-4096-bf16-cuda-x8-gpu-a",
        "llm-llama3-2-1b-b1-4096-bf16-cpu-x2-cpu-a",
    ]


def test_strong_scaling_joins_weak_scaling_at_the_same_batch_per_device():
    strong = result("fsdp")
    strong["case"] |= {"scaling": "strong", "batch_size": DEVICES}
    [w] = workloads(numbered([result("ddp"), strong]))
    assert list(w.results) == ["ddp", "fsdp"] and w.setting.startswith("llama3.2-1b b1 ")


def test_tokens_per_s_per_device_and_its_interval_scale_samples_per_s(results):
    w = workloads(results)[0]
    value, (low, high) = tokens_per_device(w.results["fsdp"])
    assert value == pytest.approx(12.0 * TOKENS / DEVICES)  # 6144 tokens/s per GPU
    assert (low, high) == pytest.approx((0.8 * value, 1.2 * value))
    rows = {row[0]: row for row in llm_figures(results)[0].table["rows"]}
    assert rows["fsdp"][1:] == ["6,144 ±20%", "41.0%", "48 MiB", "10.0%"]
    tokens = drawn(w)[0]
    assert bars(tokens) == {
        i: [(0.0, pytest.approx(SAMPLES_PER_S[m] * TOKENS / DEVICES))]
        for i, m in enumerate(METHODS)
    }


def test_memory_is_stacked_parameters_gradients_optimizer_activations(results):
    w = workloads(results)[0]
    assert memory_parts(w.results["ddp"]["metrics"]) == {
        "parameters": 8 * MIB,
        "gradients": 8 * MIB,
        "optimizer state": 16 * MIB,
        "activations": 40 * MIB,
    }
    memory = drawn(w)[1]
    assert memory.get_ylabel() == "memory per rank (MiB)"
    for i, method in enumerate(METHODS):
        parts = MEMORY[method]
        bottoms = [sum(parts[:k]) for k in range(len(parts))]
        assert bars(memory)[i] == [pytest.approx(p) for p in zip(bottoms, parts, strict=True)]
    peaks = [line.get_ydata()[0] for line in memory.lines if line.get_marker() == "_"]
    assert peaks == pytest.approx([sum(MEMORY[m]) + 4 for m in METHODS])


def test_exposed_communication_is_all_reduce_for_ddp_gather_and_scatter_for_fsdp(results):
    w = workloads(results)[0]
    assert comm_parts(w.results["ddp"]) == {"all-reduce": 0.020}
    assert comm_parts(w.results["fsdp"]) == {"all-gather": 0.012, "reduce-scatter": 0.004}
    comm = drawn(w)[2]
    assert bars(comm)[1] == [(0.0, pytest.approx(12.0)), (pytest.approx(12.0), pytest.approx(4.0))]
    # A part that noise made negative hangs below 0, not from the top of the stack.
    assert bars(comm)[2] == [(0.0, pytest.approx(6.0)), (0.0, pytest.approx(-1.0))]


def test_activations_absent_on_a_cpu_are_named_in_caption_and_legend(results):
    gpu, cpu = llm_figures(results)
    assert "not measured" not in gpu.figure.caption
    assert "Activations not measured on CPU: the CPU allocator keeps no count" in cpu.figure.caption
    assert "activations not measured on CPU" in " ".join(ET.fromstring(cpu.figure.svg).itertext())
    memory = drawn(workloads(results)[1])[1]
    assert all(len(stack) == 3 for stack in bars(memory).values())  # no activations part
    assert cpu.table["rows"][0][2] == "—"
    assert "MFU —: no data-sheet peak for this CPU." in cpu.table["caption"]


def test_a_failed_method_is_noted_not_drawn_and_never_hides_an_ok_one():
    ok_then_failed = [*study(), result("ddp", status="oom")]  # the newer oom hides nothing
    oom_full = [result("ddp"), result("fsdp"), result("fsdp + full ckpt", status="oom")]
    [kept] = workloads(numbered(ok_then_failed))
    assert kept.failed() == {} and kept.results["ddp"]["status"] == "ok"
    results = numbered(oom_full)
    [w] = workloads(results)
    [found] = llm_figures(results)
    assert "Failed runs, marked x on the axis: fsdp + full ckpt: oom." in found.figure.caption
    assert found.table["rows"][2] == ["fsdp + full ckpt", "failed: oom", "—", "—", "—"]
    assert "oom" in " ".join(ET.fromstring(found.figure.svg).itertext())
    for ax in drawn(w):
        assert 2 not in bars(ax)  # no bar at the failed method's slot
        assert any(line.get_marker() == "x" for line in ax.lines)


def test_only_single_method_or_non_language_results_give_no_figure(results):
    alone = [r for r in results if r["case"]["devices"] == 1 or r["case"]["model"] != "llama3.2-1b"]
    assert workloads(alone) == [] and llm_figures(alone) == []


def test_report_has_the_section_with_the_table_or_says_why_not(tmp_path):
    db = tmp_path / "llm.db"
    summary, section = stored_and_rendered(db, [result("none", devices=1)], "llm")
    assert "llm" in summary.empty_sections
    assert "No figure: no language-model workload measured under two methods" in section
    summary, section = stored_and_rendered(db, study(), "llm")
    assert "llm-llama3-2-1b-b1-4096-bf16-cuda-x8-gpu-a" in summary.figures
    assert "Language models" in section and "<th>tokens/s per device</th>" in section
    assert '<td class="num">6,144 ±20%</td>' in section
