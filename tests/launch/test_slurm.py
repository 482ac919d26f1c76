"""The sbatch script and `trainperf slurm`: options that could break or inject into the
script are refused as one line with exit code 2, and nothing is written."""

import pytest

from trainperf.case.suite import resolve
from trainperf.launch.slurm import SlurmError, case_sets, sbatch_script


@pytest.mark.parametrize(
    "partition", ["gpu\n#SBATCH --account=other", "gpu p100", "gpu;rm", "", "gpu,"]
)
def test_a_partition_that_is_not_a_name_is_refused(partition):
    with pytest.raises(SlurmError, match="is not a Slurm partition"):
        sbatch_script("quick", nodes=2, partition=partition)


def test_partition_names_and_lists_are_written_as_one_directive():
    script = sbatch_script("quick", nodes=2, partition="gpu-a100,gpu_v100.x")
    assert "#SBATCH --partition=gpu-a100,gpu_v100.x\n" in script
    assert sum(line.startswith("#SBATCH") for line in script.splitlines()) == 6


def test_a_time_with_a_trailing_newline_is_refused():
    with pytest.raises(SlurmError, match="not a Slurm time"):
        sbatch_script("quick", nodes=2, time_limit="02:00:00\n")


@pytest.mark.parametrize("time_limit", ["120", "0", "90:30", "02:00:00", "1-12", "2-04:30:00"])
def test_the_time_forms_sbatch_takes_are_written(time_limit):
    script = sbatch_script("quick", nodes=2, time_limit=time_limit)
    assert f"#SBATCH --time={time_limit}\n" in script


@pytest.mark.parametrize("time_limit", ["٣", "1:2", "1-123", "-1", "1:00:00:00", "", "2h"])
def test_a_time_sbatch_would_misread_is_refused(time_limit):
    with pytest.raises(SlurmError, match="not a Slurm time: use MINUTES, HH:MM:SS or D-HH"):
        sbatch_script("quick", nodes=2, time_limit=time_limit)


def test_the_submit_hint_is_a_command_a_shell_runs(tmp_path, run_cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(["slurm", "quick", "--out", "-job one.sbatch"])
    assert code == 0 and (tmp_path / "-job one.sbatch").is_file()
    assert err.endswith("submit it with `sbatch './-job one.sbatch'`\n")


def test_cli_out_into_a_missing_directory_is_bad_input(tmp_path, run_cli):
    out = tmp_path / "nope" / "job.sbatch"
    code, stdout, err = run_cli(["slurm", "short-test", "--out", out])
    assert code == 2 and stdout == ""
    assert err == f"trainperf: error: --out {out}: directory {out.parent} does not exist\n"
    assert list(tmp_path.iterdir()) == []


def test_cli_out_that_is_a_directory_is_bad_input(tmp_path, run_cli):
    code, _, err = run_cli(["slurm", "short-test", "--out", tmp_path])
    assert code == 2 and "is a directory: give a file path" in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_cli_partition_with_a_newline_is_bad_input(tmp_path, run_cli):
    out = tmp_path / "job.sbatch"
    code, _, err = run_cli(["slurm", "short-test", "--partition", "gpu\nx", "--out", out])
    assert code == 2 and err.count("\n") == 1 and "is not a Slurm partition" in err
    assert not out.exists()


def test_cli_writes_the_script(tmp_path, run_cli):
    out = tmp_path / "job.sbatch"
    code, _, err = run_cli(["slurm", "short-test", "--partition", "gpu", "--out", out])
    assert code == 0, err
    assert "#SBATCH --partition=gpu\n" in out.read_text()


def test_gpus_per_node_sets_the_devices_of_a_suite_that_does_not_vary_them():
    short = resolve("short-test")
    assert case_sets(short, 8) == ["devices=8"]
    assert case_sets(short, 8, ["runs=3"]) == ["devices=8", "runs=3"]
    assert case_sets(short, None, ["runs=3"]) == ["runs=3"]
    mine = ["devices=2", "runs=3"]  # the user's own device count wins
    assert case_sets(short.with_overrides(mine), 8, mine) == mine


def test_a_scaling_suite_keeps_its_device_counts_on_every_node(run_cli):
    # Setting devices=8 in every case made the suite's 1, 2, 4 and 8-device cases equal.
    scaling = resolve("scaling")
    assert case_sets(scaling, 8) == []
    code, out, err = run_cli("slurm scaling --nodes 4 --gpus-per-node 8 --out -")
    assert code == 0, err
    assert "#SBATCH --nodes=4\n" in out and "#SBATCH --gpus-per-node=8\n" in out
    (srun,) = [line for line in out.splitlines() if line.startswith("srun ")]
    assert "--set nodes=$SLURM_NNODES --rdzv-endpoint" in srun and "devices" not in srun
    nodes_4 = scaling.with_overrides(["nodes=4"])
    assert sorted({p.fields["devices"] for p in nodes_4.planned}) == [1, 2, 4, 8]


def test_a_training_run_over_every_node_of_the_allocation(run_cli):
    code, out, err = run_cli(
        [
            "slurm",
            "--train",
            "resnet50 --data imagefolder:/data/imagenet --target top1=0.759 --optimizer lars",
            "--nodes",
            4,
            "--gpus-per-node",
            8,
            "--out",
            "-",
        ]
    )
    assert code == 0, err
    assert "#SBATCH --nodes=4" in out and "#SBATCH --gpus-per-node=8" in out
    srun = next(line for line in out.splitlines() if line.startswith("srun "))
    assert " -m trainperf train resnet50 --data imagefolder:/data/imagenet " in srun
    assert "--optimizer lars --devices 8 --nodes $SLURM_NNODES" in srun
    assert '--rdzv-endpoint "$HEAD:$RDZV_PORT" --db trainperf.db' in srun


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--train", "cifarnet --data cifar10:/d --target top1=0.8 --momentum 2"], "--momentum"),
        (["--train", "cifarnet --data cifar10:/d --target top1=0.8 --nodes 3"], "sets --nodes"),
        (["--train", "cifarnet --target top1=0.8"], "--data"),
        (["--train", "cifarnet 'unclosed"], "--train"),
        (["short-test", "--train", "cifarnet"], "one of them"),
        ([], "one of them"),
        (["--train", "cifarnet --data cifar10:/d --target top1=0.8", "--set", "seed=1"], "--set"),
        (
            ["--train", "cifarnet --data cifar10:/d --target top1=0.8 --devices 2"]
            + ["--gpus-per-node", "4"],
            "give one",
        ),
    ],
)
def test_a_bad_training_job_is_refused_before_any_script(run_cli, tmp_path, arguments, message):
    out = tmp_path / "job.sbatch"
    code, _, err = run_cli(["slurm", *arguments, "--out", out])
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
