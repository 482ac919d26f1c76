"""What to measure and what became of it: a case (model, batch, precision, devices,
parallel mode), suites of cases, precisions and parallel modes, a training run's
configuration, and the outcome records of a case's runs.
"""
