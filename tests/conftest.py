"""Shared fixtures: user networks that misbehave on purpose, importable by child processes."""

import os
import textwrap

import pytest

import report_fixture
from flaky_nets import FLAKY_NETS

# A NaN or infinity about to be written fails loudly in tests (trainperf.core.strict_json),
# in this process and in the workers it starts.
os.environ["TRAINPERF_STRICT_JSON"] = "1"

from trainperf.cli import main


@pytest.fixture
def user_nets(tmp_path, monkeypatch):
    """Make ``flakynets`` importable here and in every child process."""
    (tmp_path / "flakynets.py").write_text(textwrap.dedent(FLAKY_NETS))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return tmp_path


@pytest.fixture
def run_cli(capsys):
    """Run the CLI in-process: ``run_cli(args)`` -> (exit code, stdout, stderr).

    ``args`` is a list (items made strings) or a command line split on spaces.
    """

    def run(args):
        args = args.split() if isinstance(args, str) else [str(a) for a in args]
        with pytest.raises(SystemExit) as info:
            main(args)
            raise SystemExit(0)
        out, err = capsys.readouterr()
        return info.value.code, out, err

    return run


def _report_db(tmp_path_factory, hostile_model):
    path = tmp_path_factory.mktemp("report") / "r.db"
    report_fixture.build(path, hostile_model=hostile_model)
    return path


@pytest.fixture(scope="module")
def report_db(tmp_path_factory):
    """report_fixture's two-system database, built once per test module that reads it."""
    return _report_db(tmp_path_factory, hostile_model=True)


@pytest.fixture(scope="module")
def report_db_zoo(tmp_path_factory):
    """The same database without the ``HOSTILE_MODEL`` result: zoo models only."""
    return _report_db(tmp_path_factory, hostile_model=False)

