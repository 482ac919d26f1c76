"""Every figure a report shows, in report order: the figures of results
(trainperf.report.figures_cases, figures, figures_speedup, figures_frameworks and
figures_energy) and of micro-benchmark runs (trainperf.report.figures_micro,
figures_layers and figures_profile), with unique keys."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trainperf.analysis.scaling import scaling_rows
from trainperf.report import figures_layers, figures_micro, figures_profile, figures_speedup
from trainperf.report.figure_kit import Figure, hostname, unique_keys
from trainperf.report.figures import batch_figures, devices_figures
from trainperf.report.figures_cases import case_figures
from trainperf.report.figures_energy import energy_figures, power_figures
from trainperf.report.figures_frameworks import framework_figures


def all_figures(
    results: Sequence[dict[str, Any]],
    micro_runs: Sequence[dict[str, Any]],
    hostnames: Mapping[str, str] | None = None,
) -> list[Figure]:
    """Every figure the data supports, in report order.

    ``hostnames`` maps system fingerprints to hostnames for the micro runs (which carry
    only the fingerprint); by default it is taken from the results' system records.
    """
    names = {r["system"]["fingerprint"]: hostname(r) for r in results} | dict(hostnames or {})
    scaled = scaling_rows(results)  # one reading of the scaling rows for both kinds
    figures = case_figures(results) + devices_figures(results, scaled)
    figures += figures_speedup.speedup_figures(results)
    figures += framework_figures(results, scaled)
    figures += figures_speedup.precision_figures(results)
    figures += batch_figures(results)
    figures += figures_micro.profile_figures(micro_runs, names)
    figures += figures_layers.layer_figures(micro_runs, names)
    figures += figures_profile.profile_scaling_figures(micro_runs, names)
    figures += figures_micro.collective_figures(micro_runs, names)
    figures += figures_micro.gemm_figures(micro_runs, names)
    figures += power_figures(results) + energy_figures(results)
    return unique_keys(figures)
