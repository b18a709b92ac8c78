"""Gymnasium bridge: spaces as text, one Gymnasium episode as an Env, SB3-shaped evaluation."""
