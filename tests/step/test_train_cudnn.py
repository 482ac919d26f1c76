"""cuDNN autotuning: on for image models on CUDA, recorded, and switched off on request."""

import pytest
import torch

from trainperf import models
from trainperf.case.spec import CaseError, check_case, make_case
from trainperf.step.training_step import set_cudnn_benchmark
from trainperf.system.inventory import device_capabilities


@pytest.fixture(autouse=True)
def restore_cudnn_benchmark(monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)


def cuda_case(model="resnet18", **fields):
    return make_case(model=model, batch_size=4, device="cuda", **fields)


def test_cnn_case_on_cuda_autotunes_by_default():
    case = cuda_case()
    assert case.cudnn_benchmark is True
    set_cudnn_benchmark(models.get("resnet18"), case, torch.device("cuda"))
    assert torch.backends.cudnn.benchmark is True


def test_the_switch_turns_it_off_and_shows_in_the_label():
    case = cuda_case(cudnn_benchmark=False)
    torch.backends.cudnn.benchmark = True
    set_cudnn_benchmark(models.get("resnet18"), case, torch.device("cuda"))
    assert torch.backends.cudnn.benchmark is False
    assert "no-cudnn-benchmark" in case.label()


def test_language_models_and_the_cpu_do_not_autotune():
    set_cudnn_benchmark(models.get("gpt2-small"), cuda_case("gpt2-small"), torch.device("cuda"))
    assert torch.backends.cudnn.benchmark is False
    cpu = make_case(model="resnet18", batch_size=4)
    set_cudnn_benchmark(models.get("resnet18"), cpu, torch.device("cpu"))
    assert torch.backends.cudnn.benchmark is False


def test_switching_it_off_on_the_cpu_is_a_case_error():
    case = make_case(model="cifarnet", batch_size=4, cudnn_benchmark=False)
    with pytest.raises(CaseError, match="cudnn_benchmark false .* applies to cuda only"):
        check_case(case, device_capabilities({"gpus": []}))


def test_the_run_flag_reaches_the_case(run_cli, tmp_path):
    db = tmp_path / "t.db"
    code, _, err = run_cli(
        f"run --model cifarnet --batch-size 4 --device cpu --no-cudnn-benchmark --db {db}"
    )
    assert code == 2 and "cudnn_benchmark false" in err
