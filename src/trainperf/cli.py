"""The ``trainperf`` command: verbs that parse, call the library and print. No logic here.

Exit codes: 0 success; 1 a run finished but some cases failed; 2 bad input (one line on
stderr, nothing written). The library is imported inside the verbs, so ``--help`` and bad
flags answer without waiting for torch to import.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

EXIT_OK, EXIT_FAILED_CASES, EXIT_BAD_INPUT = 0, 1, 2
DEFAULT_DB = "trainperf.db"

# Piped output has no terminal width to fit: do not squeeze the tables into 80 columns.
stdout = Console()
if not stdout.is_terminal:
    stdout = Console(width=200)
stderr = Console(stderr=True)


class BadInput(click.ClickException):
    """Bad input: reported as one line, exit code 2."""

    exit_code = EXIT_BAD_INPUT


class PositiveInt(click.ParamType):
    name = "positive integer"

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        try:
            number = int(value)
        except (TypeError, ValueError):
            number = 0
        if number < 1 or str(value).strip() not in (str(number), f"+{number}"):
            self.fail(f"must be a positive integer, got '{value}'", param, ctx)
        return number


def _emit_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=2, default=str) + "\n")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="trainperf")
def cli() -> None:
    """Measure how fast and how efficiently this machine trains neural networks."""


@cli.command()
@click.option("--model", "-m", help="zoo model (see `trainperf models`) or package.module:function")
@click.option("--batch-size", "-b", type=PositiveInt(), help="samples per step per device")
@click.option("--image-size", type=PositiveInt(), help="square image side (image models)")
@click.option("--seq-len", type=PositiveInt(), help="sequence length (language models)")
@click.option("--precision", default="fp32", show_default=True, help="fp32, tf32, fp16 or bf16")
@click.option(
    "--steps",
    default="adaptive",
    show_default=True,
    help="fixed:W:N or adaptive[:TARGET[:MAX_STEPS[:MAX_SECONDS]]]",
)
@click.option("--device", default="auto", show_default=True, help="cpu, cuda or auto")
@click.option("--channels-last", is_flag=True, help="NHWC memory format (image models)")
@click.option("--compile", "compile_", is_flag=True, help="wrap the model in torch.compile")
@click.option("--threads", type=PositiveInt(), help="torch intra-op threads")
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    help="seconds before a case is killed and recorded as timeout",
)
@click.option("--db", default=DEFAULT_DB, show_default=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="print one JSON document on stdout")
def run(
    model: str | None,
    batch_size: int | None,
    image_size: int | None,
    seq_len: int | None,
    precision: str,
    steps: str,
    device: str,
    channels_last: bool,
    compile_: bool,
    threads: int | None,
    timeout_s: float | None,
    db: Path,
    as_json: bool,
) -> None:
    """Run one case from flags, or the default suite for this machine."""
    from trainperf import system
    from trainperf.case import CaseError, check_case, make_case
    from trainperf.store import Store, StoreError, check_writable
    from trainperf.suite import default_cases

    try:
        check_writable(db)
    except StoreError as exc:
        raise BadInput(str(exc)) from None
    record = system.collect()
    capabilities = system.device_capabilities(record)
    if device == "auto":
        device = "cuda" if "cuda" in capabilities else "cpu"
    try:
        if model is None:
            if batch_size or image_size or seq_len:
                raise CaseError("--batch-size, --image-size and --seq-len need --model")
            cases = default_cases(device)
        else:
            if batch_size is None:
                raise CaseError("--model needs --batch-size (a positive integer)")
            cases = [
                make_case(
                    model=model,
                    batch_size=batch_size,
                    image_size=image_size,
                    seq_len=seq_len,
                    precision=precision,
                    device=device,
                    steps=steps,
                    channels_last=channels_last,
                    compile=compile_,
                    threads=threads,
                    timeout_s=timeout_s,
                )
            ]
        for case in cases:
            check_case(case, capabilities)
    except CaseError as exc:
        raise BadInput(str(exc)) from None

    with Store(db) as store:
        results = _run_with_progress(cases, store, record)
    if as_json:
        _emit_json({"results": results})
    else:
        from trainperf.report.tables import results_table

        stdout.print(results_table(results, title=f"trainperf on {record['hostname']}"))
        stderr.print(f"stored {len(results)} result(s) in {db}")
    if any(r["status"] != "ok" for r in results):
        sys.exit(EXIT_FAILED_CASES)


def _run_with_progress(cases: list, store: Any, record: dict) -> list[dict]:
    from trainperf import runner

    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
    )
    # A slow refresh: the parent shares the cores with the measured child.
    with Progress(*columns, console=stderr, transient=True, refresh_per_second=2) as progress:
        task = progress.add_task("starting", total=len(cases))

        def started(index: int, case: Any) -> None:
            progress.update(task, description=f"[{index + 1}/{len(cases)}] {case.label()}")

        def finished(index: int, result: dict) -> None:
            progress.advance(task)
            m = result.get("metrics") or {}
            rate = f"{m['samples_per_s_median']:.1f} samples/s" if m else result["status"]
            progress.console.print(f"  {result['case']['model']}: {rate}")

        return runner.run_cases(cases, store, record, on_start=started, on_result=finished)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="print a JSON array")
def models(as_json: bool) -> None:
    """List the zoo with parameters, FLOPs per sample and gradient bytes."""
    from trainperf import models as zoo
    from trainperf.analysis.flops import analyse

    rows = [analyse(zoo.get(name)).as_dict() for name in zoo.names()]
    if as_json:
        _emit_json(rows)
    else:
        from trainperf.report.tables import models_table

        stdout.print(models_table(rows))


@cli.command()
@click.option("--db", default=DEFAULT_DB, show_default=True, type=click.Path(path_type=Path))
@click.option("--model", "-m", help="only results of this model")
@click.option("--json", "as_json", is_flag=True, help="print one JSON document")
@click.option("--csv", "as_csv", is_flag=True, help="print CSV")
def results(db: Path, model: str | None, as_json: bool, as_csv: bool) -> None:
    """Show the results stored in the database."""
    from trainperf.store import Store, StoreError

    if as_json and as_csv:
        raise BadInput("choose one of --json and --csv")
    if not db.is_file():
        raise BadInput(f"no results database at {db}: run `trainperf run` first or give --db")
    try:
        with Store(db) as store:
            rows = store.results(model)
    except (StoreError, sqlite3.DatabaseError) as exc:
        raise BadInput(f"cannot read {db}: {exc}") from None
    if as_json:
        _emit_json({"results": rows})
    elif as_csv:
        from trainperf.report.tables import results_csv

        sys.stdout.write(results_csv(rows))
    else:
        from trainperf.report.tables import results_table

        stdout.print(results_table(rows))


def _fail(message: str, code: int) -> NoReturn:
    print(f"trainperf: error: {message}", file=sys.stderr)
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: click's usage errors become one line and exit code 2."""
    try:
        cli.main(args=argv, prog_name="trainperf", standalone_mode=False)
    except BadInput as exc:
        _fail(exc.format_message(), EXIT_BAD_INPUT)
    except click.UsageError as exc:
        _fail(exc.format_message(), EXIT_BAD_INPUT)
    except click.ClickException as exc:
        _fail(exc.format_message(), exc.exit_code)
    except click.exceptions.Abort:
        _fail("interrupted", 130)


if __name__ == "__main__":
    main()
