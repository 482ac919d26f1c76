"""``trainperf equivalence`` and ``trainperf slurm``: the verbs of distributed runs beyond
``run`` (registered in trainperf.cli)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import click

from trainperf.case.modes import RANK_MODES
from trainperf.cli.common import (
    apply_options,
    case_from_flags,
    case_options,
    check_out_file,
    choice_option,
    count_option,
    db_option,
    emit_json,
    fail,
    json_option,
    sharding_options,
    stderr,
    stdout,
)
from trainperf.cli.flag_types import (
    EXIT_FAILED_CASES,
    BadInput,
    NonEmptyPath,
    PositiveInt,
    fixed_steps,
)
from trainperf.cli.store_access import exit_if_not_stored, open_machine, stored_micro


@click.command()
@click.argument("model")
@click.option("--devices", type=PositiveInt(), required=True, help="ranks of the parallel run")
@click.option(
    "--steps",
    "steps_text",
    default="fixed:0:5",
    show_default=True,
    metavar="fixed:0:N|N",
    help="N steps compared, from the same initial weights (run's syntax, no warm-up); "
    "N alone: the same",
)
@click.option("--batch-size", "-b", type=PositiveInt(), help="global batch (default: 4 per device)")
@choice_option(
    "--parallel",
    RANK_MODES,
    "ddp",
    "the parallel run: replicated (ddp) or sharded (fsdp) weights",
)
@case_options
@apply_options(sharding_options)
@db_option()
@json_option
def equivalence(
    model: str,
    devices: int,
    steps_text: str,
    batch_size: int | None,
    db: Path,
    as_json: bool,
    **flags: Any,
) -> None:
    """Check that K steps of ddp or fsdp on N ranks give the model K sequential steps give.

    Same initial weights, same global batches, same optimizer; reports the largest
    parameter and loss differences and whether they are within the precision's tolerance.
    The verdict is stored in --db as a micro-benchmark run of kind equivalence.
    """
    from trainperf.launch import equivalence as equiv
    from trainperf.launch.runner import Interrupted

    _, steps = fixed_steps(steps_text, "equivalence", warmup_allowed=False)
    record, capabilities = open_machine(db)
    case = case_from_flags(
        capabilities,
        model=model,
        batch_size=batch_size or 4 * devices,
        devices=devices,
        scaling="strong",
        steps=f"fixed:0:{steps}",
        **flags,
    )
    try:
        result = equiv.check(case, steps)
    except Interrupted as exc:
        fail(f"interrupted by {exc}: nothing stored", 128 + exc.signum)
    document = {"kind": "equivalence", "steps": steps, "case": case.model_dump()}
    result = stored_micro(db, record, document, result)
    if as_json:
        emit_json(result)
    elif result["status"] != "ok":
        stdout.print(f"{result['status']}: {result['error']['message']}", markup=False)
    else:
        m = result["metrics"]
        verdict = "equivalent" if m["equivalent"] else "NOT equivalent"
        stdout.print(
            f"{case.model}: {m['steps']} steps, global batch {m['global_batch']}, "
            f"{m['devices']} ranks vs 1 process: {verdict} (largest parameter difference "
            f"{m['max_param_diff']:.3g}, loss difference {m['max_loss_diff']:.3g}, "
            f"tolerance {m['tolerance']:g})",
            markup=False,
        )
        for note in m["notes"]:
            stdout.print(f"  note: {note}", markup=False)
    exit_if_not_stored(result)
    if result["status"] != "ok" or not result["metrics"]["equivalent"]:
        sys.exit(EXIT_FAILED_CASES)


@click.command()
@click.argument("suite_name", metavar="[SUITE]", required=False)
@click.option(
    "--train",
    "train_text",
    metavar="'MODEL OPTIONS'",
    help="instead of a suite, one `trainperf train` run over all the nodes: its model and "
    "options, quoted (the script adds --nodes, --rdzv-endpoint and --db)",
)
@count_option("--nodes", 2)
@click.option("--gpus-per-node", type=PositiveInt(), help="GPUs per node (sets devices)")
@click.option(
    "--time",
    "time_limit",
    default="02:00:00",
    show_default=True,
    help="the job's time limit, as sbatch takes it: MINUTES, HH:MM:SS or D-HH[:MM[:SS]] (0: none)",
)
@click.option("--partition", help="Slurm partition")
@click.option("--set", "overrides", multiple=True, metavar="FIELD=VALUE", help="set a case field")
@db_option(help="database path on the nodes", path_type=str)
@click.option(
    "--out",
    type=NonEmptyPath(path_type=Path),
    help="script file, new or a regular file to replace (default: trainperf-SUITE.sbatch, "
    "trainperf-train-MODEL.sbatch; '-' for stdout)",
)
def slurm(
    suite_name: str | None,
    train_text: str | None,
    nodes: int,
    gpus_per_node: int | None,
    time_limit: str,
    partition: str | None,
    overrides: tuple[str, ...],
    db: str,
    out: Path | None,
) -> None:
    """Write an sbatch script that runs SUITE (or one --train run) across the nodes of a
    Slurm allocation."""
    from trainperf.case.suite import SuiteError, resolve
    from trainperf.core.fileio import write_atomic
    from trainperf.launch.slurm import (
        SlurmError,
        case_sets,
        safe_name,
        sbatch_script,
        train_sbatch_script,
    )

    if (suite_name is None) == (train_text is None):
        raise BadInput("give a SUITE or --train 'MODEL OPTIONS', one of them")
    try:
        if train_text is not None:
            if overrides:
                raise BadInput(
                    "--set sets a case field of a suite: give train's options in --train"
                )
            train_args = _checked_train_args(train_text)
            script = train_sbatch_script(
                train_args, nodes, gpus_per_node, time_limit, partition, db
            )
            name = "train-" + next((a for a in train_args if not a.startswith("-")), "run")
        else:
            suite = resolve(suite_name)
            sets = case_sets(suite.with_overrides(list(overrides)), gpus_per_node, overrides)
            suite.with_overrides([*sets, f"nodes={nodes}"])  # valid with the nodes they get
            script = sbatch_script(
                suite_name, nodes, gpus_per_node, time_limit, partition, db, tuple(sets)
            )
            name = suite.name
    except (SuiteError, SlurmError) as exc:
        raise BadInput(str(exc)) from None
    if str(out) == "-":
        sys.stdout.write(script)
        return
    path = check_out_file(out or Path(f"trainperf-{safe_name(name)}.sbatch"), "--out")
    try:
        write_atomic(path, script)
    except OSError as exc:
        raise BadInput(f"--out {path}: cannot write: {exc.strerror or exc}") from None
    # The command as a shell takes it: quoted, and a name that starts with '-' as ./-name,
    # which sbatch would otherwise read as an option.
    shown = str(path) if path.is_absolute() or not str(path).startswith("-") else f"./{path}"
    stderr.print(f"wrote {path}: submit it with `sbatch {shlex.quote(shown)}`", markup=False)


def _checked_train_args(text: str) -> list[str]:
    """The words of --train, parsed as `trainperf train` parses its own command line (the
    verb is not run): a bad option or value is bad input here, before any node starts."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise BadInput(
            f"--train {text!r}: {exc}: give the model and train's options as one quoted string"
        ) from None
    root = click.get_current_context().find_root()  # the trainperf group: train is its verb
    assert isinstance(root.command, click.Group)
    try:
        root.command.commands["train"].make_context("train", list(words), parent=root)
    except click.ClickException as exc:
        raise BadInput(f"--train: {exc.format_message()}") from None
    return words
