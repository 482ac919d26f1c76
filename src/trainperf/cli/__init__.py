"""The ``trainperf`` command: verbs that parse, call the library and print. No logic here.

Exit codes: 0 success (every case ok or skipped); 1 a run finished but some cases failed,
``doctor --strict`` found a check that failed, or the results database could not be
written (locked by another process or a full disk, after waiting: trainperf.store.database; a
sweep's unstored results are then in a recovery file, trainperf.store.recovery); 2 bad input
(one line on stderr, nothing written); 128 + N a sweep stopped by signal N (130 Ctrl-C,
143 SIGTERM) after ending its running case, its finished results kept.
The library is imported inside the verbs, so ``--help`` and bad flags answer without
waiting for torch to import.

The verbs live one family per module; what they share is in ``trainperf.cli.common``,
``flag_types`` (the flags' types, bad input, exit codes) and ``store_access`` (opening the
results database).
``COMMANDS`` below is the one list of the verbs this group has.
"""

from __future__ import annotations

import click

from trainperf.cli import (
    compare,
    distributed,
    doctor,
    exchange,
    inspect,
    micro,
    predict,
    report,
    run,
    train,
)
from trainperf.cli.common import fail, fit_consoles
from trainperf.cli.flag_types import EXIT_BAD_INPUT, EXIT_FAILED_CASES, BadInput


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="trainperf")
def cli() -> None:
    """Measure how fast and how efficiently this machine trains neural networks."""
    fit_consoles()


# The submodules are bound by name (not their commands), so that ``trainperf.cli.run``
# stays the module and is not shadowed by the command of the same name.
COMMANDS: tuple[click.Command, ...] = (
    run.run,
    run.suites,
    run.maxbatch,
    run.models,
    run.results,
    inspect.scaling,
    inspect.profile,
    inspect.pareto,
    inspect.system_,
    doctor.doctor,
    distributed.equivalence,
    distributed.slurm,
    micro.micro,
    report.report,
    compare.compare,
    exchange.export,
    exchange.import_,
    train.train,
    train.isoaccuracy,
    predict.predict,
    predict.catalog,
)
for _command in COMMANDS:
    cli.add_command(_command)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: click's usage errors become one line and exit code 2; a
    database that stays locked or full, one line and exit code 1."""
    from trainperf.store.access import StoreError, StoreUnavailable

    try:
        cli.main(args=argv, prog_name="trainperf", standalone_mode=False)
    except StoreUnavailable as exc:
        fail(str(exc), EXIT_FAILED_CASES)
    except StoreError as exc:  # e.g. TRAINPERF_STORE_WAIT_S not a number of seconds
        fail(str(exc), EXIT_BAD_INPUT)
    except BadInput as exc:
        fail(exc.format_message(), EXIT_BAD_INPUT)
    except click.UsageError as exc:
        fail(exc.format_message(), EXIT_BAD_INPUT)
    except click.ClickException as exc:
        fail(exc.format_message(), exc.exit_code)
    except click.exceptions.Abort:
        fail("interrupted", 130)
