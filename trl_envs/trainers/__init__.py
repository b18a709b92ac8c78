"""Trainers: EnvGRPOTrainer and EnvDPOTrainer, their configs, and the one seam to TRL's internals."""
