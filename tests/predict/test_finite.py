"""The predictor answers every input its bounds let through with finite numbers, and
refuses the rest (trainperf.core.limits) with PredictError, NaN included."""

import math

import pytest
from predict_inputs import predict_ddp, predict_sharded

from trainperf.core.limits import ACHIEVED_FRACTION_MIN, MAX_COUNT, THROUGHPUT_MAX, THROUGHPUT_MIN
from trainperf.core.strict_json import dumps
from trainperf.predict.catalog_file import load_catalog
from trainperf.predict.inputs import PredictError, finite_prediction

CATALOG = load_catalog()
ARGS = dict(
    model="gpt2-small",
    device=CATALOG.device("h100-sxm"),
    devices=[1, 8, MAX_COUNT - MAX_COUNT % 8],
    per_node=8,
    intra=CATALOG.link("nvlink4"),
    inter=CATALOG.link("ib-ndr"),
    batch_size=MAX_COUNT,
    precision="fp32",
)


@pytest.mark.parametrize("run", [predict_ddp, predict_sharded])
@pytest.mark.parametrize(
    "compute",
    [
        {"achieved_fraction": ACHIEVED_FRACTION_MIN},
        {"single_device_throughput": THROUGHPUT_MIN},
        {"single_device_throughput": THROUGHPUT_MAX},
    ],
)
def test_the_extremes_the_bounds_allow_give_finite_numbers(run, compute):
    prediction = run(**ARGS, **compute)
    dumps(prediction)  # raises on NaN or infinity under TRAINPERF_STRICT_JSON (conftest)
    assert all(math.isfinite(r["step_s"]) and r["samples_per_s"] > 0 for r in prediction["rows"])


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"achieved_fraction": 1e-320}, "achieved fraction must be from 1e-06 to 1"),
        ({"achieved_fraction": math.nan}, "achieved fraction"),
        ({"single_device_throughput": math.inf}, "single-device throughput must be from"),
        ({"single_device_throughput": math.nan}, "single-device throughput"),
        ({"single_device_throughput": 1e-320}, "single-device throughput"),
        ({"bucket_mb": 1e-320}, "bucket size must be from 0.0625 to 1048576 MiB"),
        ({"bucket_mb": math.nan}, "bucket size"),
    ],
)
def test_inputs_outside_the_bounds_are_refused(inputs, message):
    with pytest.raises(PredictError, match=message):
        predict_ddp(**ARGS, **inputs)


def test_a_prediction_holding_an_infinity_is_refused_with_where_it_is():
    with pytest.raises(PredictError, match=r"rows\[0\]\.step_s: inf is not a finite number"):
        finite_prediction({"rows": [{"step_s": math.inf}]})
