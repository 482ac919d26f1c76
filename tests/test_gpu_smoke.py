"""benchmarks/gpu_smoke.sh, the first run on a GPU machine: it parses, and it covers every
GPU path the issue names (run for real only where a GPU is at hand)."""

import subprocess
from pathlib import Path

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "gpu_smoke.sh"


def test_the_script_parses_and_lists_every_gpu_path():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    listed = subprocess.run(
        ["bash", str(SCRIPT), "--list"], capture_output=True, text=True, check=True
    ).stdout
    for path in (
        "--precision fp32",
        "--precision tf32",
        "--precision bf16",
        "--precision fp16",
        "--channels-last",
        "--compile",
        "--parallel ddp",
        "--parallel fsdp",
        "--framework jax",
        "--seq-len 8192",
        "micro gemm",
        "micro conv",
        "micro memory",
        "micro p2p",
        "micro collective",
        "profile ",
        "maxbatch ",
    ):
        assert path in listed, path
    assert all("--db gpu-smoke.db" in line for line in listed.splitlines())


def test_every_step_parses_against_the_cli():
    """A renamed flag (micro p2p --bytes, collective --devices) must not break the first run
    on a GPU machine: every step's command line parses as trainperf's own."""
    import shlex

    from test_docs_examples import parse

    listed = subprocess.run(
        ["bash", str(SCRIPT), "--list"], capture_output=True, text=True, check=True
    ).stdout
    for line in listed.splitlines():
        command = line[line.index("trainperf ") :]
        parse(shlex.split(command)[1:])  # raises click's error naming the bad flag


def test_only_picks_the_steps_by_name():
    """--only REGEX runs (and lists) the steps whose names match: how a second call on a
    GPU machine reruns just what a fix changed."""
    listed = subprocess.run(
        ["bash", str(SCRIPT), "--list", "--only", "micro (gemm|conv)|^profile"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    names = [line.split("  ")[0].strip() for line in listed]
    assert names[:3] == ["micro gemm", "micro conv", "profile"]
    assert len(names) == 4 and names[3].startswith("profile ddp x")  # x every visible GPU
