"""Cases with framework jax: what is checked before anything runs, the worker's
environment, and how results of both frameworks are stored, keyed and read."""

import json
import sqlite3

import pytest

from trainperf.case.spec import CaseError, DeviceKind, check_case, make_case
from trainperf.case.suite import PlannedCase, resolve
from trainperf.launch.maxbatch import memory_key
from trainperf.launch.runner import ChildJob
from trainperf.store.database import Store
from trainperf.system.inventory import collect, jax_devices
from trainperf.system.jax_environment import (
    CPU_DEVICES_FLAG,
    allocator_settings,
    worker_environment,
)

CPU_ONLY = {"cpu": DeviceKind(2)}


def jax_case(**fields):
    return make_case(**({"model": "resnet18", "batch_size": 4, "framework": "jax"} | fields))


def test_a_jax_case_resolves_to_a_mesh_in_one_process():
    case = jax_case(devices=2, image_size=32)
    assert check_case(case, CPU_ONLY).name == "resnet18"
    assert (case.mode, case.processes, case.replicas, case.global_batch) == ("mesh", 1, 2, 8)
    assert case.label() == "resnet18 b4 @32 fp32 cpu jax mesh x2"
    assert make_case(model="resnet18", batch_size=4, devices=2).mode == "ddp"  # pytorch


@pytest.mark.parametrize(
    "fields,message",
    [
        (
            {"model": "googlenet"},
            "model 'googlenet' has no Flax version (framework jax): available",
        ),
        (
            {"precision": "fp16"},
            "precision fp16 is not available with framework jax: allowed fp32, tf32, bf16",
        ),
        ({"compile": True}, "compile applies to framework pytorch, not jax"),
        ({"channels_last": True}, "channels_last applies to framework pytorch, not jax"),
        ({"threads": 1}, "threads applies to framework pytorch, not jax"),
        ({"mkldnn": False}, "mkldnn false applies to framework pytorch, not jax"),
        (
            {"parallel": "ddp", "devices": 2},
            "framework jax runs parallel mesh (or auto, none), not ddp",
        ),
        ({"nodes": 2}, "framework jax runs on the devices of one node here"),
        ({"data": "jpeg-sample"}, "framework jax trains on synthetic data only"),
        (
            {"model": "trainperf.models.cifarnet:cifarnet"},
            "a network of your own (module:function) runs with framework pytorch",
        ),
    ],
)
def test_what_jax_cannot_do_is_one_line(fields, message):
    with pytest.raises(CaseError) as info:
        check_case(jax_case(**fields), CPU_ONLY)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_mesh_needs_jax():
    with pytest.raises(CaseError, match="parallel mesh .* needs framework jax"):
        check_case(make_case(model="resnet18", batch_size=4, parallel="mesh"), CPU_ONLY)


def test_the_cli_refuses_a_model_without_flax_version_writing_nothing(tmp_path, run_cli):
    db = tmp_path / "r.db"
    code, out, err = run_cli(f"run -m googlenet -b 4 --framework jax --db {db}")
    assert code == 2 and not db.exists() and out == ""
    (line,) = err.strip().splitlines()
    assert "googlenet" in line and "resnet18" in line
    code, _, err = run_cli(f"run -m resnet18 -b 4 --framework jax --precision fp16 --db {db}")
    assert code == 2 and not db.exists() and "allowed fp32, tf32, bf16" in err


def test_worker_environment_sets_the_platform_cpu_devices_and_on_demand_memory():
    assert worker_environment(make_case(model="resnet18", batch_size=4)) == {}
    on_demand = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}  # every JAX worker
    assert worker_environment(jax_case()) == {"JAX_PLATFORMS": "cpu"} | on_demand
    env = worker_environment(
        jax_case(devices=4), {"XLA_FLAGS": f"--xla_dump_to=/tmp/x {CPU_DEVICES_FLAG}=8"}
    )
    assert env["XLA_FLAGS"] == f"--xla_dump_to=/tmp/x {CPU_DEVICES_FLAG}=4"
    cuda = worker_environment(jax_case(device="cuda", devices=2))
    assert cuda == {"JAX_PLATFORMS": "cuda"} | on_demand
    assert dict(ChildJob.of_case(jax_case(devices=2)).env)["XLA_FLAGS"].endswith("=2")
    assert not ChildJob.of_case(jax_case(devices=2)).torchrun


def test_the_result_records_how_xla_allocates():
    """Read as jaxlib reads the variables (xla_client.generate_pjrt_gpu_plugin_options)."""
    assert allocator_settings({}) == {"xla_preallocate": True, "xla_allocator": "default"}
    for off in ("false", "False", "0"):
        assert (
            allocator_settings({"XLA_PYTHON_CLIENT_PREALLOCATE": off})["xla_preallocate"] is False
        )
    assert allocator_settings({"XLA_PYTHON_CLIENT_PREALLOCATE": "true"})["xla_preallocate"]
    assert allocator_settings({"XLA_PYTHON_CLIENT_ALLOCATOR": "Platform"})["xla_allocator"] == (
        "platform"
    )


def test_memory_key_of_pytorch_cases_is_unchanged_and_jax_has_its_own():
    pytorch = make_case(model="resnet18", batch_size=4).model_dump()
    before_the_field = {k: v for k, v in pytorch.items() if k != "framework"}
    assert memory_key(pytorch) == memory_key(before_the_field)
    assert memory_key(jax_case().model_dump()) != memory_key(pytorch)


def test_results_stored_before_the_field_read_as_pytorch(tmp_path):
    db = tmp_path / "old.db"
    record = collect()
    with Store(db) as store:
        sweep = store.start_sweep(record, label="old")
        case = make_case(model="cifarnet", batch_size=2).model_dump()
        document = {"status": "ok", "case": case, "metrics": {}, "result_schema": 2}
        store.add_result(sweep, record["fingerprint"], document)
    with sqlite3.connect(db) as raw:  # as a version without the field wrote it
        stored = {k: v for k, v in case.items() if k != "framework"}
        raw.execute("UPDATE results SET case_json = ?", (json.dumps(stored),))
    with Store(db) as store:
        (result,) = store.results()
    assert result["case"]["framework"] == "pytorch"


def test_system_lists_the_jax_packages_devices_and_cuda_stack():
    software = collect()["software"]
    assert all(software.get(p) for p in ("jax", "jaxlib", "flax", "optax"))
    found = jax_devices()
    devices = found["jax_devices"]
    assert devices and all(d["platform"] == "cpu" for d in devices)
    # This jaxlib has no CUDA plugin: JAX's CUDA stack is absent, with the reason.
    assert "jax_cuda" not in found and "no CUDA plugin" in found["jax_cuda_absent_reason"]


def test_suite_keys_of_pytorch_cases_are_those_stored_before_the_field():
    """Resuming a sweep stored before cases had a framework finds its results: the key of a
    pytorch case is the digest of its fields without the field (quick's first key, as the
    version before the field computed it), and a jax case has a key of its own."""
    quick = resolve("quick").planned[0]
    assert quick.fields["framework"] == "pytorch" and quick.key == "2605c2c4bc95aed2"
    as_jax = PlannedCase(quick.fields | {"framework": "jax"}, quick.origin, quick.line)
    assert as_jax.key != quick.key


def test_the_frameworks_suite_measures_three_engines_on_one_and_two_devices():
    suite = resolve("frameworks")
    assert not suite.check(CPU_ONLY)  # nothing skipped on a CPU-only machine
    engines = {(p.fields["framework"], p.fields["compile"]) for p in suite.planned}
    assert engines == {("pytorch", False), ("pytorch", True), ("jax", False)}
    per_model = {}
    for p in suite.planned:
        per_model.setdefault(p.fields["model"], set()).add(
            (p.fields["framework"], p.fields["compile"], p.fields["devices"])
        )
    assert all(len(cells) == 6 for cells in per_model.values())
