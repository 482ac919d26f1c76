"""The ``trainperf`` command: verbs that parse, call the library and print. No logic here.

Exit codes: 0 success (every case ok or skipped); 1 a run finished but some cases failed;
2 bad input (one line on stderr, nothing written); 128 + N a sweep stopped by signal N
(130 Ctrl-C, 143 SIGTERM) after ending its running case, its finished results kept.
The library is imported inside the verbs, so ``--help`` and bad flags answer without
waiting for torch to import.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import sys
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.markup import escape

EXIT_OK, EXIT_FAILED_CASES, EXIT_BAD_INPUT = 0, 1, 2
DEFAULT_DB = "trainperf.db"

# Piped output has no terminal width to fit: do not squeeze the tables into 80 columns.
stdout = Console()
if not stdout.is_terminal:
    stdout = Console(width=200)
stderr = Console(stderr=True)
if not stderr.is_terminal:
    stderr = Console(stderr=True, width=200)


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


class Endpoint(click.ParamType):
    """HOST:PORT of a torchrun rendezvous: a host name or IPv4 address, or an IPv6
    address in brackets, and a port from 1 to 65535."""

    name = "HOST:PORT"
    _pattern = re.compile(r"(?:[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]):([0-9]{1,5})")

    def convert(self, value: Any, param: Any, ctx: Any) -> str:
        match = self._pattern.fullmatch(str(value))
        if not match or not 1 <= int(match.group(1)) <= 65535:
            self.fail(
                f"must be HOST:PORT (a host name or address, [IPv6] in brackets, and a port "
                f"1-65535), got {str(value)!r}",
                param,
                ctx,
            )
        return str(value)


def _emit_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=2, default=str) + "\n")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="trainperf")
def cli() -> None:
    """Measure how fast and how efficiently this machine trains neural networks."""


# Flags that describe one case; a suite sets these in its file instead.
CASE_FLAGS = (
    "model",
    "batch_size",
    "image_size",
    "seq_len",
    "precision",
    "steps",
    "device",
    "channels_last",
    "cudnn_benchmark",
    "compile_",
    "threads",
    "timeout_s",
    "devices",
    "nodes",
    "parallel",
    "scaling",
    "bucket_mb",
    "grad_compression",
    "static_graph",
    "grad_accum",
    "data",
    "workers",
)


class CountList(click.ParamType):
    """'1,2,4,8': positive integers, one case per value."""

    name = "counts"

    def convert(self, value: Any, param: Any, ctx: Any) -> list[int]:
        if isinstance(value, list):
            return value
        counts = []
        for part in str(value).split(","):
            if not part.strip().isdigit() or int(part) < 1:
                self.fail(f"must be positive integers separated by commas, got '{value}'")
            counts.append(int(part))
        return counts


def _parallel_options(function: Any) -> Any:
    """Flags of data-parallel cases (torch.distributed)."""
    options = (
        click.option(
            "--devices",
            type=CountList(),
            help="devices (one process each with ddp) per node; 1,2,4 gives one case per count",
        ),
        click.option("--nodes", type=PositiveInt(), default=1, show_default=True),
        click.option(
            "--parallel",
            type=click.Choice(["auto", "none", "ddp", "dp"]),
            default="auto",
            show_default=True,
            help="auto: ddp above one device",
        ),
        click.option(
            "--scaling",
            type=click.Choice(["weak", "strong"]),
            default="weak",
            show_default=True,
            help="weak: --batch-size per device; strong: --batch-size in all, split",
        ),
        click.option(
            "--bucket-mb",
            type=click.FloatRange(min=0, min_open=True),
            help="DDP gradient bucket size in MiB (PyTorch's default: 25)",
        ),
        click.option(
            "--grad-compression",
            type=click.Choice(["none", "fp16", "bf16"]),
            default="none",
            show_default=True,
            help="DDP communication hook compressing gradients",
        ),
        click.option("--static-graph", is_flag=True, help="DDP static_graph=True"),
        click.option(
            "--grad-accum",
            type=PositiveInt(),
            default=1,
            show_default=True,
            help="micro-batches per optimizer step (all-reduce once, no_sync before)",
        ),
    )
    for option in reversed(options):
        function = option(function)
    return function


def _case_options(function: Any) -> Any:
    """The flags that describe one case (shared by `run` and `maxbatch`)."""
    options = (
        click.option("--image-size", type=PositiveInt(), help="square image side (image models)"),
        click.option("--seq-len", type=PositiveInt(), help="sequence length (language models)"),
        click.option(
            "--precision", default="fp32", show_default=True, help="fp32, tf32, fp16 or bf16"
        ),
        click.option("--device", default="auto", show_default=True, help="cpu, cuda or auto"),
        click.option("--channels-last", is_flag=True, help="NHWC memory format (image models)"),
        click.option(
            "--cudnn-benchmark/--no-cudnn-benchmark",
            default=True,
            show_default=True,
            help="cuDNN autotuning of convolutions (image models on cuda)",
        ),
        click.option("--compile", "compile_", is_flag=True, help="wrap the model in torch.compile"),
        click.option("--threads", type=PositiveInt(), help="torch intra-op threads"),
        click.option(
            "--timeout",
            "timeout_s",
            type=click.FloatRange(min=0, min_open=True),
            help="seconds before a case is killed and recorded as timeout",
        ),
    )
    for option in reversed(options):
        function = option(function)
    return function


def _db_option(function: Any) -> Any:
    return click.option(
        "--db", default=DEFAULT_DB, show_default=True, type=click.Path(path_type=Path)
    )(function)


def _json_option(function: Any) -> Any:
    return click.option(
        "--json", "as_json", is_flag=True, help="print one JSON document on stdout"
    )(function)


def _format_option(function: Any) -> Any:
    return click.option(
        "--format",
        "table_format",
        type=click.Choice(["table", "md"]),
        default="table",
        show_default=True,
        help="terminal table, or Markdown for issues and papers",
    )(function)


def show_table(table: Any, table_format: str = "table") -> None:
    """Print a Rich table on the terminal, or as Markdown (``--format md``)."""
    if table_format == "md":
        from trainperf.report.markdown import markdown_table

        sys.stdout.write(markdown_table(table))
    else:
        stdout.print(table)


def _one_output(as_json: bool, table_format: str, *others: tuple[str, bool]) -> None:
    """Refuse --json (or --csv) together with --format md."""
    chosen = [name for name, on in (("--json", as_json), *others) if on]
    if table_format == "md":
        chosen.append("--format md")
    if len(chosen) > 1:
        raise BadInput(f"choose one of {' and '.join(chosen)}")


def check_out_file(path: Path, flag: str) -> None:
    """Bad input unless ``path`` can be written as a file (checked before anything runs)."""
    if path.is_dir():
        raise BadInput(f"{flag} {path} is a directory: give a file path")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise BadInput(f"{flag} {path}: directory {parent} does not exist")


def _open_machine(db: Path) -> tuple[dict, dict]:
    """Check the database path first (nothing written), then read this machine."""
    from trainperf import system
    from trainperf.store import StoreError, check_writable

    try:
        check_writable(db)
    except StoreError as exc:
        raise BadInput(str(exc)) from None
    record = system.collect()
    return record, system.device_capabilities(record)


@cli.command()
@click.argument("suite_name", metavar="[SUITE]", required=False)
@click.option("--model", "-m", help="zoo model (see `trainperf models`) or package.module:function")
@click.option("--batch-size", "-b", type=PositiveInt(), help="samples per step per device")
@click.option(
    "--steps",
    default="adaptive",
    show_default=True,
    help="fixed:W:N or adaptive[:TARGET[:MAX_STEPS[:MAX_SECONDS]]]: the step budget of "
    "a case, shared by its runs",
)
@click.option(
    "--runs",
    default="adaptive",
    show_default=True,
    help="independent runs (fresh processes) per case: N, or adaptive[:TARGET[:MAX_RUNS"
    "[:MAX_SECONDS]]] (at least 3, more until the between-run 95%% CI is within ±TARGET)",
)
@_case_options
@click.option(
    "--data",
    default="synthetic",
    show_default=True,
    help="synthetic, cifar10:DIR, imagefolder:DIR, tokens:FILE or jpeg-sample",
)
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="data-loader processes per device (real data only)",
)
@_db_option
@_json_option
@_parallel_options
@click.option(
    "--rdzv-endpoint",
    type=Endpoint(),
    help="HOST:PORT of the torchrun rendezvous for cases on several nodes "
    "(default: loopback 127.0.0.1:29400, one machine only)",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="FIELD=VALUE",
    help="set a case field in every case of the suite, e.g. --set device=cpu",
)
@click.option("--fresh", is_flag=True, help="measure every case again, even those already done")
@click.option(
    "--order-seed",
    type=click.IntRange(min=0),
    help="seed of the shuffled order of the runs (default: a random one, stored)",
)
@click.pass_context
def run(
    ctx: click.Context,
    suite_name: str | None,
    overrides: tuple[str, ...],
    fresh: bool,
    order_seed: int | None,
    rdzv_endpoint: str | None,
    db: Path,
    as_json: bool,
    **flags: Any,
) -> None:
    """Run a suite (a built-in name or a YAML file; default: quick) or one case from flags.

    Every case is measured in several independent runs (fresh processes), the runs of
    all cases interleaved in a shuffled order. A rerun of a suite against the same
    database resumes: cases with an ok result for this system and suite version are not
    measured again, and a case cut short keeps its finished runs (--fresh measures all).
    """
    from trainperf.case import CaseError, check_case, make_case
    from trainperf.suite import SuiteError, resolve
    from trainperf.sweep import SweepItem

    given = [
        param.opts[0]
        for param in ctx.command.params
        if param.name in CASE_FLAGS
        and ctx.get_parameter_source(param.name) is not click.core.ParameterSource.DEFAULT
    ]
    if flags["model"] is None and given:
        raise BadInput(f"{', '.join(given)} describe one case and need --model")
    if flags["model"] is not None and (suite_name is not None or overrides):
        raise BadInput("give a suite (with --set) or --model, not both")
    _check_runs(flags["runs"])
    record, capabilities = _open_machine(db)
    suite = None
    if flags["model"] is None:
        if ctx.get_parameter_source("runs") is not click.core.ParameterSource.DEFAULT:
            overrides += (f"runs={flags['runs']}",)  # --runs sets the runs of every case
        try:
            suite = resolve("quick" if suite_name is None else suite_name)
            if overrides:
                suite = suite.with_overrides(list(overrides))
            skips = suite.check(capabilities)
        except SuiteError as exc:
            raise BadInput(str(exc)) from None
        items = [SweepItem(p.fields, p.key, skips.get(p.key)) for p in suite.planned]
    else:
        if flags["batch_size"] is None:
            raise BadInput("--model needs --batch-size (a positive integer)")
        device = flags["device"]
        if device == "auto":
            device = "cuda" if "cuda" in capabilities else "cpu"
        fields = {k.rstrip("_"): v for k, v in flags.items() if k not in ("device", "devices")}
        items = []
        try:
            for devices in flags["devices"] or [1]:
                case = make_case(**fields, device=device, devices=devices)
                check_case(case, capabilities)
                items.append(SweepItem.of(case))
        except CaseError as exc:
            raise BadInput(str(exc)) from None

    order_seed = _tell_other_nodes(items, rdzv_endpoint, order_seed)
    outcome = _sweep(items, db, record, suite, fresh, rdzv_endpoint, order_seed)
    if as_json:
        _emit_json(
            {
                "suite": suite.summary() if suite else None,
                "sweep_id": outcome.sweep_id,
                "order_seed": outcome.order_seed,
                "interrupted": outcome.interrupted,
                "counts": outcome.counts(),
                "results": outcome.results,
            }
        )
    else:
        from trainperf.report.sweep import summary_table
        from trainperf.report.tables import results_table

        title = f"trainperf on {record['hostname']}" + (f": suite {suite.name}" if suite else "")
        stdout.print(results_table(outcome.results, title=escape(title)))
        stdout.print(summary_table(outcome.results))
        stderr.print(
            f"stored in {db} (sweep {outcome.sweep_id}, run order seed {outcome.order_seed})",
            markup=False,
        )
    if outcome.interrupted:
        stderr.print(
            f"interrupted by {outcome.interrupted}: {outcome.not_run} case(s) not run; "
            "run the same command again to resume",
            markup=False,
        )
        sys.exit(128 + (outcome.exit_signal or 2))
    if outcome.failed:
        sys.exit(EXIT_FAILED_CASES)


def _check_runs(runs: str) -> None:
    """``--runs`` must be a run policy (trainperf.measure.runs)."""
    from trainperf.measure.runs import RunsError, parse_runs

    try:
        parse_runs(runs)
    except RunsError as exc:
        raise BadInput(f"--runs {runs}: {exc}") from None


def _tell_other_nodes(items: list, rdzv_endpoint: str | None, order_seed: int | None) -> int | None:
    """Cases on several nodes need the same command on every node, with the same order of
    runs: print it; return the order seed (one chosen here when none was given)."""
    nodes = max((item.fields.get("nodes", 1) for item in items), default=1)
    if nodes == 1:
        return order_seed
    from trainperf.dist import LOOPBACK_ENDPOINT

    command = ["trainperf", *sys.argv[1:]]
    if order_seed is None:
        # The nodes shuffle alike without talking: a seed from the cases themselves.
        cases = json.dumps([item.fields for item in items], sort_keys=True)
        order_seed = int(hashlib.sha256(cases.encode()).hexdigest()[:8], 16)
        command += ["--order-seed", str(order_seed)]
    if rdzv_endpoint is None:
        command += ["--rdzv-endpoint", LOOPBACK_ENDPOINT]
        stderr.print(
            f"cases span up to {nodes} nodes; the rendezvous listens on loopback "
            f"({LOOPBACK_ENDPOINT}), so all 'nodes' must be this machine; give "
            "--rdzv-endpoint HOST:PORT (an address of the first node) for real nodes"
        )
    stderr.print(f"start this same command on each of the {nodes} nodes:")
    stderr.print("  " + " ".join(command), soft_wrap=True, markup=False)
    return order_seed


def _sweep(
    items: list,
    db: Path,
    record: dict,
    suite: Any,
    fresh: bool,
    rendezvous: str | None = None,
    order_seed: int | None = None,
) -> Any:
    from trainperf.report.sweep import SweepDisplay
    from trainperf.store import Store
    from trainperf.sweep import SweepEvents, run_sweep

    with Store(db) as store, SweepDisplay(stderr, len(items)) as display:
        events = SweepEvents(
            display.on_start, display.on_probe, display.on_run, display.on_result, display.on_wait
        )
        return run_sweep(
            items,
            store,
            record,
            suite=(suite.name, suite.version) if suite else None,
            fresh=fresh,
            events=events,
            label=f"suite {suite.name} {suite.version}" if suite else None,
            rendezvous=rendezvous,
            order_seed=order_seed,
        )


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="print a JSON array")
@_format_option
def suites(as_json: bool, table_format: str) -> None:
    """List the built-in suites (run one with `trainperf run NAME`)."""
    from trainperf.suite import BUILTIN, builtin_path, load

    _one_output(as_json, table_format)
    rows = [load(builtin_path(name)).summary() | {"source": "built-in"} for name in BUILTIN]
    if as_json:
        _emit_json(rows)
    else:
        from trainperf.report.tables import suites_table

        show_table(suites_table(rows), table_format)


@cli.command()
@click.argument("model")
@_case_options
@_db_option
@_json_option
@click.option("--start", type=PositiveInt(), default=1, show_default=True, help="first batch tried")
@click.option(
    "--limit", type=PositiveInt(), default=65536, show_default=True, help="largest batch tried"
)
def maxbatch(model: str, start: int, limit: int, db: Path, as_json: bool, **flags: Any) -> None:
    """Find the largest batch per device that trains MODEL (doubling, then bisection).

    Every probe is the case at one batch size in its own process (1 warm-up and 2
    measured steps). The answer is stored; suites use it through `batch_size: max`.
    """
    import tempfile

    from trainperf import maxbatch as search
    from trainperf.case import CaseError, check_case, make_case
    from trainperf.runner import Interrupted, StopFlag
    from trainperf.store import Store

    if start > limit:
        raise BadInput(f"--start {start} is above --limit {limit}")
    record, capabilities = _open_machine(db)
    if flags["device"] == "auto":
        flags["device"] = "cuda" if "cuda" in capabilities else "cpu"
    try:
        template = make_case(
            model=model, batch_size=1, **{k.rstrip("_"): v for k, v in flags.items()}
        )
        check_case(template, capabilities)
    except CaseError as exc:
        raise BadInput(str(exc)) from None

    def show(probe: Any) -> None:
        verdict = "fits" if probe.fits else f"does not fit ({probe.status})"
        stderr.print(f"  batch {probe.batch_size}: {verdict}", markup=False)

    label = template.label().replace(" b1", "")
    stderr.print(f"searching the largest batch of {label}", markup=False)
    try:
        with (
            tempfile.TemporaryDirectory(prefix="trainperf-") as tmp,
            StopFlag().installed() as stop,
        ):
            found = search.find_max_batch(
                template, Path(tmp), start=start, limit=limit, on_probe=show, stop=stop
            )
    except search.SearchFailed as exc:
        _fail(str(exc), EXIT_FAILED_CASES)
    except Interrupted as exc:
        _fail(f"interrupted by {exc}: nothing stored", 128 + exc.signum)
    with Store(db) as store:
        store.add_system(record)
        document = found.as_dict() | {
            "case": template.model_dump(),
            "system": record["fingerprint"],
        }
        document["id"] = store.add_max_batch(
            record["fingerprint"],
            search.memory_key(template),
            template.model_dump(),
            found.batch_size,
            document["probes"],
            found.note,
        )
    if as_json:
        _emit_json(document)
    else:
        answer = found.batch_size if found.batch_size else "none"
        stdout.print(
            f"largest batch that trains: {answer}" + (f" ({found.note})" if found.note else ""),
            markup=False,
        )
    if found.batch_size is None:
        sys.exit(EXIT_FAILED_CASES)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="print a JSON array")
@_format_option
def models(as_json: bool, table_format: str) -> None:
    """List the zoo with parameters, FLOPs per sample and gradient bytes."""
    from trainperf import models as zoo
    from trainperf.analysis.flops import analyse

    _one_output(as_json, table_format)
    rows = [analyse(zoo.get(name)).as_dict() for name in zoo.names()]
    if as_json:
        _emit_json(rows)
    else:
        from trainperf.report.tables import models_table

        show_table(models_table(rows), table_format)


@cli.command()
@click.option("--db", default=DEFAULT_DB, show_default=True, type=click.Path(path_type=Path))
@click.option("--model", "-m", help="only results of this model")
@click.option("--json", "as_json", is_flag=True, help="print one JSON document")
@click.option("--csv", "as_csv", is_flag=True, help="print CSV")
@_format_option
def results(db: Path, model: str | None, as_json: bool, as_csv: bool, table_format: str) -> None:
    """Show the results stored in the database."""
    _one_output(as_json, table_format, ("--csv", as_csv))
    rows = _read_results(db, model)
    if as_json:
        _emit_json({"results": rows})
    elif as_csv:
        from trainperf.report.tables import results_csv

        sys.stdout.write(results_csv(rows))
    else:
        from trainperf.report.tables import results_table

        show_table(results_table(rows), table_format)


def _read_results(db: Path, model: str | None = None) -> list[dict]:
    """Stored results, or bad input when the database is missing or unreadable. The
    database is read without writing anything (``Store.copy_of``)."""
    from trainperf.store import Store, StoreError

    if not db.is_file():
        raise BadInput(f"no results database at {db}: run `trainperf run` first or give --db")
    try:
        with Store.copy_of(db) as store:
            return store.results(model)
    except (StoreError, sqlite3.DatabaseError) as exc:
        raise BadInput(f"cannot read {db}: {exc}") from None


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


# Verbs in modules of their own, which use the helpers above.
from trainperf.cli_compare import compare  # noqa: E402
from trainperf.cli_distributed import equivalence, slurm  # noqa: E402
from trainperf.cli_exchange import export, import_  # noqa: E402
from trainperf.cli_inspect import pareto, profile, scaling, system_  # noqa: E402
from trainperf.cli_micro import micro  # noqa: E402
from trainperf.cli_report import report  # noqa: E402
from trainperf.cli_train import isoaccuracy, train  # noqa: E402

for _verb in (scaling, equivalence, slurm, system_, pareto, profile, micro):
    cli.add_command(_verb)
for _verb in (report, compare, export, import_, train, isoaccuracy):
    cli.add_command(_verb)
from trainperf.cli_predict import predict  # noqa: E402

cli.add_command(predict)
from trainperf.cli_predict import catalog  # noqa: E402

cli.add_command(catalog)
