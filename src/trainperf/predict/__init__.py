"""Performance prediction: a training step's time from a hardware catalog and a model."""
