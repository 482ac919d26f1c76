"""Time to accuracy: train on real data until a target quality, MLPerf-style timing.

``trainer.train(TrainConfig(...))`` runs one training to its target; ``schedule`` parses
learning-rate schedules.
"""
