# Copyright the trl_envs authors. Apache-2.0.
"""Train a language model with GRPO on an environment.

    python scripts/train_grpo.py                                    # arithmetic, offline tiny model, CPU
    python scripts/train_grpo.py --config scripts/configs/guess_number.yaml
    accelerate launch scripts/train_grpo.py --env guess_number --model_name_or_path Qwen/Qwen2.5-0.5B-Instruct
    accelerate launch --config_file accelerate_configs/zero2.yaml scripts/train_grpo.py --use_peft
    python scripts/train_grpo.py --env_dataset my_env_rows/         # a dataset of env rows (docs/envs_as_datasets.md)
    python scripts/train_grpo.py --use_peft --push_to_hub --hub_model_id you/tiny-grpo-arithmetic
    python scripts/train_grpo.py --reward_funcs my_rewards:brevity --reward_weights 1.0 0.2  # env reward + yours

Every ``EnvGRPOConfig`` (i.e. TRL ``GRPOConfig``) and ``ModelConfig`` flag works, on the command line or in a YAML
``--config``. With no arguments the defaults below train the offline tiny model on ``arithmetic`` in a few minutes
on a laptop CPU, printing one line per step with the env reward. After training, the output directory also gets
the training curves, the env evaluation before/after training and a model card (``--card_eval false`` skips the
evaluation); ``--push_to_hub`` uploads it (docs/hub_and_eval.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trl_envs.errors.versions import check_installed_versions

check_installed_versions()  # before TRL loads: a TRL, transformers or torch outside pyproject's ranges is one line

from transformers import PrinterCallback
from trl import ModelConfig, get_peft_config

from trl_envs import EnvGRPOConfig, EnvGRPOTrainer
from trl_envs.cli import training_script
from trl_envs.cli.training_script import EnvArguments, load_tokenizer, make_envs
from trl_envs.hub.publish import PublishArguments, publish_run, save_run, take_over_push
from trl_envs.registry import parse_env_kwargs
from trl_envs.trainers.progress import RewardProgressCallback, use_step_progress
from trl_envs.trainers.resume import resume_option
from trl_envs.trainers.reward_funcs import load_reward_func


@dataclass
class ScriptArguments(EnvArguments):
    """What to train on (the model comes from ``ModelConfig``, the training from ``EnvGRPOConfig``): the env
    options of :class:`~trl_envs.cli.training_script.EnvArguments` (default: ``arithmetic`` with
    ``DEFAULT_ENV_KWARGS``) and ``groups_per_batch``, the env groups per ``RLDataset`` batch (env by name)."""

    groups_per_batch: int = field(default=16, metadata={"help": "Env groups per RLDataset batch."})
    reward_funcs: list[str] | None = field(
        default=None,
        metadata={
            "help": "Rewards beside the env's, as in TRL's GRPO script: module:function or module.function (a "
            "module in the working directory or installed), TRL's think_format_reward / accuracy_reward / "
            "reasoning_accuracy_reward, or a reward model (a folder or a Hub id). The env's reward is named 'env' "
            "and comes first in --reward_weights."
        },
    )
    reward_model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "A reward model (Hub id or folder) scoring each episode, as in TRL's GRPO script."},
    )


# The default run is the recipe scripts/configs/arithmetic.yaml (a test keeps the two the same): sums of operands
# 0..9, a fifth of the questions held out of training for the card's evaluation (its learning curve:
# docs/benchmarks.md, bench/learning.py --rows arithmetic).
DEFAULT_ENV_KWARGS = {"arithmetic": {"max_operand": 9, "held_out_fraction": 0.2}}

# Defaults that make `python scripts/train_grpo.py` a short, visible CPU run. Any of them can be overridden.
CPU_FRIENDLY_DEFAULTS = dict(
    learning_rate=1e-3,
    lr_scheduler_type="linear",
    warmup_steps=10,
    num_generations=8,
    per_device_train_batch_size=128,
    gradient_accumulation_steps=1,
    max_steps=150,
    max_completion_length=16,
    max_turns=8,
    temperature=1.0,
    beta=0.0,
    logging_steps=1,
    disable_tqdm=True,
    save_strategy="no",
    report_to="none",
    activation_checkpointing=False,
    seed=0,
)


def main(
    script_args: ScriptArguments,
    training_args: EnvGRPOConfig,
    model_args: ModelConfig,
    publish_args: PublishArguments | None = None,
) -> None:
    """Train with GRPO on the env of ``script_args``, save, then evaluate, write the model card and push
    (``publish_args``)."""
    script_args.check()
    publish_args = publish_args or PublishArguments()
    push = take_over_push(training_args)  # pushed once at the end, with our model card (step 5)
    checkpoint = resume_option(training_args)

    # 1. The model: a hub id or a path; by default the offline tiny chat model (it ships with trl_envs).
    model_path, tokenizer = load_tokenizer(model_args, script_args.tiny_model)

    # 2. The environment: an env by name (its dataset builder, groups of num_generations envs), or a dataset of env
    #    rows (one group per row; the trainer turns it into an RLDataset). The training seed also picks the training
    #    problems and their order (envs that take a `seed`); the held-out test problems stay the same.
    env_kwargs = None if script_args.env_dataset else env_options(script_args)  # rows: the card evaluates each kind
    env_builder, env_names = make_envs(
        script_args,
        tokenizer,
        env_name=script_args.env_name or "arithmetic",
        env_kwargs=env_kwargs or {},
        group_size=training_args.num_generations,
        groups_per_batch=script_args.groups_per_batch,
        seed=training_args.seed,
    )

    # 3. GRPO on it: the env's reward, plus any reward functions and reward model named (TRL's own flags).
    reward_funcs = [load_reward_func(spec) for spec in script_args.reward_funcs or []]
    if script_args.reward_model_name_or_path:
        reward_funcs.insert(0, script_args.reward_model_name_or_path)
    trainer = EnvGRPOTrainer(
        model=model_path,
        args=training_args,
        env_dataset=env_builder,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
        callbacks=[RewardProgressCallback()],
        reward_funcs=reward_funcs,
    )
    trainer.remove_callback(PrinterCallback)  # one compact line per step instead of the full metrics dict
    use_step_progress(trainer, publish_args.progress)  # step N/total, elapsed, ETA (on a terminal, or --progress true)
    trainer.train(resume_from_checkpoint=checkpoint)

    # 4. Save the model (or adapter) and the metrics.
    save_run(trainer, tokenizer)

    # 5. Training curves, evaluation before/after, model card; push to the Hub with --push_to_hub.
    publish_run(
        trainer,
        base_model=model_path,
        algorithm="grpo",
        envs=env_names,
        push=push,
        publish_args=publish_args,
        env_kwargs=env_kwargs,
        script_args=script_args,
        model_args=model_args,
    )


def env_options(script_args: ScriptArguments) -> dict:
    """The options of the env by name: ``--env_kwargs``, else ``DEFAULT_ENV_KWARGS`` of that env."""
    if script_args.env_kwargs is None:
        return dict(DEFAULT_ENV_KWARGS.get(script_args.env_name or "arithmetic", {}))
    return parse_env_kwargs(script_args.env_kwargs)


def make_parser(subparsers=None, demo_defaults: bool = True):
    """The command line and YAML ``--config`` parser (script, training, model and publishing arguments), with the CPU
    defaults above (``demo_defaults=False``: without them; ``parse_args`` adds them for the demo model only)."""
    return training_script.make_parser(
        (ScriptArguments, EnvGRPOConfig, ModelConfig, PublishArguments),
        CPU_FRIENDLY_DEFAULTS,
        subparsers=subparsers,
        command="grpo",
        help="Train with GRPO on an env",
        demo_defaults=demo_defaults,
    )


def parse_args(argv: list[str] | None = None, parser=None, report: bool = True):
    """Parse the command line (``argv``, default ``sys.argv[1:]``) and ``--config``: the demo model gets the CPU
    defaults above, any other model TRL's defaults plus the env's token budgets (``trl_envs.run_defaults``). Prints
    the settings chosen and where each came from (``report``); returns ``(parser, (script, training, model, publish
    args), settings)``."""
    parser = parser or make_parser(demo_defaults=False)
    return training_script.parse_args(
        parser, CPU_FRIENDLY_DEFAULTS, argv, report=report, algorithm="grpo", env_default="arithmetic"
    )


if __name__ == "__main__":  # checks before any model loads; mistakes and signals end in one line, exit != 0
    training_script.main_entry("train_grpo.py", parse_args, main)
