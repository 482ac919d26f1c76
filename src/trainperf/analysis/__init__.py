"""Analysis of models and results: FLOPs, utilization, (later) scaling and comparisons."""
