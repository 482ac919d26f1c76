"""How a training run's configuration is stored, read back and grouped (config_key), for
runs stored before the optimizer, momentum, weight decay and nodes were stored too."""

import pytest

from trainperf.case.stored import ADDED_TRAIN_FIELDS
from trainperf.case.training import TrainConfig
from trainperf.convergence.records import config_key, start_run
from trainperf.store.database import Store

SYSTEM = {"fingerprint": "abc123", "hostname": "node1", "cpu": {"model": "X"}, "gpus": []}
# What `trainperf train` stored before these fields: no optimizer, momentum, weight decay
# or nodes.
OLD = {
    "model": "cifarnet",
    "target_metric": "top1",
    "target_value": 0.8,
    "device": "cpu",
    "data": "cifar10:/data",
    "max_epochs": 6,
    "batch_size": 32,
    "lr_schedule": "piecewise:0.01@0",
    "warmup_epochs": 0.0,
    "devices": 1,
    "workers": 0,
    "precision": "fp32",
    "image_size": None,
    "seq_len": None,
    "seed": 0,
}
NEW = OLD | {"optimizer": None, "momentum": 0.9, "weight_decay": 5e-4, "nodes": 1}


def test_the_defaults_are_what_the_trainer_used_before():
    defaults = TrainConfig(**OLD)
    assert {k: getattr(defaults, k) for k in ADDED_TRAIN_FIELDS} == ADDED_TRAIN_FIELDS


def test_an_old_run_and_a_new_one_at_the_defaults_share_a_key():
    assert config_key(OLD) == config_key(NEW) == config_key(NEW | {"seed": 7})


@pytest.mark.parametrize(
    "change",
    [{"weight_decay": 1e-4}, {"momentum": 0.8}, {"optimizer": "lars"}, {"nodes": 2}],
)
def test_a_setting_away_from_its_default_is_another_configuration(change):
    assert config_key(NEW | change) != config_key(NEW)


def test_an_old_run_reads_with_the_defaults_and_groups_with_a_new_one(tmp_path):
    with Store(tmp_path / "t.db") as store:
        old = start_run(store, SYSTEM, OLD)
        new = start_run(store, SYSTEM, NEW | {"seed": 1})
        other = start_run(store, SYSTEM, NEW | {"weight_decay": 0.0})
        stored = store.train_run(str(old))
        assert stored["config"] == NEW
        assert [r["id"] for r in store.train_runs(stored["config_key"])] == [old, new]
        assert store.train_run(str(other))["config"]["weight_decay"] == 0.0


@pytest.mark.parametrize(
    "change, message",
    [
        ({"weight_decay": -0.1}, "weight_decay must be a finite number >= 0"),
        ({"weight_decay": float("nan")}, "weight_decay must be a finite number >= 0"),
        ({"momentum": 1.0}, "momentum must be a finite number in [0, 1)"),
        ({"momentum": -0.5}, "momentum must be a finite number in [0, 1)"),
        ({"optimizer": "adam"}, "optimizer 'adam' is not one of sgd, adamw, lars"),
        ({"nodes": 0}, "nodes must be at least 1"),
    ],
)
def test_bad_settings_are_refused_saying_what_is_allowed(change, message):
    with pytest.raises(ValueError) as info:
        TrainConfig(**NEW | change)
    assert message in str(info.value)
