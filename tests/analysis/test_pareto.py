"""The Pareto front of known points."""

from trainperf.analysis.pareto import dominates, front, pareto_fronts


def test_dominance_and_front_of_known_points():
    assert dominates((10, 100), (9, 100)) and dominates((10, 90), (10, 100))
    assert not dominates((10, 100), (10, 100))  # equal: neither dominates
    assert not dominates((12, 150), (10, 100))  # faster but hungrier: a trade-off
    points = [(10, 100), (12, 150), (9, 120), (5, 40), (12, 160), (5, 40)]
    # (9,120) is beaten by (10,100); (12,160) by (12,150); the equal (5,40) are both kept
    assert front(points) == [0, 1, 3, 5]


def result(rid, model, samples_per_s, power_w, host="a", batch=32, precision="fp32"):
    metrics = {"samples_per_s_median": samples_per_s, "image_size": 224}
    if power_w is not None:
        metrics |= {"average_power_w": power_w, "samples_per_s_per_w": samples_per_s / power_w}
    return {
        "id": rid,
        "status": "ok",
        "case": {"model": model, "batch_size": batch, "precision": precision, "device": "cuda"},
        "metrics": metrics,
        "system": {"fingerprint": host, "hostname": host},
    }


def test_fronts_per_network_leave_out_results_without_energy():
    fronts = pareto_fronts(
        [
            result(1, "alexnet", 1000, 300),
            result(2, "alexnet", 800, 350, host="b"),  # slower and hungrier: dominated
            result(3, "alexnet", 1500, 600, batch=256),
            result(4, "resnet50", 400, 250),
            result(5, "resnet50", 300, None),  # no energy reading
        ]
    )
    alexnet, resnet = fronts["fronts"]
    assert alexnet["model"] == "alexnet" and alexnet["size"] == 224
    assert [(p["result_id"], p["on_front"]) for p in alexnet["points"]] == [
        (2, False),
        (1, True),
        (3, True),
    ]
    assert [p["result_id"] for p in resnet["points"]] == [4] and resnet["points"][0]["on_front"]
    assert fronts["left_out"] == 1 and "no average power" in fronts["left_out_reason"]
