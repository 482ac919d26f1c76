"""Shared fixtures: user networks that misbehave on purpose, importable by child processes."""

import itertools
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


def _write_colour_cifar10(root, train_samples, eval_samples):
    """Write CIFAR-10 binary files of noisy images of one colour per class (learnable in a
    few epochs, through crops and flips) into ``root``; return ``root``."""
    import numpy as np

    from trainperf.datasets import write_cifar10

    def colour_images(n, seed):
        rng = np.random.default_rng(seed)
        palette = np.array(list(itertools.product((40, 128, 215), repeat=3))[::2][:10])
        labels = np.arange(n) % 10
        images = palette[labels][:, None, None, :] + rng.normal(0, 25, (n, 32, 32, 3))
        return np.clip(images, 0, 255).astype(np.uint8), labels

    write_cifar10(root / "data_batch_1.bin", *colour_images(train_samples, 1))
    write_cifar10(root / "test_batch.bin", *colour_images(eval_samples, 2))
    return root


@pytest.fixture(scope="session")
def colour_cifar10():
    """``colour_cifar10(root, train_samples, eval_samples)``: a tiny learnable CIFAR-10 folder,
    shared by the trainer's tests and ``trainperf train``'s."""
    return _write_colour_cifar10
