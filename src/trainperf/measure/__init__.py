"""Measurement: step policies, timers, the measured loop, statistics, memory probes."""
