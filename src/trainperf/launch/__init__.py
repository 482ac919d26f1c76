"""How processes start, end and are cleaned up: the child-process runner and its job
folders, the worker inside each child, sweeps, the largest-batch search, the
sequential-equivalence check and Slurm scripts.
"""
