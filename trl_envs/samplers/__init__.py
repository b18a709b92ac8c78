"""Samplers: a batch of token prompts in, sampled actions with logprobs out (HF, vLLM, scripted)."""
