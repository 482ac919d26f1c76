"""MLPerf-compatible ``:::MLLOG`` logs of a time-to-accuracy run, and their compliance check.

``MLPerfLogger`` is a listener of the training loop (rank 0 only). It writes through the
``mlperf_logging`` package: the package's ``MLLogger`` encodes every line and stamps it
with the wall clock (ms since the epoch), and the keys are the package's constants where
it has one. It does not use the package's shared logger (``mllog.get_mllogger()`` with
``mllog.config(filename=...)``): that one is a process-wide singleton which also prints
to stdout, and ``config`` only ever adds file handlers, so two runs in one process would
write into each other's files. Each ``MLPerfLogger`` instead gives the package's
``MLLogger`` a private ``logging.Logger`` with one file handler, removed and closed at
``run_stop``.

``check_log`` runs mlperf-logging's own checker on a log with the ruleset trainperf ships
(``rules/trainperf_common.yaml``, see that file for what it requires). The checker resolves
``--config`` and every ``enqueue_config(...)`` include with
``os.path.join(<mlperf_logging/compliance_checker>, name)``: a relative name is looked up
in the mlperf_logging package folder (not in the working directory, nor beside the config
file), an absolute one is used as is. So the ruleset is one self-contained file, and
``ruleset_path()`` hands the checker its absolute installed path.
"""

from __future__ import annotations

import itertools
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from mlperf_logging.mllog import constants as c
from mlperf_logging.mllog.mllog import MLLogger

from trainperf.case.training import HIGHER_IS_BETTER
from trainperf.core import fileio

RULESET = "trainperf_common.yaml"
_LOGGER_IDS = itertools.count()  # a fresh logging.Logger per run, never shared
DIVISIONS = (c.OPEN, c.CLOSED)
STATUSES = (c.ONPREM, c.CLOUD, c.RESEARCH)
OPTIMIZERS = (c.SGD, c.ADAMW, c.LARS)
RUN_STATUSES = (c.SUCCESS, c.ABORTED)
RUN_INFO = (
    "model",
    "global_batch_size",
    "optimizer",
    "base_lr",
    "momentum",
    "weight_decay",
    "warmup_epochs",
    "schedule",
    "train_samples",
    "eval_samples",
    "seed",
    "target_metric",
    "target_value",
    "max_epochs",
    "world_size",
    "precision",
)
# Keys the package has no constant for: trainperf's own, in the package's naming style.
OPT_MOMENTUM = "opt_momentum"
OPT_LR_DECAY_VALUES = "opt_learning_rate_decay_values"
QUALITY_TARGET = "trainperf_quality_target"
RUN_CONTEXT = {  # run_start info key -> log key
    "model": "trainperf_model",
    "max_epochs": "trainperf_max_epochs",
    "world_size": "trainperf_world_size",
    "precision": "trainperf_precision",
}


def ruleset_path() -> Path:
    """Absolute path of the shipped ruleset, as ``--config`` of the checker needs it."""
    return Path(__file__).resolve().parent / "rules" / RULESET


def check_log(path: Path | str) -> tuple[bool, str]:
    """Run mlperf-logging's compliance checker on ``path`` with trainperf's ruleset.

    Returns (passed, the checker's output). Passed means exit code 0 *and* its final
    ``SUCCESS`` line: it exits 1 after ``FAILED`` and also when it crashes (a traceback).
    The checker's own copy of its output (``--log_output``) is not written anywhere: it
    would land in the working directory.
    """
    command = [
        sys.executable,
        "-m",
        "mlperf_logging.compliance_checker",
        "--config",
        str(ruleset_path()),
        "--log_output",
        os.devnull,  # a copy of what it prints, which we keep from its stdout
        str(path),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    output = done.stdout + done.stderr
    return done.returncode == 0 and "SUCCESS" in output, output


class MLPerfLogger:
    """Writes the ``:::MLLOG`` events of one run to ``path`` (see the module doc).

    ``platform`` is the value of ``submission_platform``; it defaults to ``system_name``.
    """

    def __init__(
        self,
        path: Path | str,
        benchmark: str,
        *,
        system_name: str,
        submitter: str = "trainperf",
        division: str = c.OPEN,
        status: str = c.ONPREM,
        platform: str | None = None,
    ) -> None:
        _require_text("benchmark", benchmark)
        _require_text("submitter", submitter)
        _require_text("system_name", system_name)
        _require_choice("division", division, DIVISIONS)
        _require_choice("status", status, STATUSES)
        self.path = Path(path)
        self._submission = {
            c.SUBMISSION_BENCHMARK: benchmark,
            c.SUBMISSION_ORG: submitter,
            c.SUBMISSION_DIVISION: division,
            c.SUBMISSION_STATUS: status,
            c.SUBMISSION_PLATFORM: platform or system_name,
        }
        self._target_metric = ""
        # A log goes into a new or regular file only: opening a FIFO would block the run,
        # and a device or a symlink is not where a user means a log to go.
        fileio.check_output(self.path)
        self._handler = logging.FileHandler(self.path, mode="w", encoding="utf-8")
        # getLogger keeps every logger for the process' life; one per run is negligible.
        logger = logging.getLogger(f"trainperf.mllog.run{next(_LOGGER_IDS)}")
        logger.propagate = False  # never into the root logger's handlers
        logger.setLevel(logging.INFO)
        logger.addHandler(self._handler)
        self._logger = logger
        self._mllog = MLLogger(logger=logger)

    def init_start(self, info: dict[str, Any]) -> None:
        """Submission keys, cache_clear, init_start. ``info`` is not logged: the values
        the log needs come with ``run_start``."""
        for key, value in self._submission.items():
            self._mllog.event(key, value)
        self._mllog.event(c.CACHE_CLEAR, True)
        self._mllog.start(c.INIT_START)

    def init_stop(self) -> None:
        self._mllog.end(c.INIT_STOP)

    def run_start(self, info: dict[str, Any]) -> None:
        """The run's configuration as MLPerf keys, then run_start (the clock starts)."""
        missing = [key for key in RUN_INFO if key not in info]
        if missing:
            raise ValueError(f"run_start info lacks {missing}; expected keys: {list(RUN_INFO)}")
        _require_choice("optimizer", info["optimizer"], OPTIMIZERS)
        _require_choice("target_metric", info["target_metric"], tuple(HIGHER_IS_BETTER))
        self._target_metric = info["target_metric"]
        log = self._mllog.event
        log(c.SEED, info["seed"])
        log(c.GLOBAL_BATCH_SIZE, info["global_batch_size"])
        log(c.OPT_NAME, info["optimizer"])
        log(c.OPT_BASE_LR, info["base_lr"])
        if info["optimizer"] in (c.SGD, c.LARS):
            log(OPT_MOMENTUM, info["momentum"])
        log(c.OPT_WEIGHT_DECAY, info["weight_decay"])
        log(c.OPT_LR_WARMUP_EPOCHS, info["warmup_epochs"])
        schedule = info["schedule"]
        # The schedule's first boundary is epoch 0 (the base lr); MLPerf's boundary epochs
        # are those where the lr changes, each paired here with the lr from there on.
        log(c.OPT_LR_DECAY_SCHEDULE, schedule["name"])
        log(c.OPT_LR_DECAY_BOUNDARY_EPOCHS, list(schedule["boundaries"])[1:])
        log(OPT_LR_DECAY_VALUES, list(schedule["lrs"])[1:])
        log(c.TRAIN_SAMPLES, info["train_samples"])
        log(c.EVAL_SAMPLES, info["eval_samples"])
        for key, log_key in RUN_CONTEXT.items():
            log(log_key, info[key])
        log(
            QUALITY_TARGET,
            info["target_value"],
            metadata={
                "metric": self._target_metric,
                "higher_is_better": HIGHER_IS_BETTER[self._target_metric],
            },
        )
        self._mllog.start(c.RUN_START)

    def epoch_start(self, epoch: int, samples_seen: int) -> None:
        self._mllog.start(c.EPOCH_START, metadata=_at(epoch, samples_seen))

    def epoch_stop(self, epoch: int, samples_seen: int) -> None:
        self._mllog.end(c.EPOCH_STOP, metadata=_at(epoch, samples_seen))

    def eval_start(self, epoch: int, samples_seen: int) -> None:
        self._mllog.start(c.EVAL_START, metadata=_at(epoch, samples_seen))

    def eval_stop(self, epoch: int, samples_seen: int, evaluation: dict[str, Any]) -> None:
        """eval_stop, then eval_accuracy: the value of the run's target metric (MLPerf logs
        a benchmark's quality metric under that key whatever it is, e.g. log perplexity)."""
        self._mllog.end(c.EVAL_STOP, metadata=_at(epoch, samples_seen))
        self._mllog.event(
            c.EVAL_ACCURACY,
            evaluation.get(self._target_metric),
            metadata=_at(epoch, samples_seen) | {"metric": self._target_metric},
        )

    def run_stop(self, status: str, reached: bool) -> None:
        """run_stop with its status ("success" | "aborted"), then the file is closed."""
        _require_choice("status", status, RUN_STATUSES)
        self._mllog.end(c.RUN_STOP, metadata={c.STATUS: status, "reached": bool(reached)})
        self.close()

    def close(self) -> None:
        """Detach and close the file (idempotent); ``run_stop`` calls it."""
        self._logger.removeHandler(self._handler)
        self._handler.close()


def _at(epoch: int, samples_seen: int) -> dict[str, int]:
    return {c.EPOCH_NUM: epoch, c.SAMPLES_COUNT: samples_seen}


def _require_text(field: str, value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{field} must be a non-empty string, got {value!r}")


def _require_choice(field: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{field} {value!r} is not allowed; allowed: {', '.join(allowed)}")
