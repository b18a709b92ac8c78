# Copyright the trl_envs authors. Apache-2.0.
"""Train a language model with DPO: on a preference dataset, or on preference pairs sampled from an environment.

    accelerate launch scripts/train_dpo.py                          # built-in arithmetic preferences, tiny model, CPU
    accelerate launch scripts/train_dpo.py --env arithmetic         # env-driven (iterative) DPO on an env
    python scripts/train_dpo.py --config scripts/configs/dpo_env_guess_number.yaml           # multi-turn env
    accelerate launch scripts/train_dpo.py --model_name_or_path Qwen/Qwen2.5-0.5B-Instruct \\
        --dataset_name trl-lib/ultrafeedback_binarized --beta 0.1 --learning_rate 1e-5 --num_train_epochs 3 \\
        --per_device_train_batch_size 2 --use_peft --lora_r 16

Preference data (offline DPO, exactly TRL's DPOTrainer): ``--dataset_name`` (a Hub id, a directory saved with
``datasets``' ``save_to_disk``, a dataset directory or a data file) or ``--data_files`` (json / jsonl / parquet / csv),
with ``prompt`` / ``chosen`` / ``rejected`` columns as text or chat messages. With neither, the built-in arithmetic
preference dataset (right vs wrong answers, shipped with trl_envs) is used.

Env-driven DPO: ``--env NAME`` (a built-in, registered or installed env), ``--env package.module:factory`` (a function
called as ``factory(renderer=..., **env_kwargs)``, plus ``group_size`` / ``batch_size`` / ``num_batches`` if it takes
them, returning an ``RLDataset`` or ``RLDatasetBuilder``), or ``--env_dataset`` (a dataset of env rows, one group per
row: Hub id, ``save_to_disk`` folder, data file or folder of data files). Each of ``num_rounds``
rounds samples ``groups_per_round`` groups of ``group_size`` trajectories with the current policy, pairs the best and
the worst of each group, and trains DPO on the pairs; one line per round shows the env reward of the policy.

Every ``EnvDPOConfig`` (i.e. TRL ``DPOConfig``) and ``ModelConfig`` flag works, on the command line or in a YAML
``--config`` (LoRA: ``--use_peft --lora_r 16``; with LoRA the reference model is the base model, adapter off).
After training the output directory also gets the training curves, an env evaluation before/after training (on the
training env, on the held-out ``arithmetic`` questions for the built-in preference data, or ``--card_eval_env``) and a
model card; ``--push_to_hub --hub_model_id you/name`` uploads it (docs/hub_and_eval.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from trl_envs.errors.versions import check_installed_versions

check_installed_versions()  # before TRL loads: a TRL, transformers or torch outside pyproject's ranges is one line

from transformers import PrinterCallback
from trl import ModelConfig, get_peft_config

from trl_envs import EnvDPOConfig, EnvDPOTrainer
from trl_envs.cli import training_script
from trl_envs.cli.training_script import EnvArguments, load_tokenizer, make_envs
from trl_envs.hub.publish import PublishArguments, publish_run, save_run, take_over_push
from trl_envs.registry import parse_env_kwargs
from trl_envs.registry.env_datasets import data_file_builder, is_saved_to_disk
from trl_envs.trainers.progress import RewardProgressCallback
from trl_envs.trainers.resume import resume_option
from trl_envs.training_data.preference_data import DATASET_NAME, HELD_OUT_ENV_KWARGS, load_preference_dataset


@dataclass
class ScriptArguments(EnvArguments):
    """What to train on (the model comes from ``ModelConfig``, the training from ``EnvDPOConfig``, whose
    ``group_size`` / ``groups_per_round`` group the envs): a preference dataset, or the env options of
    :class:`~trl_envs.cli.training_script.EnvArguments` for env-driven DPO.

    Args:
        dataset_name, dataset_config, data_files, dataset_train_split, dataset_test_split: offline DPO on a preference
            dataset (default: the built-in arithmetic preference dataset).
    """

    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "Preference dataset: Hub id, save_to_disk directory, dataset directory or "
            "data file (default: the built-in arithmetic preference dataset)."
        },
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Dataset configuration name (Hub datasets)."})
    data_files: list[str] | None = field(
        default=None, metadata={"help": "Preference data files (json, jsonl, parquet, csv), used as the train split."}
    )
    dataset_train_split: str = field(default="train", metadata={"help": "Split to train on."})
    dataset_test_split: str = field(default="test", metadata={"help": "Split to evaluate on (with --eval_strategy)."})

    @property
    def env_mode(self) -> bool:
        """Env-driven DPO (an env by name or a dataset of env rows) rather than a preference dataset."""
        return bool(self.env_name or self.env_dataset)

    def check(self) -> None:
        """Raise ``ValueError`` for options that do not go together or a bad ``--env_kwargs``."""
        super().check()
        if self.env_mode and (self.dataset_name or self.data_files):
            raise ValueError(
                "give either --env / --env_dataset (env-driven DPO) or a preference dataset "
                "(--dataset_name / --data_files)"
            )


# Defaults that make `python scripts/train_dpo.py` a short, visible CPU run. Any of them can be overridden.
CPU_FRIENDLY_DEFAULTS = dict(
    learning_rate=1e-4,
    beta=0.1,
    per_device_train_batch_size=8,
    gradient_accumulation_steps=1,
    num_train_epochs=2,
    num_rounds=10,
    max_tokens_per_turn=16,
    max_turns=8,
    logging_steps=8,
    disable_tqdm=True,
    save_strategy="no",
    report_to="none",
    activation_checkpointing=False,
    seed=0,
)


class DPOProgressCallback(RewardProgressCallback):
    """One compact line per Trainer log with the DPO metrics. In env mode, round logs and the end-of-round training
    summaries are skipped: EnvDPOTrainer prints its own line per round (env reward, pairs, loss, margin)."""

    def __init__(self, keys, env_mode: bool):
        super().__init__(keys)
        self.env_mode = env_mode

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and self.env_mode and ("round" in logs or "train_runtime" in logs):
            return
        return super().on_log(args, state, control, logs=logs, **kwargs)


PROGRESS_KEYS = (
    ("loss", "loss"),
    ("train_loss", "train_loss"),
    ("margin", "rewards/margins"),
    ("acc", "rewards/accuracies"),
    ("eval_loss", "eval_loss"),
    ("eval_margin", "eval_rewards/margins"),
)


def main(
    script_args: ScriptArguments,
    training_args: EnvDPOConfig,
    model_args: ModelConfig,
    publish_args: PublishArguments | None = None,
) -> None:
    """Train with DPO on the preference data or the env of ``script_args``, save, then evaluate, write the model card
    and push (``publish_args``)."""
    script_args.check()
    publish_args = publish_args or PublishArguments()
    push = take_over_push(training_args)  # pushed once at the end, with our model card (step 5)
    checkpoint = resume_option(training_args)
    trainer, model_path, env_names = make_trainer(script_args, training_args, model_args)
    tokenizer = trainer.processing_class
    trainer.train(resume_from_checkpoint=checkpoint)

    # 4. Save the model (or adapter) and the metrics.
    save_run(trainer, tokenizer)

    # 5. Training curves, evaluation before/after, model card; push to the Hub with --push_to_hub.
    builtin_data = not (script_args.env_mode or script_args.dataset_name or script_args.data_files)
    publish_run(
        trainer,
        base_model=model_path,
        algorithm="dpo",
        push=push,
        publish_args=publish_args,
        envs=env_names,
        env_kwargs=parse_env_kwargs(script_args.env_kwargs),
        eval_env="arithmetic" if builtin_data else None,
        # the built-in data asks only the training questions: the card scores the held-out ones
        eval_env_kwargs=HELD_OUT_ENV_KWARGS if builtin_data else None,
        datasets=[script_args.dataset_name]
        if script_args.dataset_name and not os.path.exists(script_args.dataset_name)
        else None,
        train_data=None if script_args.env_mode else describe_preference_data(script_args, trainer.train_dataset),
        script_args=script_args,
        model_args=model_args,
    )


def make_trainer(
    script_args: ScriptArguments, training_args: EnvDPOConfig, model_args: ModelConfig
) -> tuple[EnvDPOTrainer, str, list[str]]:
    """``(trainer, model path, env names)``: the model, the data and the ``EnvDPOTrainer`` of a run, ready to train
    (also used by bench/learning.py)."""
    # 1. The model: a hub id or a path; by default the offline tiny chat model (it ships with trl_envs).
    model_path, tokenizer = load_tokenizer(model_args, script_args.tiny_model)
    training_args.model_init_kwargs = {
        "revision": model_args.model_revision,
        "dtype": model_args.dtype,
        "attn_implementation": model_args.attn_implementation,
        **(training_args.model_init_kwargs or {}),
    }

    # 2. The data: preference pairs from a dataset, or envs whose rollouts are paired each round (an env by name, or
    #    a dataset of env rows the trainer groups), in groups of group_size, groups_per_round groups per batch.
    datasets, env_names = {}, []
    if script_args.env_mode:
        datasets["env_dataset"], env_names = make_envs(
            script_args,
            tokenizer,
            env_name=script_args.env_name,
            env_kwargs=parse_env_kwargs(script_args.env_kwargs),
            group_size=training_args.group_size,
            groups_per_batch=training_args.groups_per_round,
            seed=training_args.seed,
        )
    else:
        data = load_preference_splits(script_args)
        datasets["train_dataset"] = pick_split(data, script_args.dataset_train_split, "training")
        if training_args.eval_strategy != "no":
            datasets["eval_dataset"] = pick_split(data, script_args.dataset_test_split, "evaluation")

    # 3. DPO on it. The reference model is the initial policy (with LoRA: the base model, adapter off).
    trainer = EnvDPOTrainer(
        model=model_path,
        args=training_args,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
        callbacks=[DPOProgressCallback(PROGRESS_KEYS, env_mode=script_args.env_mode)],
        **datasets,
    )
    trainer.remove_callback(PrinterCallback)  # one compact line per log instead of the full metrics dict
    return trainer, model_path, env_names


def load_preference_splits(args: ScriptArguments):
    """The preference data as a ``DatasetDict`` (or a ``Dataset``, taken as the train split)."""
    from datasets import load_dataset, load_from_disk

    if args.data_files:
        return load_dataset(
            data_file_builder(args.data_files, "--data_files"), data_files={args.dataset_train_split: args.data_files}
        )
    name = args.dataset_name
    if name is None:
        return load_preference_dataset()
    if is_saved_to_disk(name):
        return load_from_disk(name)
    if os.path.isfile(name):
        return load_dataset(data_file_builder([name], "--dataset_name"), data_files={args.dataset_train_split: [name]})
    return load_dataset(name, name=args.dataset_config)


def describe_preference_data(args: ScriptArguments, train_dataset) -> str:
    """What offline DPO trained on, as the model card says it: the dataset's name or path (the built-in one by name),
    its split and its rows."""
    if args.data_files:
        name = ", ".join(f"`{f}`" for f in args.data_files)
    elif args.dataset_name:
        name = f"`{args.dataset_name}`" + (f" ({args.dataset_config})" if args.dataset_config else "")
    else:
        name = f"the built-in arithmetic preference dataset `{DATASET_NAME}`"
    rows = f", {len(train_dataset)} rows" if hasattr(train_dataset, "__len__") else ""
    return f"{name} ({args.dataset_train_split} split{rows})"


def pick_split(data, split: str, role: str):
    """The ``split`` of the preference data for ``role`` (training / evaluation); a ``Dataset`` is every split."""
    if not hasattr(data, "keys"):  # a single Dataset
        return data
    if split not in data:
        raise ValueError(
            f"the preference data has no {split!r} split for {role}; splits found: {list(data)} "
            f"(choose one with --dataset_{'train' if role == 'training' else 'test'}_split)"
        )
    return data[split]


def make_parser(subparsers=None, demo_defaults: bool = True):
    """The command line and YAML ``--config`` parser (script, training, model and publishing arguments), with the CPU
    defaults above (``demo_defaults=False``: without them; ``parse_args`` adds them for the demo model only)."""
    return training_script.make_parser(
        (ScriptArguments, EnvDPOConfig, ModelConfig, PublishArguments),
        CPU_FRIENDLY_DEFAULTS,
        subparsers=subparsers,
        command="dpo",
        help="Train with DPO on preferences or an env",
        demo_defaults=demo_defaults,
    )


def parse_args(argv: list[str] | None = None, parser=None, report: bool = True):
    """Parse the command line (``argv``, default ``sys.argv[1:]``) and ``--config``: the demo model gets the CPU
    defaults above, any other model TRL's defaults plus, in env mode, the env's token budgets
    (``trl_envs.run_defaults``). Prints the settings chosen and where each came from (``report``); returns
    ``(parser, (script, training, model, publish args), settings)``."""
    parser = parser or make_parser(demo_defaults=False)
    return training_script.parse_args(
        parser,
        CPU_FRIENDLY_DEFAULTS,
        argv,
        report=report,
        algorithm="dpo",
        env_label="preferences",
        per_turn_key="max_tokens_per_turn",
    )


if __name__ == "__main__":  # checks before any model loads; mistakes and signals end in one line, exit != 0
    training_script.main_entry("train_dpo.py", parse_args, main)
