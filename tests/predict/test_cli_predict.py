"""`trainperf predict` and `trainperf catalog` end to end, and every bad input exiting 2."""

import json

import pytest

import report_fixture

V100 = (
    "predict --model resnet50 --device v100-sxm2-16gb --devices 1,8,16 --per-node 8"
    " --intra nvlink2 --inter ib-edr --batch-size 64 --precision fp16"
)


def test_v100_cluster_json(run_cli):
    code, out, err = run_cli(V100 + " --json")
    assert code == 0, err
    doc = json.loads(out)
    rows = doc["rows"]
    assert [r["devices"] for r in rows] == [1, 8, 16]
    assert [r["nodes"] for r in rows] == [1, 1, 2]
    for key in ("samples_per_s", "efficiency", "compute_s", "comm_s", "comm_exposed_s"):
        assert all(isinstance(r[key], float) for r in rows), key
    assert all(r["fits"] is True and "comm_fraction" in r for r in rows)
    assert rows[0]["efficiency"] == 1.0
    efficiencies = [r["efficiency"] for r in rows]
    assert efficiencies == sorted(efficiencies, reverse=True)
    assert doc["inputs"]["intra"] == "nvlink2" and doc["inputs"]["inter"] == "ib-edr"
    assert doc["assumptions"] and doc["calibration"] is None
    assert len(doc["inputs"]["catalog_digest"]) == 12


def test_table_and_markdown(run_cli):
    code, out, err = run_cli(V100)
    assert code == 0, err
    assert "samples/s" in out and "efficiency" in out and "assumptions:" in out
    assert "yes 4.3/14.9" in out and "hierarchical/" not in out  # the algorithm: --wide
    code, out, err = run_cli(V100 + " --wide")
    assert code == 0, err
    assert "hierarchical/" in out and "all-reduce" in out
    code, out, err = run_cli(V100 + " --format md")
    assert code == 0, err
    assert out.lstrip().startswith("**predicted weak scaling") and "| devices |" in out
    assert "**Assumptions**" in out


def test_strong_scaling_and_given_throughput(run_cli):
    code, out, err = run_cli(
        "predict --model cifarnet --device a100-sxm4-40gb --devices 1,2,4 --intra nvlink3"
        " --batch-size 256 --scaling strong --single-device-throughput 20000 --json"
    )
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert [r["device_batch"] for r in rows] == [256, 128, 64]
    assert rows[0]["compute_s"] == pytest.approx(256 / 20000)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("--model nonet", "unknown model 'nonet'"),
        ("--device h900", "unknown device 'h900'"),
        ("--intra nvlink9", "unknown link 'nvlink9'"),
        ("--devices 1,8,12", "12 devices is not a whole number of nodes of 8"),
        ("--inter nvlink2", "--inter nvlink2 is an intra-node link: give it as --intra"),
        ("--intra ib-edr", "--intra ib-edr is an inter-node link: give it as --inter"),
        ("--precision bf16", "v100-sxm2-16gb has no bf16 peak: allowed fp32, fp16"),
        ("--precision fp7", "precision 'fp7' is not valid"),
        ("--devices 1,0", "positive integers"),
        ("--scaling strong --devices 1,128", "does not split evenly over 128 devices"),
        ("--json --format md", "choose one of --json and --format md"),
        ("--achieved-fraction 1.5", "1.5"),
        ("--pcie-uplink pcie3", "give LINK:K, K a positive integer"),
        ("--pcie-uplink ib-edr:4", "--pcie-uplink ib-edr is an inter-node link"),
        ("--pcie-uplink pcie9:4", "unknown link 'pcie9'"),
        ("--pcie-uplink pcie3:16", "--pcie-uplink pcie3:16: K is the GPUs behind one switch"),
        (
            "--pcie-uplink nvlink4:4",
            "--pcie-uplink nvlink4: a PCIe switch's uplink is a PCIe "
            "link, allowed pcie3, pcie4, pcie5",
        ),
        ("--pcie-uplink pcie3-staged:4", "--pcie-uplink pcie3-staged: a PCIe switch's uplink"),
        ("--grad-compression int8", "'int8' is not one of"),
        ("--nics-per-node 0", "must be a positive integer, got '0'"),
        ("--nics-per-node 9", "--nics-per-node 9: at most one NIC per device, allowed 1 to the 8"),
        ("--comm-cores 2", "--comm-cores is for CPU devices: v100-sxm2-16gb is a GPU"),
        ("--comm-cores 0", "must be a positive integer, got '0'"),
    ],
)
def test_bad_inputs_exit_2(run_cli, args, message):
    base = dict(
        pair.split(" ", 1)
        for pair in (
            "--model resnet50",
            "--device v100-sxm2-16gb",
            "--devices 1,8,16",
            "--intra nvlink2",
            "--inter ib-edr",
            "--batch-size 64",
            "--precision fp16",
        )
    )
    given = args.split()
    flags = {k: v for k, v in base.items() if k not in given}
    line = " ".join(f"{k} {v}" for k, v in flags.items()) + " " + args
    code, out, err = run_cli("predict " + line)
    assert code == 2, (out, err)
    assert message in err and len(err.strip().splitlines()) == 1 and out == ""


def test_missing_inter_and_missing_device_exit_2(run_cli):
    code, _, err = run_cli("predict --model resnet50 --device v100-sxm2-16gb --devices 16")
    assert code == 2 and "inter-node link is needed" in err
    code, _, err = run_cli("predict --model resnet50 --devices 1")
    assert code == 2 and "give --device" in err


@pytest.mark.parametrize("size", [10**9, 2**31 - 1])
def test_an_image_too_large_to_trace_is_a_bad_input_not_a_traceback(run_cli, size):
    # within the flag's bound, but the model's tensors would overflow a 64-bit size
    code, out, err = run_cli(
        f"predict --model cifarnet --device v100-sxm2-16gb --devices 1,2 --per-node 2 "
        f"--intra pcie3 --image-size {size} --json"
    )
    assert (code, out) == (2, "") and "Traceback" not in err
    assert f"cifarnet at size {size}: its tensors would hold more than 2^63 elements" in err


def test_calibrated_from_this_machine(run_cli, tmp_path):
    """A CPU with no catalog entry: throughput and gloo link measured, no --device."""
    db = tmp_path / "fixture.db"
    report_fixture.build(db)
    code, out, err = run_cli(
        f"predict --model cifarnet --devices 1,2 --batch-size 32 --calibrate {db} --json"
    )
    assert code == 0, err
    doc = json.loads(out)
    cal = doc["calibration"]
    assert cal["single_device_throughput"] > 0 and cal["alpha_s"] > 0
    assert doc["inputs"]["device"].startswith("measured") and doc["inputs"]["intra"] == "measured"
    one, two = doc["rows"]
    assert one["samples_per_s"] == pytest.approx(cal["single_device_throughput"])
    assert two["comm_s"] > 0 and two["efficiency"] <= 1
    # the fixture holds cifarnet at several batches: the step time against the batch,
    # through the measured point (the one-device row above reproduces it)
    assert cal["batch_curve"]["batches"] and len(cal["batch_curve"]["batches"]) >= 2
    assert any("the step time against the batch measured at" in a for a in doc["assumptions"])
    code, out, err = run_cli(f"predict --model cifarnet --devices 1,2 --calibrate {db}")
    assert code == 0, err
    assert "calibration of cifarnet" in out and "measured/s" in out
    # this machine's measured CPU has no catalog core count for --comm-cores to share
    code, out, err = run_cli(
        f"predict --model cifarnet --devices 1,2 --calibrate {db} --comm-cores 1"
    )
    assert code == 2 and out == "" and "--comm-cores needs a core count" in err
    # --calibrate-device names this machine in the catalog: without --device, that entry is
    # the device predicted for, as with --device naming it too
    base = f"predict --model cifarnet --devices 1,2 --batch-size 32 --calibrate {db} --json"
    named = {}
    for flags in ("--calibrate-device xeon-gold-6148-2s", "--device xeon-gold-6148-2s"):
        code, out, err = run_cli(f"{base} {flags}")
        assert code == 0, err
        named[flags] = json.loads(out)
    a, b = named.values()
    assert a["inputs"]["device"] == b["inputs"]["device"] == "xeon-gold-6148-2s"
    assert a["rows"] == b["rows"]


def test_calibration_bad_inputs_exit_2(run_cli, tmp_path):
    code, _, err = run_cli(
        f"predict --model cifarnet --devices 1 --calibrate {tmp_path / 'none.db'}"
    )
    assert code == 2 and "no results database" in err
    text_file = tmp_path / "notes.txt"
    text_file.write_text("not a database\n")
    code, _, err = run_cli(f"predict --model cifarnet --devices 1 --calibrate {text_file}")
    assert code == 2 and err.count("\n") == 1, err
    assert f"cannot read {text_file} as a results database" in err
    assert text_file.read_text() == "not a database\n"
    code, _, err = run_cli(
        "predict --model cifarnet --device v100-sxm2-16gb --devices 1 --calibrate-device p40"
    )
    assert code == 2 and "--calibrate-device needs --calibrate" in err
    db = tmp_path / "fixture.db"
    report_fixture.build(db)
    code, _, err = run_cli(f"predict --model cifarnet --devices 1,16 --calibrate {db}")
    assert code == 2 and "give --inter: the calibration has no inter-node link" in err
    code, _, err = run_cli(f"predict --model resnet50 --devices 1 --calibrate {db}")
    assert code == 2 and "no ok single-device result of resnet50" in err


def test_catalog_lists_devices_links_and_systems(run_cli):
    code, out, err = run_cli("catalog --json")
    assert code == 0, err
    doc = json.loads(out)
    assert "v100-sxm2-16gb" in doc["devices"] and "ib-edr" in doc["links"]
    assert doc["systems"]["dgx-h100"]["nics_per_node"] == 8
    code, out, err = run_cli("catalog")
    assert code == 0, err
    assert "v100-sxm2-16gb" in out and "nvlink2" in out and "dgx-a100-80gb" in out
    code, out, _ = run_cli("catalog --format md")
    assert code == 0 and "| id |" in out


@pytest.fixture
def resolutions(monkeypatch):
    """The model names ``trainperf.models.get`` is asked for, in order."""
    from trainperf import models

    asked, get = [], models.get

    def counting(name):
        asked.append(name)
        return get(name)

    monkeypatch.setattr(models, "get", counting)
    return asked


@pytest.mark.parametrize(
    "args",
    [
        "--model gpt2-small --device v100-sxm2-16gb --devices 1,8 --intra nvlink2 --json",
        "--model llama-tiny --device h100-sxm --devices 1,8 --intra nvlink4 --parallel fsdp"
        " --precision bf16 --json",
        "--model llama-tiny --device h100-sxm --devices min --parallel fsdp --precision bf16",
    ],
)
def test_the_model_is_resolved_once(run_cli, resolutions, args):
    code, _, err = run_cli("predict " + args)
    assert code == 0, err
    assert resolutions == [args.split()[1]]


def test_the_model_is_resolved_once_when_calibrated(run_cli, resolutions, tmp_path):
    db = tmp_path / "fixture.db"
    report_fixture.build(db)
    resolutions.clear()
    code, _, err = run_cli(f"predict --model cifarnet --devices 1,2 --calibrate {db} --json")
    assert code == 0, err
    assert resolutions == ["cifarnet"]


def test_an_unknown_model_is_refused_at_the_door(run_cli, resolutions):
    code, _, err = run_cli("predict --model nonet --device v100-sxm2-16gb --devices 1")
    assert code == 2 and "unknown model 'nonet'" in err
    assert resolutions == ["nonet"]


def test_explain_shows_the_compute_curve_and_json_holds_it_only_when_asked(run_cli):
    code, out, err = run_cli(V100 + " --json --explain")
    assert code == 0, err
    curve = json.loads(out)["compute_curve"]
    assert [p["device_batch"] for p in curve] == [1, 2, 4, 8, 16, 32, 64]
    assert all(p["samples_per_s"] > 0 for p in curve)
    code, out, err = run_cli(V100 + " --json")
    assert "compute_curve" not in json.loads(out)
    code, out, err = run_cli(V100 + " --explain")
    assert code == 0, err
    assert "compute of one device against its batch" in out and "ms per sample" in out


def test_nics_per_node_scales_the_cross_node_term_and_is_echoed_only_when_given(run_cli):
    outputs = {}
    for flag in ("", " --nics-per-node 1", " --nics-per-node 8"):
        code, out, err = run_cli(V100 + flag + " --json")
        assert code == 0, err
        outputs[flag] = out
    assert outputs[""] == outputs[" --nics-per-node 1"]  # the default, byte for byte
    one, eight = json.loads(outputs[""]), json.loads(outputs[" --nics-per-node 8"])
    assert "nics_per_node" not in one["inputs"] and eight["inputs"]["nics_per_node"] == 8
    assert any("8 NICs per node" in line for line in eight["assumptions"])
    assert one["rows"][:2] == eight["rows"][:2]  # one node: no NIC in the way
    assert eight["rows"][2]["comm_s"] < one["rows"][2]["comm_s"]
    code, out, err = run_cli(V100 + " --nics-per-node 8 --format md")
    assert code == 0, err
    assert "inter ib-edr x 8 NICs" in " ".join(out.split())


RTX = "predict --model resnet50 --device rtx-2080-ti --devices 1,4 --per-node 4 --json"


def test_a_device_without_peer_to_peer_takes_the_host_staged_link(run_cli):
    code, out, err = run_cli(RTX)
    assert code == 0, err
    staged = json.loads(out)
    assert staged["inputs"]["intra"] == "pcie3-staged"
    assert any(line.startswith("intra-node link: pcie3-staged") for line in staged["assumptions"])
    code, out, err = run_cli(RTX + " --intra pcie3")  # an explicit --intra wins
    assert code == 0, err
    direct = json.loads(out)
    assert direct["inputs"]["intra"] == "pcie3"
    assert not any("peer-to-peer" in line for line in direct["assumptions"])
    assert staged["rows"][1]["comm_s"] > direct["rows"][1]["comm_s"]
    code, out, err = run_cli(RTX.replace("1,4", "1"))  # one device: no link at all
    assert code == 0, err
    assert json.loads(out)["inputs"]["intra"] is None


ZENITH = (
    "predict --model resnet50 --device xeon-gold-6148-2s --devices 1,2,128 --per-node 1 "
    "--inter omnipath --batch-size 64 --json"
)


def test_comm_cores_give_the_communication_cores_of_its_own(run_cli):
    """--comm-cores K: the collectives overlap at no cost and the compute on 2 nodes or more
    runs on the other C - K cores; the default time-shares them; K must leave a core."""
    code, out, err = run_cli(ZENITH)
    assert code == 0, err
    shared = json.loads(out)
    code, out, err = run_cli(ZENITH + " --comm-cores 2")
    assert code == 0, err
    own = json.loads(out)
    assert own["inputs"]["comm_cores"] == 2 and "comm_cores" not in shared["inputs"]
    assert own["rows"][0] == shared["rows"][0]  # one node reserves nothing
    assert own["rows"][1]["compute_s"] == pytest.approx(shared["rows"][1]["compute_s"] * 40 / 38)
    assert own["rows"][1]["comm_exposed_s"] < shared["rows"][1]["comm_exposed_s"]
    assert any("on 2 of each rank's 40 cores" in line for line in own["assumptions"])
    assert not any("time-shared" in line for line in own["assumptions"])
    for count in (40, 41):
        code, out, err = run_cli(ZENITH + f" --comm-cores {count}")
        assert code == 2 and out == ""
        assert f"--comm-cores must be 1 to 39 (xeon-gold-6148-2s has 40 cores), got {count}" in err


LLAMA_FSDP = (
    "predict --model llama3-8b --devices 8,64 --parallel fsdp --precision bf16 --batch-size 1 "
    "--seq-len 2048 --json"
)


def test_a_system_is_its_device_per_node_links_and_nics(run_cli):
    """--system dgx-h100 predicts what its five flags predict, and says it did."""
    code, out, err = run_cli(
        LLAMA_FSDP + " --device h100-sxm --per-node 8 --intra nvlink4 --inter ib-ndr "
        "--nics-per-node 8"
    )
    assert code == 0, err
    flags = json.loads(out)
    code, out, err = run_cli(LLAMA_FSDP + " --system dgx-h100")
    assert code == 0, err
    system = json.loads(out)
    assert system["rows"] == flags["rows"]
    assert system["inputs"] == {**flags["inputs"], "system": "dgx-h100"}
    assert "system" not in flags["inputs"]
    assert system["assumptions"][0].startswith("system dgx-h100 (NVIDIA DGX H100): 8 x h100-sxm")
    assert "replaced" not in system["assumptions"][0]


def test_a_flag_beside_a_system_replaces_that_part_and_says_so(run_cli):
    code, out, err = run_cli(LLAMA_FSDP + " --system dgx-h100 --inter ethernet-100g")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["inputs"]["inter"] == "ethernet-100g" and doc["inputs"]["nics_per_node"] == 8
    assert doc["assumptions"][0].endswith("replaced as given: --inter ethernet-100g")
    # four GPUs of each node in use: at most one NIC each, unless --nics-per-node says
    code, out, err = run_cli(LLAMA_FSDP + " --system dgx-h100 --per-node 4")
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["inputs"]["per_node"], doc["inputs"]["nics_per_node"]) == (4, 4)
    assert [row["nodes"] for row in doc["rows"]] == [2, 16]
    code, out, err = run_cli(LLAMA_FSDP + " --system dgx-h100 --nics-per-node 2")
    assert code == 0, err
    assert json.loads(out)["inputs"]["nics_per_node"] == 2
    code, out, err = run_cli(LLAMA_FSDP + " --system dgx-h100 --device h200-sxm")
    assert code == 0, err
    assert json.loads(out)["inputs"]["device"] == "h200-sxm"


def test_a_one_device_node_system_needs_no_intra_link(run_cli):
    code, out, err = run_cli(
        "predict --model resnet50 --system stampede2-knl --devices 1,16 --json"
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["inputs"]["intra"] is None and doc["inputs"]["inter"] == "omnipath"
    assert [row["nodes"] for row in doc["rows"]] == [1, 16]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("--system dgx-9", "unknown system 'dgx-9': valid systems are dgx-1-v100, dgx-2"),
        ("--system dgx-h100 --nics-per-node 9", "--nics-per-node 9: at most one NIC per device"),
        ("--system dgx-h100 --per-node 4 --nics-per-node 5", "allowed 1 to the 4 devices per"),
        ("--system dgx-h100 --inter nvlink4", "--inter nvlink4 is an intra-node link"),
    ],
)
def test_bad_system_inputs_exit_2(run_cli, args, message):
    code, out, err = run_cli(f"{LLAMA_FSDP} {args}")
    assert code == 2 and out == "" and message in err
    assert len(err.strip().splitlines()) == 1
