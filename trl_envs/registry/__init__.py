"""Env kinds by name, env rows and their validation, envs as Hugging Face datasets."""
