"""Terminal tables print user text as text: Rich markup in a model, host or suite name (or
in a message) is shown as written, never parsed (a stray ``[/]`` raised MarkupError)."""

import io
from types import SimpleNamespace

from rich.console import Console

from trainperf.report.markdown import markdown_table
from trainperf.report.sweep import SweepDisplay, summary_table
from trainperf.report.system import system_view
from trainperf.report.tables import pareto_table, results_table, scaling_table, suites_table

MODEL = "my.nets:[/]net[bold]"
HOST = "node[/]7"


def rendered(renderable):
    console = Console(file=io.StringIO(), width=250, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def result(status="ok", message=None):
    case = {"model": MODEL, "batch_size": 2, "image_size": 16, "precision": "fp32"}
    case |= {"device": "cpu", "steps": "fixed:1:1", "devices": 1}
    metrics = {"samples_per_s_median": 10.0, "runs": 1, "runs_stop_reason": "fixed_[/]runs"}
    error = {"type": "RuntimeError", "message": message} if message else None
    return {"case": case, "status": status, "metrics": metrics, "error": error}


def test_results_table_shows_names_as_written():
    table = results_table([result(), result("error", "[/] at [pair.cc:537]")], "t", wide=True)
    out = rendered(table)
    assert MODEL in out and "fixed_[/]runs" in out
    assert "error [1]" in out and "[1] [/] at [pair.cc:537]" in out  # the reason, under it
    assert f"| {MODEL} |" in markdown_table(table)


def test_terminal_controls_in_stored_text_are_shown_not_obeyed():
    """An error message or a reason may hold ESC sequences (a compiler's colours, or an
    imported file's): the terminal gets them as escapes, never the sequence itself."""
    message = "boom \x1b]0;title\x07\x1b[2J\x9b31m\r=1"
    tables = [results_table([result("error", message)], "t", wide=True)]
    tables.append(summary_table([result("crashed", message)]))
    for out in map(rendered, tables):
        assert not any(c in out for c in "\x1b\x07\x9b\r"), repr(out)
        assert "boom \\x1b]0;title\\x07\\x1b[2J\\x9b31m\\x0d=1" in out


def test_summary_table_and_progress_line_show_labels_as_written():
    out = rendered(summary_table([result("crashed", "killed [/]")]))
    assert MODEL in out and "killed [/]" in out
    console = Console(file=io.StringIO(), width=250, color_system=None)
    display = SweepDisplay(console, 2)
    display.on_start(0, SimpleNamespace(label=f"{MODEL} b2"), 1, 3)
    out = rendered(display.progress.get_renderable())
    assert f"[case 1/2, run 1] {MODEL} b2" in out


def test_piped_progress_says_when_each_run_starts_and_ends():
    # Rich draws no progress line where the output is not a terminal: a piped sweep was
    # silent for minutes. Plain lines say each run's start and end there.
    console = Console(file=io.StringIO(), width=250, color_system=None)
    assert not console.is_terminal
    with SweepDisplay(console, 2) as display:
        display.on_start(1, SimpleNamespace(label=f"{MODEL} b2"), 1, 3)
        run = result() | {"run_number": 1}
        display.on_run(1, run)
        display.on_result(1, result())
        display.on_start(0, SimpleNamespace(label="cifarnet b4"), 1, 2)
    lines = console.file.getvalue().splitlines()
    assert lines[0].startswith(f"[case 2/2, run 1] {MODEL} b2: started (0/2 cases done, 0:00:0")
    assert lines[0].endswith("left ~-:--:--)")
    assert lines[1] == f"    {MODEL} b2 @16 fp32 cpu run 1: 10.0 samples/s"
    assert lines[3].startswith("[case 1/2, run 1] cifarnet b4: started (1/2 cases done")
    assert "left ~-:--:--" not in lines[3]  # an estimate once a run was measured

    terminal = Console(file=io.StringIO(), width=250, force_terminal=True, color_system=None)
    with SweepDisplay(terminal, 2) as display:
        display.on_start(0, SimpleNamespace(label="cifarnet b4"), 1, 3)
    assert "started" not in terminal.file.getvalue()  # the live line says it there


def test_scaling_pareto_and_suites_tables_show_names_as_written():
    row = {"hostname": HOST, "system": "f1", "setting": f"{MODEL} b2", "scaling": "weak"}
    row |= {"devices": 1, "nodes": 1, "parallel": "none", "runs": 3, "baseline_runs": 3}
    row |= {"samples_per_s": 1.0, "speedup": 1.0, "efficiency": 1.0}
    out = rendered(scaling_table([row], wide=True))
    assert HOST in out and MODEL in out
    point = {"hostname": HOST, "devices": 1, "batch_size": 2, "precision": "fp32"}
    point |= {"samples_per_s": 1.0, "average_power_w": 2.0, "on_front": True}
    fronts = {"fronts": [{"model": MODEL, "size": 16, "points": [point]}]}
    out = rendered(pareto_table(fronts))
    assert f"{MODEL} @16" in out and HOST in out
    suites = [{"name": "[/]s", "cases": 1, "version": "abc", "description": "[red]x[/red]"}]
    out = rendered(suites_table(suites))
    assert "[/]s" in out and "[red]x[/red]" in out


def test_system_view_shows_host_and_values_as_written():
    record = {"hostname": HOST, "env": {"CUDA_VISIBLE_DEVICES": "[/]0"}}
    record |= {"network": [{"name": "eth[/]0", "rdma_devices": ["mlx[/]5"]}]}
    record |= {"cpu": {"model": "Xeon [/] CPU"}}
    out = rendered(system_view(record))
    for text in (HOST, "[/]0", "eth[/]0", "mlx[/]5", "Xeon [/] CPU"):
        assert text in out, text


def test_a_case_of_another_sweep_is_announced_once_with_its_owner():
    console = Console(file=io.StringIO(), width=250, color_system=None)
    display = SweepDisplay(console, 2)
    held = {"pid": 4242, "host": HOST}
    for _ in range(3):
        display.on_wait(1, SimpleNamespace(label=f"{MODEL} b2"), held)
    out = console.file.getvalue()
    assert out.count("being measured by another sweep") == 1
    assert f"{MODEL} b2" in out and f"pid 4242 on {HOST}" in out


def test_results_table_shows_the_method_the_state_per_rank_and_why_mfu_is_absent():
    sharded = result()
    sharded["case"] |= {"devices": 2, "parallel": "fsdp", "activation_checkpointing": "full"}
    sharded["metrics"] |= {
        "mem_params_bytes": 2**20,
        "mem_grads_bytes": 2**20,
        "mem_optimizer_bytes": 2**21,
        "mfu": None,
        "mfu_absent_reason": "no data-sheet peak known for device 'AMD EPYC'",
    }
    out = rendered(results_table([sharded, result()], title="t", wide=True))
    assert "2 fsdp" in out and "ac-full" in out and "4.0 MiB" in out
    assert "MFU -: no data-sheet peak known for device 'AMD EPYC'" in out
