"""The breakdown of a small CNN's training step."""

import json

import pytest
import torch

from trainperf import models
from trainperf.case.spec import make_case
from trainperf.profile.breakdown import profile_case
from trainperf.profile.layers import leaf_modules, out_of_place_activations

# Hooks time the layers; what they cannot see (the loss, zero_grad, autograd's work between
# layers) is `unattributed_ms`. For a small CNN on a CPU it stays under this share.
UNATTRIBUTED_TOLERANCE = 0.35


@pytest.fixture(scope="module")
def cifarnet_profile():
    case = make_case(model="cifarnet", batch_size=8, image_size=32)
    return profile_case(case, steps=5, warmup=2)["metrics"]


def test_every_leaf_layer_is_timed(cifarnet_profile):
    expected = [name for name, _ in leaf_modules(models.get("cifarnet").build())]
    layers = cifarnet_profile["layers"]
    assert [layer["name"] for layer in layers] == expected
    assert {layer["type"] for layer in layers} >= {"Conv2d", "Linear", "ReLU"}
    assert all(layer["fwd_ms"] > 0 and layer["bwd_ms"] >= 0 for layer in layers)
    assert all(layer["calls"] == 1 for layer in layers)


def test_layers_add_up_to_the_instrumented_step(cifarnet_profile):
    m = cifarnet_profile
    attributed = m["fwd_ms"] + m["bwd_ms"] + m["optimizer_ms"]
    assert attributed + m["unattributed_ms"] == pytest.approx(m["step_ms"])
    assert 0 <= m["unattributed_ms"] <= UNATTRIBUTED_TOLERANCE * m["step_ms"]
    assert sum(layer["share"] for layer in m["layers"]) == pytest.approx(
        (m["fwd_ms"] + m["bwd_ms"]) / m["step_ms"]
    )
    assert m["step_ms_uninstrumented"] > 0
    assert m["instrumentation_overhead"] == pytest.approx(
        m["step_ms"] / m["step_ms_uninstrumented"] - 1
    )
    assert m["optimizer_ms"] > 0 and m["data_ms"] > 0


def test_category_shares_add_up_to_all_of_it(cifarnet_profile):
    categories = cifarnet_profile["categories"]
    assert sum(c["share"] for c in categories) == pytest.approx(1.0)
    by_name = {c["category"]: c for c in categories}
    assert by_name["convolution"]["ms"] > 0 and by_name["pooling"]["ms"] > 0
    assert cifarnet_profile["cuda_api"] is None and cifarnet_profile["cuda_api_absent_reason"]


def test_onednn_switch_and_threads_are_recorded(run_cli, tmp_path):
    code, out, _ = run_cli(
        ["profile", "cifarnet", "-b", 4, "--image-size", 16, "--steps", "fixed:1:2"]
        + ["--no-mkldnn", "--threads", 1, "--device", "cpu", "--db", tmp_path / "r.db", "--json"]
    )
    result = json.loads(out)
    assert code == 0 and result["case"]["mkldnn"] is False and result["case"]["threads"] == 1
    m = result["metrics"]
    assert m["mkldnn_enabled"] is False and m["threads"] == 1
    # without oneDNN the convolutions are PyTorch's own kernels
    names = " ".join(op["name"] for op in m["top_ops"])
    assert "mkldnn" not in names


def test_in_place_activations_are_restored():
    model = models.get("alexnet").build()
    relus = [m for m in model.modules() if isinstance(m, torch.nn.ReLU)]
    relu = torch.nn.functional.relu
    with out_of_place_activations(model):
        assert not any(m.inplace for m in relus)
        assert torch.nn.functional.relu is not relu
    assert all(m.inplace for m in relus) and torch.nn.functional.relu is relu


def test_host_to_device_time_is_the_copy_alone(monkeypatch):
    from trainperf.profile import breakdown

    def no_clone(self, *args, **kwargs):
        raise AssertionError("a clone inside the timed copy")

    copies = []
    copy_ = torch.Tensor.copy_
    monkeypatch.setattr(torch.Tensor, "clone", no_clone)
    monkeypatch.setattr(
        torch.Tensor, "copy_", lambda self, src, **kw: copies.append(1) or copy_(self, src, **kw)
    )
    assert breakdown._data_ms(torch.ones(4, 3, 8, 8), torch.device("cpu"), steps=3) >= 0
    assert len(copies) == 3
