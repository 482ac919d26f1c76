"""Shared by every layer and importing nothing heavy: the ranges of numbers trainperf accepts
(limits), strict JSON (no NaN or Infinity), and atomic file writing.
"""
