"""What every verb of the ``trainperf`` command shares: consoles and their width, option
decorators, tables and JSON on stdout, output files, device resolution, a case from flags,
the results filter, the one-line error. The flags' types and bad input are in
``flag_types``, opening the results database in ``store_access``.

These three modules import no verb module, so the verb modules import them and nothing
loops.
"""

from __future__ import annotations

import functools
import os
import shlex
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console

from trainperf.case.modes import PARALLEL_MODES, SCALINGS
from trainperf.cli.flag_types import (
    BadInput,
    CountList,
    Endpoint,
    FiniteFloat,
    NonEmptyPath,
    PositiveInt,
    PrecisionChoice,
    count_range,
    timeout_seconds,
)
from trainperf.core.limits import BUCKET_MB_MAX, BUCKET_MB_MIN, ascii_digits
from trainperf.store.schema import DEFAULT_DB

REPORT_DIR = "trainperf-report"  # where `trainperf report` writes by default

# DESIGN: human tables fit a 100-column terminal by default.
PIPED_WIDTH = 100


def output_width(is_terminal: bool, environ: Mapping[str, str] = os.environ) -> int | None:
    """The one rule for the width of what the verbs print: ``COLUMNS`` when it is set to a
    positive number, on a terminal or piped (what the user asked for, as ``shutil`` and Rich
    read it); else the terminal's own (None: Rich follows it as it is resized); else, piped
    to a file or a program, ``PIPED_WIDTH``. The tables choose their columns to fit it."""
    columns = environ.get("COLUMNS", "").strip()
    if ascii_digits(columns) and int(columns) > 0:
        return int(columns)
    return None if is_terminal else PIPED_WIDTH


class ScreenEnviron(Mapping[str, str]):
    """``os.environ`` as the consoles read it, live, less a screen size (COLUMNS, LINES) that
    is not digits 0-9: Rich takes a size for a number by ``str.isdigit`` and then calls
    ``int``, so ``COLUMNS=²`` ended every verb in a traceback; it is now ignored, as an unset
    one (``output_width`` ignores it too)."""

    SIZES = ("COLUMNS", "LINES", "JUPYTER_COLUMNS", "JUPYTER_LINES")

    def __init__(self, environ: Mapping[str, str] = os.environ) -> None:
        self._environ = environ

    def __getitem__(self, key: str) -> str:
        value = self._environ[key]
        if key in self.SIZES and not ascii_digits(value):
            raise KeyError(key)
        return value

    def __iter__(self) -> Iterator[str]:
        return (key for key in self._environ if key in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)


stdout = Console(_environ=ScreenEnviron())
stderr = Console(stderr=True, _environ=ScreenEnviron())


# stderr carries messages, not tables: piped to a log, a message naming a path stays on one
# line (a path cut at 100 columns can be neither searched nor copied).
PIPED_MESSAGE_WIDTH = 200


def fit_consoles() -> None:
    """Give stdout its width by ``output_width``, and stderr on a terminal; stderr piped is
    ``PIPED_MESSAGE_WIDTH`` wide. On every command: ``COLUMNS`` may change between two
    commands of one process, as in the tests."""
    stdout.width = output_width(stdout.is_terminal)  # type: ignore[assignment]
    if stderr.is_terminal:
        stderr.width = output_width(True)  # type: ignore[assignment]
    else:
        stderr.width = PIPED_MESSAGE_WIDTH


fit_consoles()


def warn_deprecated(old: str, use: str) -> None:
    """The one line on stderr that says an old spelling of a flag still works, for one
    release, and what replaces it (docs/cli.md lists them)."""
    print(f"trainperf: warning: {old} is deprecated: use {use}", file=sys.stderr)


def emit_json(document: Any) -> None:
    """Print one strict JSON document on stdout (trainperf.core.strict_json)."""
    from trainperf.core.strict_json import dumps

    sys.stdout.write(dumps(document, indent=2) + "\n")


def _apply(options: tuple[Any, ...], function: Any) -> Any:
    """Decorate ``function`` with ``options``, the first listed shown first in --help."""
    for option in reversed(options):
        function = option(function)
    return function


def apply_options(options: tuple[Any, ...]) -> Any:
    """``_apply`` as a decorator: ``@apply_options(sharding_options)``."""
    return lambda function: _apply(options, function)


def count_option(name: str, default: int, help: str | None = None) -> Any:
    """A positive count with its default shown in ``--help``: how every such flag reads."""
    return click.option(name, type=PositiveInt(), default=default, show_default=True, help=help)


def choice_option(name: str, choices: Sequence[str], default: str, help: str) -> Any:
    """A flag taking one of ``choices``, its default shown in ``--help``: how every such
    flag of trainperf reads."""
    return click.option(
        name, type=click.Choice(choices), default=default, show_default=True, help=help
    )


scaling_option = choice_option(
    "--scaling",
    SCALINGS,
    "weak",
    "weak: --batch-size per device; strong: --batch-size in all, split",
)

grad_compression_option = choice_option(
    "--grad-compression",
    ["none", "fp16", "bf16"],
    "none",
    "DDP communication hook compressing gradients",
)


# FSDP's and activation checkpointing's flags (run and maxbatch).
sharding_options = (
    choice_option(
        "--activation-checkpointing",
        ["none", "full", "selective"],
        "none",
        "recompute each transformer block's activations (full) or its element-wise "
        "ones (selective) in the backward",
    ),
    click.option(
        "--reshard-after-forward/--no-reshard-after-forward",
        default=True,
        show_default=True,
        help="FSDP: free each block's gathered weights after its forward",
    ),
    choice_option(
        "--fsdp-reduce",
        ["fp32", "bf16"],
        "fp32",
        "FSDP with bf16: dtype of the gradient reduce-scatter",
    ),
)


def parallel_options(function: Any) -> Any:
    """Flags of data-parallel cases (torch.distributed)."""
    options = (
        click.option(
            "--devices",
            type=CountList(),
            help="devices (one process each with ddp) per node; 1,2,4 gives one case per count",
        ),
        count_option("--nodes", 1),
        choice_option(
            "--parallel",
            PARALLEL_MODES,
            "auto",
            "auto: ddp above one device (mesh: jax.sharding, with --framework jax); "
            "fsdp: FSDP2, weights, gradients and optimizer state sharded",
        ),
        scaling_option,
        click.option(
            "--bucket-mb",
            type=FiniteFloat(min=BUCKET_MB_MIN, max=BUCKET_MB_MAX),
            help="DDP gradient bucket size in MiB (PyTorch's default: 25)",
        ),
        grad_compression_option,
        click.option("--static-graph", is_flag=True, help="DDP static_graph=True"),
        *sharding_options,
        count_option(
            "--grad-accum",
            1,
            "micro-batches per optimizer step (all-reduce once, no_sync before)",
        ),
    )
    return _apply(options, function)


rdzv_option = click.option(
    "--rdzv-endpoint",
    type=Endpoint(),
    help="HOST:PORT of the torchrun rendezvous for runs on several nodes "
    "(default: loopback 127.0.0.1:29400, one machine only)",
)


def tell_other_nodes(nodes: int, rdzv_endpoint: str | None, added: Sequence[str] = ()) -> None:
    """A job on several nodes needs the same command started on every node: print it (this
    one's, with ``added`` arguments), and with no ``rdzv_endpoint`` the one that makes the
    loopback rendezvous explicit, with a warning that all 'nodes' must then be this machine."""
    from trainperf.parallel.torchrun import LOOPBACK_ENDPOINT

    command = ["trainperf", *sys.argv[1:], *added]
    if rdzv_endpoint is None:
        command += ["--rdzv-endpoint", LOOPBACK_ENDPOINT]
        stderr.print(
            f"this command spans up to {nodes} nodes; the rendezvous listens on loopback "
            f"({LOOPBACK_ENDPOINT}), so all 'nodes' must be this machine; give "
            "--rdzv-endpoint HOST:PORT (an address of the first node) for real nodes"
        )
    stderr.print(f"start this same command on each of the {nodes} nodes:")
    stderr.print("  " + " ".join(command), soft_wrap=True, markup=False)


def precision_option(function: Any) -> Any:
    """``--precision``: one of the case's precisions, fp32 by default."""
    return click.option(
        "--precision",
        type=PrecisionChoice(),
        default="fp32",
        show_default=True,
        help="fp32, tf32, fp16 or bf16",
    )(function)


def device_option(function: Any) -> Any:
    """``--device``: cpu, cuda or auto (resolved by ``resolve_device``)."""
    return click.option("--device", default="auto", show_default=True, help="cpu, cuda or auto")(
        function
    )


# The verbs that measure a case's throughput (run, maxbatch) offer both frameworks; the
# profile and the equivalence check take PyTorch's step apart and have no such option.
framework_option = choice_option(
    "--framework",
    ["pytorch", "jax"],
    "pytorch",
    "the library that trains the case (jax: a Flax model in a jax.jit step)",
)


def case_options(function: Any) -> Any:
    """The flags that describe one case (shared by `run` and `maxbatch`)."""
    options = (
        click.option("--image-size", type=PositiveInt(), help="square image side (image models)"),
        click.option("--seq-len", type=PositiveInt(), help="sequence length (language models)"),
        precision_option,
        device_option,
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
            type=timeout_seconds(),
            help="seconds before a case is killed and recorded as timeout",
        ),
    )
    return _apply(options, function)


def report_command(db: Path) -> str:
    """The command that writes the report of ``db``, and where the report goes (the last
    line of ``trainperf run``)."""
    db_flag = "" if str(db) == DEFAULT_DB else f" --db {shlex.quote(str(db))}"
    return f"trainperf report{db_flag} (writes {REPORT_DIR}/index.html)"


def db_option(help: str | None = None, path_type: type = Path) -> Any:
    """``--db``: the results database, declared once for every verb (``path_type=str``
    where the path is only passed on, e.g. to the nodes of a Slurm job)."""
    return click.option(
        "--db",
        default=DEFAULT_DB,
        show_default=True,
        type=NonEmptyPath(path_type=path_type),
        help=help,
    )


def workers_option(default: int, help: str) -> Any:
    """``--workers``: data-loader processes per device, declared once for every verb."""
    return click.option(
        "--workers", type=count_range(), default=default, show_default=True, help=help
    )


def batch_size_option(default: int, help: str | None = None) -> Any:
    """``--batch-size``/``-b`` with its default shown, declared once for the verbs that have
    one (a verb whose default depends on other flags declares its own)."""
    return click.option(
        "--batch-size", "-b", type=PositiveInt(), default=default, show_default=True, help=help
    )


JSON_HELP = "print one JSON document on stdout"


def json_option(function: Any) -> Any:
    return click.option("--json", "as_json", is_flag=True, help=JSON_HELP)(function)


def table_output_options(json_help: str = JSON_HELP) -> Callable[[Any], Any]:
    """``--json`` (saying what it prints), ``--format`` and ``--wide``: how a verb that
    prints tables offers its other outputs."""

    def decorate(function: Any) -> Any:
        json_flag = click.option("--json", "as_json", is_flag=True, help=json_help)
        return json_flag(format_option(wide_option(function)))

    return decorate


def format_option(function: Any) -> Any:
    return click.option(
        "--format",
        "table_format",
        type=click.Choice(["table", "md"]),
        default="table",
        show_default=True,
        help="terminal table, or Markdown for issues and papers",
    )(function)


def wide_option(function: Any) -> Any:
    return click.option(
        "--wide",
        is_flag=True,
        help="every column, however wide (piped: no width limit; on a terminal: all of it)",
    )(function)


def table_width(table_format: str = "table", wide: bool = False) -> int | None:
    """The width a table's columns are chosen for: the console's (``output_width``), or
    None (no limit) for Markdown, whose cells are whole, and for ``--wide``."""
    return None if table_format == "md" or wide else stdout.width


def show_table(table: Any, table_format: str = "table", wide: bool = False) -> None:
    """Print a Rich table on the terminal, or as Markdown (``--format md``). ``wide``
    piped: as wide as the table is, nothing wrapped (a file or a program has no width)."""
    if table_format == "md":
        from trainperf.report.markdown import markdown_table

        sys.stdout.write(markdown_table(table))
    elif wide and not stdout.is_terminal:
        from rich.measure import Measurement

        needed = Measurement.get(stdout, stdout.options.update_width(10**6), table).maximum
        width = stdout.width
        stdout.width = max(width, needed)
        try:
            stdout.print(table)
        finally:
            stdout.width = width
    else:
        stdout.print(table)


def tell_if_none_selected(selected: Any, db: Path, result_filter: Any, what: str) -> None:
    """One line on stderr when the filters select no ``what`` ("results", "ok results"):
    the empty table a listing prints then says why (an empty database, or filters that
    match nothing). Not an error: the exit code stays 0, and JSON and CSV stay data."""
    if not selected:
        stderr.print(f"no {what} in {db}{result_filter.matching()}", markup=False)


def one_output(as_json: bool, table_format: str, *others: tuple[str, bool]) -> None:
    """Refuse --json (or --csv) together with --format md."""
    chosen = [name for name, on in (("--json", as_json), *others) if on]
    if table_format == "md":
        chosen.append("--format md")
    if len(chosen) > 1:
        raise BadInput(f"choose one of {' and '.join(chosen)}")


def check_out_file(
    path: Path, flag: str, *, follow_symlinks: bool = False, follow_flag: str | None = None
) -> Path:
    """The file to write for ``path`` (``fileio.check_output``: absent or a regular file,
    never a directory, device, FIFO or a symlink unless the user asked with ``follow_flag``),
    or bad input naming ``flag``; checked before anything runs."""
    from trainperf.core.fileio import FileKindError, check_output

    try:
        return check_output(path, flag, follow_symlinks=follow_symlinks, follow_flag=follow_flag)
    except FileKindError as exc:
        raise BadInput(str(exc)) from None


def resolve_device(device: str, capabilities: dict) -> str:
    """``--device auto``: cuda when this machine has it, else cpu; cpu and cuda as given;
    anything else bad input naming the three (a case's own field takes no auto)."""
    if device not in ("auto", "cpu", "cuda"):
        raise BadInput(f"--device {device!r} is not valid: allowed cpu, cuda or auto")
    if device == "auto":
        return "cuda" if "cuda" in capabilities else "cpu"
    return device


def case_from_flags(capabilities: dict, **fields: Any) -> Any:
    """A checked case from the flags of a verb (``compile_`` is the field ``compile``;
    ``device`` may be auto), or bad input naming the field and what is allowed."""
    from trainperf.case.spec import CaseError, check_case, make_case

    fields = {name.rstrip("_"): value for name, value in fields.items()}
    fields["device"] = resolve_device(fields.get("device", "cpu"), capabilities)
    try:
        case = make_case(**fields)
        check_case(case, capabilities)
    except CaseError as exc:
        raise BadInput(str(exc)) from None
    return case


# --sort's keys, for its help (trainperf.store.query.SORT_KEYS)
_SORT_HELP = "created_at (oldest first), model, system, status or samples_per_s; -KEY reverses"


def result_filter_options(function: Any) -> Any:
    """The filter of every verb that reads results (``results``, ``compare``, ``scaling``,
    ``pareto``, ``report``, ``export``): --system, --model, --status, --since, --suite,
    --limit and --sort, the same names, help and meaning in each. The verb receives them
    as one ``result_filter`` (``trainperf.store.query.ResultFilter``), checked here: a bad
    value is bad input, one line."""
    from trainperf.store.query import DEFAULT_SORT, STATUSES

    options = (
        click.option(
            "--system",
            "-s",
            "filter_system",
            multiple=True,
            metavar="HOST|FINGERPRINT",
            help="only results of this system (repeat, or separate with commas)",
        ),
        click.option(
            "--model",
            "-m",
            "filter_model",
            multiple=True,
            metavar="MODEL",
            help="only results of this model (repeat, or separate with commas)",
        ),
        click.option(
            "--status",
            "filter_status",
            multiple=True,
            metavar="STATUS",
            help=f"only results of this status: {', '.join(STATUSES)} (repeat, or separate "
            "with commas)",
        ),
        click.option(
            "--since",
            "filter_since",
            metavar="DATE",
            help="only results measured at or after this ISO 8601 date or time (UTC unless "
            "it gives its offset)",
        ),
        click.option("--suite", "filter_suite", metavar="NAME", help="only results of this suite"),
        click.option(
            "--sort",
            "filter_sort",
            metavar="KEY",
            default=DEFAULT_SORT,
            show_default=True,
            help=f"order: {_SORT_HELP} (-created_at: newest first)",
        ),
        click.option(
            "--limit",
            "filter_limit",
            type=PositiveInt(),
            metavar="N",
            help="only the first N results in --sort order",
        ),
    )

    @functools.wraps(function)
    def with_filter(*args: Any, **kwargs: Any) -> Any:
        from trainperf.store.query import FilterError, ResultFilter

        given = {name: kwargs.pop(f"filter_{name}") for name in _FILTER_FIELDS}
        try:
            kwargs["result_filter"] = ResultFilter.parse(**given)
        except FilterError as exc:
            raise BadInput(str(exc)) from None
        return function(*args, **kwargs)

    return _apply(options, with_filter)


_FILTER_FIELDS = ("system", "model", "status", "since", "suite", "limit", "sort")


def fail(message: str, code: int) -> NoReturn:
    """One line on stderr, then exit with ``code``."""
    print(f"trainperf: error: {message}", file=sys.stderr)
    sys.exit(code)
