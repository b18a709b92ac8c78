"""TRL's warnings that repeat every step in env training, replaced by one line of our own.

TRL's ``GRPOTrainer`` logs ``All reward functions returned None for the following kwargs: ...`` with the whole row
(prompt, completion and every extra field) each step in which some row has no reward. In env training a row has no
reward when its group was skipped after env errors, which the rollout metrics (``env/all/errors/*``,
``env/all/skipped_groups``) and the training-health watchdog already report: :func:`replace_trl_reward_none_warning`
turns TRL's block into one line saying so.
"""

from __future__ import annotations

import logging

TRL_GRPO_LOGGER = "trl.trainer.grpo_trainer"
REWARD_NONE_PREFIX = "All reward functions returned None"
REWARD_NONE_LINE = (
    "trl_envs: a row had no reward (its group was skipped after env errors, see env/all/errors/* in the logs); "
    "it is not trained"
)


class _RewardNoneFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        # accelerate's logger adapter may have prefixed the message with "[RANK n] "
        if isinstance(record.msg, str) and REWARD_NONE_PREFIX in record.msg.split("\n", 1)[0]:
            record.msg, record.args = REWARD_NONE_LINE, None
        return True


def replace_trl_reward_none_warning() -> None:
    """Install the filter on TRL's GRPO logger (once per process; idempotent)."""
    log = logging.getLogger(TRL_GRPO_LOGGER)
    if not any(isinstance(f, _RewardNoneFilter) for f in log.filters):
        log.addFilter(_RewardNoneFilter())
