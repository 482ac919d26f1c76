import pytest

from trainperf.case.spec import Case, CaseError, DeviceKind, HardwareAbsent, check_case, make_case

CPU_ONLY = {"cpu": DeviceKind(1)}
VOLTA = {"cpu": DeviceKind(1), "cuda": DeviceKind(2, (7, 0))}
HOPPER = {"cpu": DeviceKind(1), "cuda": DeviceKind(1, (9, 0))}


def test_defaults_and_dump_round_trip():
    case = make_case(model="resnet50", batch_size=32)
    assert case.precision == "fp32" and case.steps == "adaptive"
    assert Case.model_validate(case.model_dump()) == case
    assert case.label() == "resnet50 b32 fp32 cpu"


@pytest.mark.parametrize(
    "fields,message",
    [
        ({"batch_size": 0}, "batch_size must be a positive integer, got 0"),
        ({"batch_size": "8"}, "batch_size must be a positive integer"),
        ({"batch_size": 2.5}, "batch_size must be a positive integer"),
        ({"precision": "fp8"}, "precision 'fp8' is not valid: allowed 'fp32', 'tf32'"),
        ({"device": "tpu"}, "device 'tpu' is not valid"),
        ({"steps": "fixed:1"}, "steps 'fixed:1' is not valid"),
        ({"colour": "red"}, "unknown case field 'colour'"),
    ],
)
def test_bad_fields_give_one_line(fields, message):
    with pytest.raises(CaseError) as info:
        make_case(**({"model": "resnet50", "batch_size": 8} | fields))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_check_case_against_zoo_and_devices():
    assert check_case(make_case(model="resnet50", batch_size=8), CPU_ONLY).name == "resnet50"
    with pytest.raises(CaseError, match="unknown model 'resnet5'.*resnet50"):
        check_case(make_case(model="resnet5", batch_size=8), CPU_ONLY)
    with pytest.raises(CaseError, match="tf32 needs a CUDA GPU"):
        check_case(make_case(model="resnet50", batch_size=8, precision="tf32"), CPU_ONLY)
    with pytest.raises(CaseError, match="device 'cuda' is not available"):
        check_case(make_case(model="resnet50", batch_size=8, device="cuda"), CPU_ONLY)
    with pytest.raises(CaseError, match="compute capability 8.0"):
        check_case(
            make_case(model="resnet50", batch_size=8, device="cuda", precision="tf32"), VOLTA
        )
    check_case(make_case(model="resnet50", batch_size=8, device="cuda", precision="tf32"), HOPPER)
    with pytest.raises(CaseError, match="give seq_len"):
        check_case(make_case(model="gpt2-small", batch_size=1, image_size=32), CPU_ONLY)
    with pytest.raises(CaseError, match="seq_len 2048 is not accepted"):
        check_case(make_case(model="gpt2-small", batch_size=1, seq_len=2048), CPU_ONLY)
    with pytest.raises(CaseError, match="channels_last applies to image models"):
        check_case(make_case(model="bert-squad", batch_size=1, channels_last=True), CPU_ONLY)


def test_absent_hardware_is_told_apart_from_a_bad_case():
    with pytest.raises(HardwareAbsent, match="device 'cuda' is not available"):
        check_case(make_case(model="resnet50", batch_size=8, device="cuda"), CPU_ONLY)
    with pytest.raises(HardwareAbsent, match="compute capability 8.0"):
        bf16 = make_case(model="resnet50", batch_size=8, device="cuda", precision="bf16")
        check_case(bf16, VOLTA)
    with pytest.raises(CaseError) as info:
        check_case(make_case(model="resnet5", batch_size=8, device="cuda"), CPU_ONLY)
    assert not isinstance(info.value, HardwareAbsent)


def test_devices_nodes_and_workers_fields():
    case = make_case(model="resnet50", batch_size=8, devices=1, nodes=1, workers=0)
    assert (case.devices, case.nodes, case.workers) == (1, 1, 0)
    with pytest.raises(CaseError, match="workers must be an integer of 0 or more, got -1"):
        make_case(model="resnet50", batch_size=8, workers=-1)
    with pytest.raises(CaseError, match="devices must be a positive integer, got 0"):
        make_case(model="resnet50", batch_size=8, devices=0)
    with pytest.raises(CaseError, match="workers .* need a real data set .* use workers 0"):
        check_case(make_case(model="resnet50", batch_size=8, workers=2), CPU_ONLY)
    with_data = make_case(model="resnet50", batch_size=8, workers=2, data="jpeg-sample")
    check_case(with_data, CPU_ONLY)
    assert with_data.label() == "resnet50 b8 fp32 cpu jpeg-sample w2"


def test_data_field_defaults_to_synthetic_and_is_validated():
    case = make_case(model="resnet50", batch_size=8)
    assert case.data == "synthetic" and "synthetic" not in case.label()
    assert Case.model_validate(case.model_dump() | {"data": "jpeg-sample"}).data == "jpeg-sample"
    with pytest.raises(CaseError, match="data: not a data source: allowed synthetic, cifar10:DIR"):
        make_case(model="resnet50", batch_size=8, data="cifar10")
    with pytest.raises(CaseError, match="data cifar10:/no/such: directory /no/such does not exist"):
        check_case(make_case(model="cifarnet", batch_size=8, data="cifar10:/no/such"), CPU_ONLY)
    with pytest.raises(CaseError, match="data jpeg-sample: .*gpt2-small is not one"):
        check_case(make_case(model="gpt2-small", batch_size=1, data="jpeg-sample"), CPU_ONLY)


def test_one_list_of_parallel_modes_for_the_case_and_the_cli():
    import click

    from trainperf.case.modes import PARALLEL_MODES, RANK_MODES
    from trainperf.cli import COMMANDS

    for mode in PARALLEL_MODES:
        assert Case(model="resnet50", batch_size=8, parallel=mode).parallel == mode
    with pytest.raises(CaseError, match="parallel"):
        make_case(model="resnet50", batch_size=8, parallel="tp")
    assert set(RANK_MODES) < set(PARALLEL_MODES)
    choices = {
        tuple(param.type.choices)
        for command in COMMANDS
        for param in command.params
        if param.name == "parallel" and isinstance(param.type, click.Choice)
    }
    assert all(set(c) <= set(PARALLEL_MODES) for c in choices) and PARALLEL_MODES in choices


def test_parallel_modes_and_batches():
    weak = make_case(model="resnet50", batch_size=32, devices=4)
    assert (weak.mode, weak.processes, weak.device_batch, weak.global_batch) == ("ddp", 4, 32, 128)
    strong = make_case(model="resnet50", batch_size=32, devices=4, scaling="strong", grad_accum=2)
    assert (strong.device_batch, strong.global_batch) == (8, 64)
    assert "ddp x4" in strong.label() and "strong" in strong.label()
    assert make_case(model="resnet50", batch_size=8).mode == "none"
    two_nodes = make_case(model="resnet50", batch_size=8, devices=2, nodes=3)
    assert two_nodes.processes == 6 and two_nodes.label().endswith("ddp x2x3n")
    dp = make_case(model="resnet50", batch_size=8, devices=2, parallel="dp", device="cuda")
    assert (dp.processes, dp.replicas, dp.global_batch) == (1, 2, 16)
    check_case(make_case(model="resnet50", batch_size=8, devices=2), {"cpu": DeviceKind(2)})
    with pytest.raises(HardwareAbsent, match="needs 4 cuda devices per node; 2 visible to CUDA"):
        check_case(make_case(model="resnet50", batch_size=8, devices=4, device="cuda"), VOLTA)


@pytest.mark.parametrize(
    "fields,message",
    [
        ({"devices": 2, "parallel": "none"}, "2 devices need parallel ddp, fsdp or dp"),
        ({"devices": 2, "parallel": "dp"}, r"dp \(DataParallel\) runs on the CUDA GPUs"),
        ({"bucket_mb": 10.0}, "bucket_mb applies to parallel ddp, not none"),
        ({"grad_compression": "fp16"}, "grad_compression applies to parallel ddp"),
        ({"devices": 3, "scaling": "strong"}, "strong scaling splits batch_size 8 over 3"),
        ({"devices": 2, "grad_compression": "bf16"}, "bf16 needs NCCL"),
        ({"devices": 2, "static_graph": True, "grad_accum": 2}, "static_graph cannot be"),
    ],
)
def test_parallel_settings_that_cannot_run(fields, message):
    with pytest.raises(CaseError, match=message):
        check_case(make_case(model="resnet50", batch_size=8, **fields), CPU_ONLY)


def test_cpu_ranks_are_at_most_one_per_core():
    """A torch rank on the CPU is a process; past one per core they time-share the cores
    (and --devices 2147483647 once started that many). JAX's CPU devices share a process."""
    two_cores = {"cpu": DeviceKind(2)}
    check_case(make_case(model="cifarnet", batch_size=8, devices=2), two_cores)
    with pytest.raises(HardwareAbsent, match="needs 3 CPU ranks per node, one process each; "):
        check_case(make_case(model="cifarnet", batch_size=8, devices=3), two_cores)
    with pytest.raises(HardwareAbsent, match="needs 2147483647 CPU ranks"):
        check_case(make_case(model="cifarnet", batch_size=8, devices=2**31 - 1), two_cores)


def test_cpu_engine_options():
    case = make_case(model="resnet18", batch_size=8, threads=1, mkldnn=False)
    assert case.label().endswith("t1 no-onednn")
    check_case(case, CPU_ONLY)
    with pytest.raises(
        HardwareAbsent, match="needs 4 CPU cores for its threads; this machine has 1"
    ):
        check_case(make_case(model="resnet18", batch_size=8, threads=4), CPU_ONLY)
    with pytest.raises(CaseError, match="mkldnn false"):
        check_case(make_case(model="resnet18", batch_size=8, mkldnn=False, device="cuda"), HOPPER)


# --- numbers every reader can handle (trainperf.core.limits) ---------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"batch_size": 99999999999999999999}, "batch_size must be at most 2147483647, got 9999"),
        ({"image_size": 2**31}, "image_size must be at most 2147483647"),
        ({"devices": 10**40}, "devices must be at most 2147483647"),
        ({"workers": 2**31}, "workers must be at most 2147483647"),
        ({"timeout_s": float("inf")}, "timeout_s must be a finite number"),
        ({"timeout_s": 1e30}, "timeout_s must be at most 31536000"),  # a timedelta's range
        ({"bucket_mb": float("nan")}, "bucket_mb must be a finite number"),
        ({"seed": 2**64}, "seed must be an integer from -9223372036854775808"),
    ],
)
def test_numbers_beyond_what_torch_and_the_store_hold_are_refused(fields, message):
    with pytest.raises(CaseError) as info:
        make_case(**({"model": "cifarnet", "batch_size": 4} | fields))
    assert message in str(info.value)


def test_every_count_of_a_case_is_bounded_and_the_bound_is_accepted():
    from trainperf.core.limits import COUNT_FIELDS, MAX_COUNT

    for name in COUNT_FIELDS:
        bounds = [getattr(m, "le", None) for m in Case.model_fields[name].metadata]
        assert MAX_COUNT in bounds, name
    case = make_case(model="cifarnet", batch_size=MAX_COUNT, image_size=MAX_COUNT)
    assert case.batch_size == MAX_COUNT


def test_a_huge_batch_flag_is_bad_input_and_writes_nothing(tmp_path, run_cli):
    db = tmp_path / "r.db"
    code, out, err = run_cli(f"run --model cifarnet -b 99999999999999999999 --db {db}")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "'--batch-size'" in err and "positive integer up to 2147483647" in err
    assert not db.exists()


@pytest.mark.parametrize(
    "fields,launch",
    [
        ({}, "process"),
        ({"devices": 2}, "torchrun"),
        ({"devices": 2, "parallel": "fsdp"}, "torchrun"),
        ({"devices": 2, "parallel": "dp", "device": "cuda"}, "process"),
        ({"devices": 1, "nodes": 2}, "torchrun"),
        ({"framework": "jax"}, "jax"),
        ({"framework": "jax", "devices": 2}, "jax"),
    ],
)
def test_one_rule_decides_how_a_case_is_launched(fields, launch):
    """``case.modes.launch_kind`` decides for the case, the runner and the worker alike."""
    from trainperf.case.modes import launch_kind
    from trainperf.launch.runner import ChildJob

    case = make_case(model="resnet50", batch_size=8, **fields)
    assert case.launch == launch_kind(case.model_dump()) == launch
    assert case.processes == (case.devices * case.nodes if launch == "torchrun" else 1)
    assert ChildJob.of_case(case).torchrun == (launch == "torchrun")


def test_one_batch_per_device_rule_for_the_case_and_the_predictor():
    from trainperf.case.modes import device_batch, splits_evenly
    from trainperf.predict.inputs import device_batches

    assert (device_batch(32, 4, "weak"), device_batch(32, 4, "strong")) == (32, 8)
    assert splits_evenly(8, 3, "weak") and not splits_evenly(8, 3, "strong")
    for scaling in ("weak", "strong"):
        case = make_case(model="resnet50", batch_size=32, devices=4, scaling=scaling)
        assert device_batches(32, [4], scaling) == {4: case.device_batch}


@pytest.mark.parametrize("given,stored", [("3", 3), (" +2 ", 2), (4, 4), ("adaptive", "adaptive")])
def test_runs_are_parsed_by_the_one_run_policy_parser(given, stored):
    assert make_case(model="resnet50", batch_size=8, runs=given).runs == stored


@pytest.mark.parametrize("given", ["0", True, 2.0, "adaptive:2", None])
def test_a_bad_run_policy_is_refused_with_the_parser_message(given):
    from trainperf.measure.runs import RunsError, parse_runs

    with pytest.raises(RunsError) as expected:
        parse_runs(given)
    with pytest.raises(CaseError, match=str(expected.value).split(":")[0]):
        make_case(model="resnet50", batch_size=8, runs=given)
