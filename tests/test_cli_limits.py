"""Numbers and text out of range are bad input at the door: one line naming the flag (or the
file, or the variable), exit 2, nothing written; never a traceback (issue 29, item 8)."""

import click
import pytest

from trainperf.cli import COMMANDS
from trainperf.cli.flag_types import FiniteFloat
from trainperf.core.limits import INT64_MAX, MAX_COUNT, TIMEOUT_S_MAX
from trainperf.store.database import Store

HUGE = "1" + "0" * 23  # 10^23: above every 64-bit integer
PREDICT = "predict --model resnet50 --device v100-sxm2-16gb --devices 1,8 --intra nvlink2"


def refused(run_cli, args, *named, db=None):
    """Run ``args``: exit 2 with one line on stderr holding each of ``named``, nothing on
    stdout and, when ``db`` is given, no database made there."""
    code, out, err = run_cli(args)
    assert code == 2, err
    assert err.startswith("trainperf: error: ") and err.count("\n") == 1, err
    assert out == ""
    for text in named:
        assert text in err, (text, err)
    if db is not None:
        assert not db.exists()
    return err


def with_db(args, db):
    """``args`` split, with ``--db db`` for the verbs that write (predict writes nothing)."""
    args = args.split() if isinstance(args, str) else list(args)
    return args if args[0] == "predict" else [*args, "--db", db]


def options():
    """(command path, option) of every option of every verb, micro's kinds included."""
    stack = [(c.name, c) for c in COMMANDS]
    while stack:
        path, command = stack.pop()
        if isinstance(command, click.Group):
            stack += [(f"{path} {n}", c) for n, c in command.commands.items()]
            continue
        for param in command.params:
            if isinstance(param, click.Option):
                yield path, param


def test_every_float_option_is_finite_float_and_every_int_range_has_a_top():
    floats = [
        (p, o.opts[0]) for p, o in options() if isinstance(o.type, click.types.FloatParamType)
    ]
    assert floats == [], "click's FLOAT and FloatRange let nan through: use FiniteFloat"
    open_ended = [
        (p, o.opts[0])
        for p, o in options()
        if isinstance(o.type, click.IntRange) and o.type.max is None
    ]
    assert open_ended == []
    finite = {(p, o.opts[0]) for p, o in options() if isinstance(o.type, FiniteFloat)}
    assert {("run", "--timeout"), ("predict", "--achieved-fraction")} <= finite


def test_every_timeout_is_at_most_a_year():
    """A process group's timeout is a datetime.timedelta: at 1e30 s every rank of a
    distributed case ended in an OverflowError, stored as the case's error."""
    timeouts = {(p, o.type.max) for p, o in options() if o.opts[0] == "--timeout"}
    assert {path for path, _ in timeouts} >= {"run", "micro collective", "train", "maxbatch"}
    assert {top for _, top in timeouts} == {TIMEOUT_S_MAX} == {365 * 86400}


@pytest.mark.parametrize(
    "args",
    [
        "micro collective --device cpu --timeout",
        "run --model cifarnet --devices 2 --timeout",
        "train cifarnet --data jpeg-sample --target top1=0.5 --timeout",
    ],
)
def test_a_timeout_longer_than_a_year_is_refused(tmp_path, run_cli, args):
    db = tmp_path / "r.db"
    refused(run_cli, with_db([*args.split(), "1e30"], db), "'--timeout'", "<= 31536000", db=db)


@pytest.mark.parametrize(
    "args",
    [
        "run --model cifarnet",
        "profile cifarnet",
        "maxbatch cifarnet",
        "micro gemm",
        "equivalence cifarnet --devices 2",
        "train cifarnet --data jpeg-sample --target top1=0.5",
    ],
)
def test_an_unknown_device_is_refused_naming_the_three_the_flag_takes(tmp_path, run_cli, args):
    """The flag takes auto besides a case's cpu and cuda; the value is shown escaped."""
    db = tmp_path / "r.db"
    err = refused(run_cli, with_db([*args.split(), "--device", "tpu\x1b"], db), db=db)
    assert err == "trainperf: error: --device 'tpu\\x1b' is not valid: allowed cpu, cuda or auto\n"


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN", "1e999"])
@pytest.mark.parametrize(
    ("args", "flag"),
    [
        ("run --model cifarnet --timeout", "--timeout"),
        ("run --model cifarnet --devices 2 --bucket-mb", "--bucket-mb"),
        ("maxbatch cifarnet --timeout", "--timeout"),
        ("profile cifarnet --timeout", "--timeout"),
        ("micro gemm --timeout", "--timeout"),
        ("train cifarnet --data jpeg-sample --target top1=0.5 --timeout", "--timeout"),
        ("train cifarnet --data jpeg-sample --target top1=0.5 --warmup-epochs", "--warmup-epochs"),
        ("isoaccuracy 1 2 --top1-tolerance", "--top1-tolerance"),
        ("isoaccuracy 1 2 --loss-tolerance", "--loss-tolerance"),
        (f"{PREDICT} --single-device-throughput", "--single-device-throughput"),
        (f"{PREDICT} --achieved-fraction", "--achieved-fraction"),
        (f"{PREDICT} --bucket-mb", "--bucket-mb"),
    ],
)
def test_float_options_refuse_nan_and_infinity(tmp_path, run_cli, args, flag, value):
    db = tmp_path / "r.db"
    err = refused(run_cli, with_db([*args.split(), value], db), f"'{flag}'", db=db)
    assert "must be a finite number" in err


@pytest.mark.parametrize(
    ("option", "value", "allowed"),
    [
        ("--achieved-fraction", "1e-320", ">= 1e-06 and <= 1"),
        ("--achieved-fraction", "0", ">= 1e-06"),
        ("--single-device-throughput", "1e-320", ">= 1e-06 and <= 1e+12"),
        ("--single-device-throughput", "1e300", "<= 1e+12"),
        ("--bucket-mb", "1e-320", ">= 0.0625 and <= 1048576"),
        ("--bucket-mb", "1e300", "<= 1048576"),
    ],
)
def test_predict_refuses_inputs_whose_outputs_would_not_be_finite(run_cli, option, value, allowed):
    refused(run_cli, f"{PREDICT} {option} {value} --json", f"'{option}'", allowed, value)


@pytest.mark.parametrize(
    ("option", "value"),
    [("--achieved-fraction", "1e-6"), ("--single-device-throughput", "1e-6")],
)
def test_predict_at_its_bounds_prints_finite_numbers(run_cli, option, value):
    # TRAINPERF_STRICT_JSON (conftest) makes a NaN or an infinity in the output raise.
    code, out, err = run_cli(f"{PREDICT} --batch-size {MAX_COUNT} {option} {value} --json")
    assert code == 0, err
    assert "Infinity" not in out and "NaN" not in out


@pytest.mark.parametrize(
    "args",
    [
        "run --model resnet18 --devices ²",
        "run --model resnet18 --devices 1,²",
        f"run --model resnet18 --devices {HUGE}",
        f"{PREDICT.replace('1,8', '²')}",
    ],
)
def test_device_counts_are_ascii_digits_up_to_max_count(tmp_path, run_cli, args):
    db = tmp_path / "r.db"
    refused(run_cli, with_db(args, db), "'--devices'", "positive integers", db=db)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (f"run --model cifarnet --order-seed {HUGE}", "--order-seed"),
        (f"run --model cifarnet --workers {HUGE}", "--workers"),
        (f"run --model cifarnet --batch-size {HUGE}", "--batch-size"),
        (f"maxbatch cifarnet --start {HUGE}", "--start"),
        (f"maxbatch cifarnet --limit {HUGE}", "--limit"),
        (f"profile cifarnet --warmup {HUGE}", "--warmup"),
        (f"micro gemm --iters {HUGE}", "--iters"),
        (f"train cifarnet --data jpeg-sample --target top1=0.5 --seed {HUGE}", "--seed"),
        (
            f"train cifarnet --data jpeg-sample --target top1=0.5 --max-epochs {HUGE}",
            "--max-epochs",
        ),
        (f"train cifarnet --data jpeg-sample --target top1=0.5 --runs {HUGE}", "--runs"),
        (f"run --model cifarnet --runs {HUGE}", "--runs"),
        (f"run --model cifarnet --runs adaptive:0.05:{HUGE}", "--runs"),
        (f"run --model cifarnet --steps fixed:1:{HUGE}", "steps 'fixed:1:"),
        ("run --model cifarnet --steps adaptive:0.01:5:1e999", "MAX_SECONDS finite"),
        (f"micro p2p --bytes {HUGE}G", "--bytes"),
    ],
)
def test_huge_integers_are_refused_before_anything_is_written(tmp_path, run_cli, args, flag):
    db = tmp_path / "r.db"
    refused(run_cli, [*args.split(), "--db", db], flag, db=db)


def test_the_order_seed_goes_up_to_int64_max_only(tmp_path, run_cli):
    db = tmp_path / "r.db"
    refused(
        run_cli,
        ["run", "--model", "cifarnet", "--order-seed", INT64_MAX + 1, "--db", db],
        "'--order-seed'",
        str(INT64_MAX),
        db=db,
    )


def test_the_seeds_of_all_runs_fit_in_64_bits(tmp_path, run_cli):
    db = tmp_path / "r.db"
    args = "train cifarnet --data jpeg-sample --target top1=0.5 --runs 2 --seed"
    refused(run_cli, [*args.split(), INT64_MAX, "--db", db], "--seed", "--runs 2", db=db)


@pytest.mark.parametrize("target", ["eval_loss=inf", "eval_loss=nan", "top1=nan"])
def test_a_target_is_a_finite_number(tmp_path, run_cli, target):
    db = tmp_path / "r.db"
    args = f"train cifarnet --data jpeg-sample --target {target} --db {db}"
    refused(run_cli, args, "--target", db=db)


@pytest.mark.parametrize("ref", [HUGE, "²", "1²"])
def test_isoaccuracy_of_a_run_id_no_store_holds(tmp_path, run_cli, ref):
    db = tmp_path / "r.db"
    with Store(db):
        pass
    refused(run_cli, ["isoaccuracy", ref, "1", "--db", db], f"no training run '{ref}'")


def test_timeout_nan_names_the_flag(tmp_path, run_cli):
    db = tmp_path / "r.db"
    err = refused(run_cli, f"run --model cifarnet --timeout nan --db {db}", "'--timeout'", db=db)
    assert "nan" in err


@pytest.mark.parametrize("value", ["1e-320", "0.01", "1e300"])
def test_a_ddp_bucket_below_64_kib_or_above_1_tib_is_refused(tmp_path, run_cli, value):
    db = tmp_path / "r.db"
    args = f"run --model cifarnet --devices 2 --bucket-mb {value} --db {db}"
    refused(run_cli, args, "'--bucket-mb'", ">= 0.0625", db=db)


@pytest.mark.parametrize("value", ["1.0e-320", "0.01", "1.0e+300"])
def test_a_suite_file_with_such_a_bucket_is_refused_with_its_line(tmp_path, run_cli, value):
    suite, db = tmp_path / "s.yaml", tmp_path / "r.db"
    suite.write_text(
        f"name: s\ncases:\n  - {{model: cifarnet, batch_size: 2, devices: 2, bucket_mb: {value}}}\n"
    )
    refused(run_cli, ["run", suite, "--db", db], f"{suite}:3: cases[0].bucket_mb", "0.0625", db=db)


@pytest.mark.parametrize("character", ["\x00", "\x01", "\x1b", "\x7f"])
def test_a_suite_file_with_a_control_character_is_one_line(tmp_path, run_cli, character):
    suite, db = tmp_path / "s.yaml", tmp_path / "r.db"
    suite.write_text(
        f"name: s\ncases: [{{model: cifarnet, batch_size: 2}}]\ndescription: a{character}b\n"
    )
    refused(run_cli, ["run", suite, "--db", db], f"{suite}:3: character", "not allowed", db=db)


def test_a_cache_in_the_home_of_no_user_names_the_variable(tmp_path, run_cli, monkeypatch):
    monkeypatch.setenv("TRAINPERF_CACHE", "~no_such_user_trainperf/x")
    db = tmp_path / "r.db"
    args = f"run --model cifarnet --data jpeg-sample --db {db}"
    refused(run_cli, args, "TRAINPERF_CACHE='~no_such_user_trainperf/x'", "~no_such_user", db=db)
    args = f"train cifarnet --data jpeg-sample --target top1=0.5 --db {db}"
    refused(run_cli, args, "TRAINPERF_CACHE", db=db)


def test_a_data_path_in_the_home_of_no_user_names_the_data(tmp_path, run_cli):
    db = tmp_path / "r.db"
    args = f"run --model cifarnet --data cifar10:~no_such_user_trainperf/c --db {db}"
    refused(run_cli, args, "cifar10:~no_such_user_trainperf/c", db=db)


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ("micro collective --device cpu --devices 2147483647", "needs 2147483647 CPU cores"),
        ("run --model cifarnet --device cpu --devices 2147483647", "needs 2147483647 CPU ranks"),
    ],
)
def test_cpu_ranks_beyond_the_cores_are_refused_before_any_starts(tmp_path, run_cli, args, named):
    """A rank per core at most (trainperf.case.spec._check_hardware): once, 2^31 - 1 ranks
    on a CPU made torchrun start that many processes."""
    db = tmp_path / "r.db"
    refused(run_cli, with_db(args, db), named, "this machine has", db=db)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["micro", "gemm", "--dtype", "fp32,,bf16"], "--dtype 'fp32,,bf16'"),
        (["micro", "collective", "--ops", "all_reduce,"], "--ops 'all_reduce,'"),
        (["results", "--status", "ok,,error"], "--status 'ok,,error'"),
        (["results", "--model", "resnet18", "--model", ""], "--model ''"),
        (["compare", "--group-by", "devices,"], "--group-by 'devices,'"),
        (["compare", "--across", ",framework"], "--across ',framework'"),
    ],
)
def test_an_empty_item_of_a_comma_list_is_refused(tmp_path, run_cli, args, flag):
    """An empty filter once selected everything (``export --system ''`` exported all)."""
    db = tmp_path / "r.db"
    Store(db).close()
    refused(run_cli, [*args, "--db", db], flag, "has an empty item")


def test_an_empty_system_filter_exports_nothing(tmp_path, run_cli):
    db, out = tmp_path / "r.db", tmp_path / "out.json"
    Store(db).close()
    refused(run_cli, ["export", out, "--system", "", "--db", db], "--system ''")
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["results", "--since", "0001-01-01T00:00+01:00"], "outside the years 1 to 9999 in UTC"),
        (["export", "x.json", "--since", "9999-12-31T23:00-01:00"], "outside the years 1 to"),
        (["results", "--sort", ""], "--sort '' is not valid: allowed created_at"),
    ],
)
def test_a_filter_out_of_range_or_empty_is_refused(tmp_path, run_cli, monkeypatch, args, named):
    """A --since whose offset moves it past year 1 or 9999 once raised OverflowError."""
    monkeypatch.chdir(tmp_path)
    Store(tmp_path / "r.db").close()
    refused(run_cli, [*args, "--db", tmp_path / "r.db"], named)
    assert not (tmp_path / "x.json").exists()
