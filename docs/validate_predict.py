"""Predictions of `trainperf predict` against published measurements (docs/predict.md).

Run: .venv/bin/python docs/validate_predict.py  (prints the Markdown rows of the table)

Each point is a measurement listed, with its source, in docs/predict-sources.md. Two
predictions per point:
  - per-GPU throughput from the catalog alone (data-sheet peak x the catalog's default
    achieved fraction): tests the compute model;
  - N-GPU scaling efficiency given the measured single-GPU throughput
    (--single-device-throughput): tests the communication model alone.

After the table, a summary puts the model beside two trivial guesses (``summary``):
"scaling is perfect" (efficiency 1, per-GPU throughput at N GPUs = the measured 1-GPU
throughput) and "the mean of the other rows" (leave-one-out: each row is guessed from the
others' measured values alone). A model that does not beat both is not yet a model.
Reported: mean absolute error of efficiency (points) and median absolute relative error of
per-GPU throughput at N GPUs (rows with a measured 1-GPU and N-GPU throughput).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from trainperf.predict.catalog import load_catalog
from trainperf.predict.model import predict

# id, model, size, device, precision, batch/GPU, GPUs, per node, intra, inter,
# measured 1-GPU throughput, measured N-GPU throughput (None: efficiency given instead),
# measured efficiency
POINTS = [
    ("dle-tf-rn50-dgx1-fp32", "resnet50", 224, "v100-sxm2-16gb", "fp32", 128, 8, 8,
     "nvlink2", None, 412, 3170, None),
    ("dle-tf-rn50-dgx1-amp", "resnet50", 224, "v100-sxm2-16gb", "fp16", 256, 8, 8,
     "nvlink2", None, 1270, 9510, None),
    ("dle-tf-rn50-dgx2-amp", "resnet50", 224, "v100-sxm2-32gb", "fp16", 256, 16, 16,
     "nvswitch-v100", None, 1300, 17250, None),
    ("dle-pyt-rn50-dgxa100-tf32", "resnet50", 224, "a100-sxm4-80gb", "tf32", 256, 8, 8,
     "nvlink3", None, 938, 7248, None),
    ("dle-pyt-rn50-dgxa100-amp", "resnet50", 224, "a100-sxm4-80gb", "fp16", 256, 8, 8,
     "nvlink3", None, 2470, 16621, None),
    ("goyal17-rn50-bigbasin", "resnet50", 224, "p100-sxm2-16gb", "fp32", 32, 256, 8,
     "nvlink1", "ethernet-50g", None, None, 0.90),
    ("horovod17-16gpu-rdma-resnet101", "resnet101", 224, "p100-pcie-16gb", "fp32", 64, 16, 4,
     "pcie3", "roce-25g", 119.4, 1746.2, None),
    ("horovod17-16gpu-rdma-vgg16", "vgg16", 224, "p100-pcie-16gb", "fp32", 64, 16, 4,
     "pcie3", "roce-25g", 130.9, 1787.4, None),
    ("horovod17-16gpu-tcp-vgg16", "vgg16", 224, "p100-pcie-16gb", "fp32", 64, 16, 4,
     "pcie3", "ethernet-25g", 130.9, 1308.7, None),
    ("horovod17-64gpu-40g-inception3", "inception_v3", 299, "p100-pcie-16gb", "fp32", 64, 64, 4,
     "pcie3", "ethernet-40g", 148.8, 7932.1, None),
    ("horovod17-64gpu-40g-vgg16", "vgg16", 224, "p100-pcie-16gb", "fp32", 64, 64, 4,
     "pcie3", "ethernet-40g", 149.6, 6084.2, None),
    ("dell-readyai-32gpu-tf-fp32", "resnet50", 224, "v100-pcie-16gb", "fp32", 64, 32, 4,
     "pcie3", "ib-edr", None, None, 0.688),
]


@dataclass(frozen=True)
class Row:
    """One point: measured and predicted efficiency, and per-GPU throughput at N GPUs
    (measured, and predicted by the model; None where the source gives no throughput)."""

    efficiency: float
    predicted_efficiency: float
    per_gpu: float | None = None
    one_gpu: float | None = None  # measured 1-GPU throughput
    predicted_per_gpu: float | None = None


def leave_one_out_means(values: Sequence[float]) -> list[float]:
    """For each value, the mean of all the others."""
    total, n = sum(values), len(values)
    return [(total - v) / (n - 1) for v in values]


def mean_absolute(errors: Sequence[float]) -> float:
    return statistics.fmean(abs(e) for e in errors)


def median_absolute(errors: Sequence[float]) -> float:
    return statistics.median(abs(e) for e in errors)


def summary(rows: Sequence[Row]) -> dict[str, dict[str, float]]:
    """Efficiency MAE (points) and per-GPU throughput median |relative error| of the model
    and of the two trivial guesses (module docstring)."""
    measured = [r.efficiency for r in rows]
    others = leave_one_out_means(measured)
    efficiency = {
        "model": mean_absolute([(r.predicted_efficiency - r.efficiency) * 100 for r in rows]),
        "perfect scaling": mean_absolute([(1 - e) * 100 for e in measured]),
        "mean of the other rows": mean_absolute(
            [(o - e) * 100 for o, e in zip(others, measured, strict=True)]
        ),
    }
    rated = [r for r in rows if r.per_gpu is not None and r.one_gpu is not None]
    per_gpu = [r.per_gpu for r in rated]
    throughput = {
        "model": median_absolute([r.predicted_per_gpu / r.per_gpu - 1 for r in rated]),
        "perfect scaling": median_absolute([r.one_gpu / r.per_gpu - 1 for r in rated]),
        "mean of the other rows": median_absolute(
            [o / m - 1 for o, m in zip(leave_one_out_means(per_gpu), per_gpu, strict=True)]
        ),
    }
    return {"efficiency MAE (points)": efficiency, "per-GPU throughput at N, median abs. error": throughput}


def main() -> None:
    catalog = load_catalog()
    rows = []
    print("| id | model | system | measured 1-GPU | predicted 1-GPU | error | measured "
          "efficiency | predicted efficiency | error (points) |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for (key, model, size, device_id, precision, batch, n, per_node, intra_id, inter_id,
         one, many, efficiency) in POINTS:
        device = catalog.device(device_id)
        intra = catalog.link(intra_id)
        inter = catalog.link(inter_id) if inter_id else None
        alone = predict(model, device, [1], per_node, intra, inter, batch, precision, size=size)
        predicted_one = alone["rows"][0]["samples_per_s"]
        measured_eff = efficiency if efficiency is not None else many / (n * one)
        scaled = predict(model, device, [1, n], per_node, intra, inter, batch, precision,
                         single_device_throughput=one or predicted_one, size=size)
        predicted_eff = scaled["rows"][-1]["efficiency"]
        system = f"{n} x {device_id}, {per_node}/node, {intra_id}" + (
            f" + {inter_id}" if inter_id else "")
        one_text = f"{one:,.0f}" if one else "-"
        error = f"{predicted_one / one - 1:+.0%}" if one else "-"
        print(f"| `{key}` | {model} {precision} b{batch} | {system} | {one_text} | "
              f"{predicted_one:,.0f} | {error} | {measured_eff:.1%} | {predicted_eff:.1%} | "
              f"{(predicted_eff - measured_eff) * 100:+.1f} |")
        per_gpu = many / n if many else None
        predicted_per_gpu = one * predicted_eff if one else None
        rows.append(Row(measured_eff, predicted_eff, per_gpu, one, predicted_per_gpu))
    print()
    print("| over the rows | model | perfect scaling | mean of the other rows |")
    print("| --- | ---: | ---: | ---: |")
    for name, scores in summary(rows).items():
        unit = "{:.1f}" if "points" in name else "{:.1%}"
        cells = " | ".join(unit.format(v) for v in scores.values())
        print(f"| {name} | {cells} |")


if __name__ == "__main__":
    main()
