"""Rollouts: episodes and groups run concurrently, one batched sampler call per turn, metrics, evaluation."""
