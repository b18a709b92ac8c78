"""Training data: trajectories into rows, advantages, per-turn credit, preference pairs."""
