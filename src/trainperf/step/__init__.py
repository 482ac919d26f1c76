"""What one process measures: the training step (model, optimizer, precision, wrapping)
and the benchmark of one case, in one process or on one torchrun rank.
"""
