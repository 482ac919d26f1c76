"""MLPerf logs: written through mlperf_logging, checked by its real compliance checker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainperf.convergence.mllog import MLPerfLogger, check_log, ruleset_path

PREFIX = ":::MLLOG "
SCHEDULE = {"name": "piecewise", "boundaries": [0.0, 2.0], "lrs": [0.1, 0.01], "warmup_epochs": 1}


def run_info(**overrides: object) -> dict:
    info = {
        "model": "cifarnet",
        "data": "synthetic",
        "global_batch_size": 64,
        "optimizer": "sgd",
        "base_lr": 0.1,
        "momentum": 0.9,
        "weight_decay": 5e-4,
        "warmup_epochs": 1,
        "schedule": SCHEDULE,
        "train_samples": 1000,
        "eval_samples": 200,
        "seed": 7,
        "target_metric": "top1",
        "target_value": 0.5,
        "max_epochs": 5,
        "world_size": 1,
        "precision": "fp32",
    }
    return info | overrides


def evaluation(epoch: int, samples: int, top1: float) -> dict:
    return {
        "top1": top1,
        "top5": min(1.0, top1 + 0.3),
        "eval_loss": 2.0 - top1,
        "epoch": epoch,
        "samples_seen": samples,
        "time_s": float(epoch),
    }


def drive(
    logger: MLPerfLogger,
    top1s: tuple[float, ...] = (0.2, 0.4, 0.6),
    status: str | None = "success",
    info: dict | None = None,
) -> None:
    """A fake run: init, run_start, one epoch + evaluation per top-1, run_stop."""
    logger.init_start({"model": "cifarnet"})
    logger.init_stop()
    logger.run_start(info or run_info())
    for epoch, top1 in enumerate(top1s, start=1):
        samples = epoch * 1000
        logger.epoch_start(epoch, samples - 1000)
        logger.epoch_stop(epoch, samples)
        logger.eval_start(epoch, samples)
        logger.eval_stop(epoch, samples, evaluation(epoch, samples, top1))
    if status is None:
        logger.close()
    else:
        logger.run_stop(status, reached=status == "success")


def new_logger(path: Path, benchmark: str = "cifarnet") -> MLPerfLogger:
    return MLPerfLogger(path, benchmark, system_name="test-box")


def records(path: Path) -> list[dict]:
    lines = path.read_text().splitlines()
    assert lines
    for line in lines:
        assert line.startswith(PREFIX), line
    return [json.loads(line[len(PREFIX) :]) for line in lines]


def test_full_run_passes_the_checker(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    drive(new_logger(log))
    ok, output = check_log(log)
    assert ok, output
    assert "SUCCESS" in output
    keys = [r["key"] for r in records(log)]
    assert keys[:5] == [
        "submission_benchmark",
        "submission_org",
        "submission_division",
        "submission_status",
        "submission_platform",
    ]
    assert keys.count("eval_accuracy") == 3
    assert keys[-1] == "run_stop"


def test_events_carry_epochs_samples_and_status(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    drive(new_logger(log))
    by_key: dict[str, list[dict]] = {}
    for record in records(log):
        by_key.setdefault(record["key"], []).append(record)
    accuracy = by_key["eval_accuracy"][-1]
    assert accuracy["value"] == 0.6
    assert accuracy["metadata"]["epoch_num"] == 3
    assert accuracy["metadata"]["samples_count"] == 3000
    assert by_key["epoch_start"][0]["metadata"]["epoch_num"] == 1
    assert by_key["epoch_start"][0]["event_type"] == "INTERVAL_START"
    assert by_key["run_stop"][0]["metadata"]["status"] == "success"
    assert by_key["opt_learning_rate_decay_boundary_epochs"][0]["value"] == [2.0]
    assert by_key["opt_learning_rate_decay_values"][0]["value"] == [0.01]
    assert by_key["submission_platform"][0]["value"] == "test-box"
    stamps = [r["time_ms"] for r in records(log)]
    assert stamps == sorted(stamps) and stamps[0] > 1_600_000_000_000  # real ms since epoch


def test_adamw_run_and_aborted_run_pass(tmp_path: Path) -> None:
    adamw = tmp_path / "adamw.log"
    drive(new_logger(adamw), info=run_info(optimizer="adamw", momentum=None))
    assert "opt_momentum" not in {r["key"] for r in records(adamw)}
    ok, output = check_log(adamw)
    assert ok, output
    aborted = tmp_path / "aborted.log"
    drive(new_logger(aborted), top1s=(0.1, 0.2), status="aborted")
    ok, output = check_log(aborted)
    assert ok, output


def test_missing_run_stop_fails(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    drive(new_logger(log), status=None)
    ok, output = check_log(log)
    assert not ok
    assert "run_stop" in output and "FAILED" in output


def test_missing_eval_accuracy_fails(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    drive(new_logger(log))
    broken = tmp_path / "broken.log"
    lines = log.read_text().splitlines(keepends=True)
    broken.write_text("".join(line for line in lines if '"eval_accuracy"' not in line))
    ok, output = check_log(broken)
    assert not ok
    assert "eval_accuracy" in output


def test_success_without_reaching_the_target_fails(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    drive(new_logger(log), top1s=(0.1, 0.2, 0.3))  # target 0.5, yet "success"
    ok, output = check_log(log)
    assert not ok
    assert "s['status'] != 'success'" in output


def test_run_stop_before_run_start_fails(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    drive(new_logger(log))
    lines = log.read_text().splitlines(keepends=True)
    stop = next(line for line in lines if '"run_stop"' in line)
    start = next(i for i, line in enumerate(lines) if '"run_start"' in line)
    lines.remove(stop)
    lines.insert(start, stop)
    moved = tmp_path / "moved.log"
    moved.write_text("".join(lines))
    ok, output = check_log(moved)
    assert not ok


def test_two_loggers_in_one_process_do_not_mix(tmp_path: Path, capsys) -> None:
    paths = [tmp_path / "a.log", tmp_path / "b.log"]
    loggers = [new_logger(paths[0], "bench_a"), new_logger(paths[1], "bench_b")]
    for logger in loggers:
        logger.init_start({})
    for logger in loggers:
        logger.init_stop()
        logger.run_start(run_info())
    for epoch in (1, 2):
        for logger in loggers:
            logger.epoch_start(epoch, (epoch - 1) * 100)
            logger.epoch_stop(epoch, epoch * 100)
            logger.eval_start(epoch, epoch * 100)
            logger.eval_stop(epoch, epoch * 100, evaluation(epoch, epoch * 100, 0.3 * epoch))
    for logger in loggers:
        logger.run_stop("success", True)
    a, b = records(paths[0]), records(paths[1])
    assert len(a) == len(b)
    assert [r["value"] for r in a if r["key"] == "submission_benchmark"] == ["bench_a"]
    assert [r["value"] for r in b if r["key"] == "submission_benchmark"] == ["bench_b"]
    assert capsys.readouterr().out == ""  # nothing on stdout, unlike the package's global
    for path in paths:
        ok, output = check_log(path)
        assert ok, output


def test_ruleset_is_an_absolute_shipped_file() -> None:
    path = ruleset_path()
    assert path.is_absolute() and path.is_file()


@pytest.mark.parametrize(
    ("field", "value"),
    [("division", "closedish"), ("status", "garage"), ("benchmark", "")],
)
def test_bad_submission_fields_are_refused(tmp_path: Path, field: str, value: str) -> None:
    kwargs = {"division": "open", "status": "onprem", "benchmark": "cifarnet"} | {field: value}
    benchmark = kwargs.pop("benchmark")
    with pytest.raises(ValueError, match=field):
        MLPerfLogger(tmp_path / "x.log", benchmark, system_name="box", **kwargs)


def test_run_start_names_missing_info(tmp_path: Path) -> None:
    logger = new_logger(tmp_path / "x.log")
    info = run_info()
    del info["seed"]
    with pytest.raises(ValueError, match="seed"):
        logger.run_start(info)
    logger.close()
