"""Same flag, same name, every verb (docs/cli.md): each rename takes its new spelling,
still takes its old one with one deprecation line, and refuses a bad value in one line
with exit 2. Nothing here measures: the commands stop at bad input, or use --help-free
checks that answer before a child starts."""

from __future__ import annotations

import json

import click
import pytest

from trainperf.cli import COMMANDS
from trainperf.cli.flag_types import BadInput, fixed_steps

PREDICT = "predict -m resnet50 --device v100-sxm2-16gb --devices 1,8 --intra nvlink2 --json"
BERT = "predict -m gpt2-small --device v100-sxm2-16gb --devices 1 --json"


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(
    ("new", "old"),
    [
        (f"{PREDICT} --image-size 128", f"{PREDICT} --size 128"),
        (f"{BERT} --seq-len 64", f"{BERT} --size 64"),
    ],
)
def test_predict_size_pair(run_cli, new, old):
    code, out_new, err = run_cli(new)
    assert code == 0 and "deprecated" not in err
    code, out_old, err = run_cli(old)
    assert code == 0
    assert _one_line(err) == (
        "trainperf: warning: --size is deprecated: use --image-size (images) or --seq-len "
        "(sequences)"
    )
    assert out_old == out_new  # the value means the same as before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            f"{PREDICT} --seq-len 128",
            "resnet50 is an image model: give --image-size, not --seq-len",
        ),
        (f"{BERT} --image-size 64", "gpt2-small is a language model: give --seq-len"),
        (f"{PREDICT} --image-size 0", "--image-size"),
        (f"{PREDICT} --image-size 128 --size 128", "give one of --image-size and --size"),
    ],
)
def test_predict_size_refused(run_cli, args, message):
    code, out, err = run_cli(args)
    assert code == 2 and out == ""
    assert message in err.strip().splitlines()[-1]


def test_fixed_steps_parses_with_run_syntax():
    assert fixed_steps("fixed:2:7", "profile") == (2, 7)
    assert fixed_steps("7", "profile") == (None, 7)  # N alone: N measured steps, as before
    assert fixed_steps("fixed:0:5", "equivalence", warmup_allowed=False) == (0, 5)
    for bad in ("adaptive", "fixed:1", "0", "x", "fixed:0:0"):
        with pytest.raises(BadInput):
            fixed_steps(bad, "profile")
    with pytest.raises(BadInput, match="no warm-up"):
        fixed_steps("fixed:1:5", "equivalence", warmup_allowed=False)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("profile cifarnet --steps adaptive", "profile runs a set number of steps"),
        ("profile cifarnet --steps fixed:x", "--steps 'fixed:x' is not valid"),
        ("profile cifarnet --steps 0", "--steps '0' is not valid"),
        ("equivalence cifarnet --devices 2 --steps fixed:1:3", "it has no warm-up"),
        ("equivalence cifarnet --devices 2 --steps adaptive:0.01", "set number of steps"),
    ],
)
def test_steps_refused(run_cli, args, message):
    code, out, err = run_cli(args)
    assert code == 2 and out == ""
    assert message in _one_line(err)


def test_profile_warmup_deprecated_and_not_with_fixed(run_cli, tmp_path):
    code, _, err = run_cli(
        f"profile cifarnet --steps fixed:1:2 --warmup 1 --db {tmp_path / 'x.db'}"
    )
    assert code == 2
    assert (
        err.splitlines()[0] == "trainperf: warning: --warmup is deprecated: use --steps fixed:W:N"
    )
    assert "leave out --warmup" in err.splitlines()[1]


@pytest.mark.parametrize("kind", ["memory", "p2p"])
def test_bytes_renamed(run_cli, kind):
    code, _, err = run_cli(f"micro {kind} --bytes 0")
    assert code == 2 and "--bytes 0: a buffer needs at least 1 byte" in _one_line(err)
    code, _, err = run_cli(f"micro {kind} --size 0")
    assert code == 2
    warning, error = err.strip().splitlines()
    assert warning == "trainperf: warning: --size is deprecated: use --bytes"
    assert "--size 0: a buffer needs at least 1 byte" in error
    code, _, err = run_cli(f"micro {kind} --bytes 1M --size 1M")
    assert code == 2 and "give one of --bytes and --size" in err


def test_memory_bytes_works(run_cli, tmp_path):
    db = tmp_path / "t.db"
    code, out, err = run_cli(
        f"micro memory --bytes 64K --device cpu --iters 1 --warmup 0 --db {db} --json"
    )
    assert code == 0 and "deprecated" not in err and '"size_bytes": 65536' in out
    code, out, err = run_cli(
        f"micro memory --size 64K --device cpu --iters 1 --warmup 0 --db {db} --json"
    )
    assert code == 0 and "--size is deprecated" in err and '"size_bytes": 65536' in out


def test_conv_takes_b_m_and_a_dtype_list(run_cli, tmp_path):
    db = tmp_path / "t.db"
    args = "micro conv -m cifarnet -b 2 --dtype fp32,bf16 --limit 1 --iters 1 --warmup 0"
    code, out, err = run_cli(f"{args} --device cpu --no-flush --db {db} --json")
    assert code == 0, err

    rows = json.loads(out)["metrics"]["rows"]
    assert [r["dtype"] for r in rows] == ["fp32", "bf16"]
    code, _, err = run_cli("micro conv --dtype fp32,fp8")
    assert (
        code == 2
        and "--dtype 'fp32,fp8' is not valid: allowed fp32, tf32, fp16, bf16" in _one_line(err)
    )


def test_collective_devices_renamed(run_cli):
    code, _, err = run_cli("micro collective --devices 0")
    assert code == 2 and "--devices" in _one_line(err)
    code, _, err = run_cli("micro collective --ops nope --nprocs 2")
    assert code == 2
    assert err.splitlines()[0] == "trainperf: warning: --nprocs is deprecated: use --devices"
    code, _, err = run_cli("micro collective --devices 2 --nprocs 2")
    assert code == 2 and "give one of --devices and --nprocs" in err.splitlines()[-1]


def test_results_per_step_renamed(run_cli, tmp_path):
    db = tmp_path / "none.db"
    code, _, err = run_cli(f"results --per-step --db {db}")
    assert code == 2 and "--per-step goes with --json" in _one_line(err)
    code, _, err = run_cli(f"results --steps --db {db}")
    assert code == 2
    assert (
        err.splitlines()[0] == "trainperf: warning: results --steps is deprecated: use --per-step"
    )


def test_equivalence_takes_db(run_cli, tmp_path):
    bad = tmp_path / "dir"
    bad.mkdir()
    code, out, err = run_cli(f"equivalence cifarnet --devices 2 --steps 2 --db {bad}")
    assert code == 2 and out == ""


def test_no_help_text_doubles_a_percent_sign():
    """click prints help as written (no %-formatting, unlike argparse): '95%%' showed as is."""
    texts, stack = [], list(COMMANDS)
    while stack:
        command = stack.pop()
        texts.append(command.help or "")
        if isinstance(command, click.Group):
            stack += command.commands.values()
        texts += [p.help or "" for p in command.params if isinstance(p, click.Option)]
    assert len(texts) > 100
    assert [t for t in texts if "%%" in t] == []
