import pytest
from torch import nn

from trainperf import models
from trainperf.analysis.peaks import peak_flops
from trainperf.models.flops import analyse, count_flops
from trainperf.models.spec import ImageClassification, ModelSpec


def tiny_spec(factory, size=4, classes=10):
    return ModelSpec(
        name="tiny",
        family="test",
        task=ImageClassification(classes),
        factory=factory,
        natural_size=size,
        min_size=1,
    )


def test_linear_flops_by_hand():
    # Flatten 3*4*4=48 -> 10: forward 2*48*10 per sample. Backward: weight grad 2*48*10;
    # no input grad (the images need none).
    spec = tiny_spec(lambda: nn.Sequential(nn.Flatten(), nn.Linear(48, 10)))
    f = count_flops(spec)
    assert f.fwd_flops_per_sample == 2 * 48 * 10
    assert f.train_flops_per_sample == 2 * 48 * 10 * 2


def test_conv_then_linear_flops_by_hand():
    # conv 3->8, 3x3, pad 1 on 4x4: 2 * (8*4*4 outputs) * (3*3*3 MACs) = 6912 per sample;
    # linear 128->10: 2*128*10 = 2560. Backward: conv weight grad 6912 (no input grad),
    # linear weight grad 2560 and input grad 2560.
    def net():
        return nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(128, 10)
        )

    f = count_flops(tiny_spec(net))
    assert f.fwd_flops_per_sample == 6912 + 2560
    assert f.train_flops_per_sample == (6912 + 2560) + 6912 + 2 * 2560


# torchvision's published multiply-accumulates per 224x224 image (shared/reference/models.md)
@pytest.mark.parametrize(
    "name,gmacs", [("alexnet", 0.71), ("resnet18", 1.81), ("resnet50", 4.09), ("vgg16", 15.47)]
)
def test_forward_flops_match_published_macs(name, gmacs):
    f = count_flops(models.get(name))
    assert f.fwd_flops_per_sample == pytest.approx(2 * gmacs * 1e9, rel=0.01)


def test_analyse_fields_and_no_real_weights():
    a = analyse(models.get("gpt2-small"), 128)
    assert a.params == 124_439_808
    assert a.size == 128 and a.tokens_per_sample == 128
    assert a.grad_bytes_fp32 == 4 * a.trainable_params
    assert a.grad_bytes_bf16 == 2 * a.trainable_params
    assert a.flops_per_param == pytest.approx(a.train_flops_per_sample / a.params)
    # a transformer's training costs about 3 x forward
    assert a.train_flops_per_sample == pytest.approx(3 * a.fwd_flops_per_sample, rel=0.02)


def test_peaks_match_exact_names_only():
    h200 = peak_flops("NVIDIA H200", "bf16")
    assert h200.flops_per_s == 989e12 and "H200" in h200.source
    assert peak_flops("NVIDIA H200", "fp32").flops_per_s == 67e12
    # an H200 NVL is a different part: no borrowed peak
    assert peak_flops("NVIDIA H200 NVL", "bf16").flops_per_s is None
    v100 = peak_flops("Tesla V100-SXM2-32GB", "bf16")
    assert v100.flops_per_s is None and "no bf16" in v100.absent_reason
    cpu = peak_flops("Intel(R) Xeon(R) Platinum 8480", "fp32")
    assert cpu.flops_per_s is None and "no training peak" in cpu.absent_reason
    # the training peak, FP32 accumulation: not the data sheet's FP16-accumulate 107
    assert peak_flops("NVIDIA GeForce RTX 2080 Ti", "fp16").flops_per_s == pytest.approx(53.8e12)
