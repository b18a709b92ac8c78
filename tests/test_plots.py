"""Training curves: which logged metrics are plotted, the PNG, and skipping when nothing was logged."""

from __future__ import annotations

import json

import pytest

from trl_envs.hub.plots import metric_series, plot_training_curves

# As the Trainer logs it for EnvGRPOTrainer: a dict per logging step, evaluation logs and a final summary.
LOG_HISTORY = [
    {"step": 1, "loss": 0.01, "entropy": 0.93, "env/all/reward/total": 0.10, "reward": 0.10},
    {"step": 2, "loss": 0.02, "entropy": 0.88, "env/all/reward/total": 0.25, "reward": 0.25},
    {"step": 2, "eval_env/all/reward/total": 0.30},
    {"step": 3, "loss": 0.00, "entropy": 0.80, "env/all/reward/total": 0.40, "reward": 0.40},
    {"step": 3, "train_runtime": 12.0, "train_loss": 0.01},
]


def test_metric_series_takes_the_first_logged_key():
    assert metric_series(LOG_HISTORY, ["missing", "env/all/reward/total", "reward"]) == (
        "env/all/reward/total",
        [1, 2, 3],
        [0.10, 0.25, 0.40],
    )
    assert metric_series(LOG_HISTORY, ["eval_env/all/reward/total"]) == ("eval_env/all/reward/total", [2], [0.30])
    assert metric_series(LOG_HISTORY, ["rewards/margins"]) is None


def test_png_from_a_log_history_file(tmp_path):
    from matplotlib.image import imread

    log_file = tmp_path / "log_history.json"
    log_file.write_text(json.dumps(LOG_HISTORY))
    png = tmp_path / "training_curves.png"
    assert plot_training_curves(log_file, png, title="GRPO on arithmetic") == str(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    two_panels = imread(png).shape[0]
    reward_only = tmp_path / "reward_only.png"
    plot_training_curves([{k: v for k, v in h.items() if k != "entropy"} for h in LOG_HISTORY], reward_only)
    assert imread(reward_only).shape[0] < two_panels  # one panel when no entropy was logged


def test_nothing_to_plot_warns_and_writes_nothing(tmp_path):
    png = tmp_path / "curves.png"
    with pytest.warns(UserWarning, match="no reward .* or entropy was logged"):
        assert plot_training_curves([{"step": 1, "loss": 0.5}], png) is None
    assert not png.exists()


def test_running_mean_averages_the_last_window_values():
    from trl_envs.hub.plots import running_mean

    assert running_mean([1.0, 2.0, 3.0, 4.0, 10.0], 3) == pytest.approx([1.0, 1.5, 2.0, 3.0, 17 / 3])
