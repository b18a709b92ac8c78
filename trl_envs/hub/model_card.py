"""The model card (``README.md``) of a model trained with trl_envs: Hub metadata, the env(s), the base model, the
evaluation table before and after training, the training curves and how to load the model."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ..rollout.evaluation import EvalResult

ALGORITHM_NAMES = {"grpo": "GRPO", "dpo": "DPO"}


@dataclass
class ModelCardInfo:
    """What the card says.

    Attributes:
        model_name: the card's title (usually the repo name).
        base_model: the model trained from: a Hub id, or a local path (then left out of the Hub metadata, which only
            accepts Hub ids).
        algorithm: ``"grpo"`` or ``"dpo"`` (or any name).
        envs: the env(s) trained on (names as given to the scripts); empty for preference data alone.
        is_adapter: the folder holds a PEFT adapter (else a full model).
        repo_id: what the loading snippets load: the Hub repo it is pushed to, or the folder's path (default:
            ``model_name``).
        eval_env: the env the evaluation table was measured on.
        eval_before, eval_after: evaluation of the base model and of the trained model (same problems, seeds and
            settings), or ``None`` when not evaluated.
        eval_settings: how they were measured (shown under the table, e.g. problems, samples, temperature, seed;
            ``"command"``: the ``trl-envs eval`` command that measures the trained model the same way).
        plot_file: the training-curves image next to the card, or ``None``.
        hyperparameters: training settings worth showing (the full config is in ``training_config.json``).
        datasets: Hub datasets trained on (Hub metadata), if any.
        train_data: what the model was trained on when it is not an env, as the card says it (a dataset's name or
            path and its rows); default: the ``datasets``, else "preference data".
    """

    model_name: str
    base_model: str
    algorithm: str
    envs: list[str] = field(default_factory=list)
    is_adapter: bool = False
    repo_id: str | None = None
    eval_env: str | None = None
    eval_before: EvalResult | None = None
    eval_after: EvalResult | None = None
    eval_settings: dict[str, Any] = field(default_factory=dict)
    plot_file: str | None = None
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    datasets: list[str] = field(default_factory=list)
    train_data: str | None = None


def base_model_is_hub_id(base_model: str) -> bool:
    """Whether ``base_model`` names a Hub repo rather than a local directory."""
    return not os.path.exists(base_model) and not os.path.isabs(base_model) and base_model.count("/") <= 1


def card_metadata(info: ModelCardInfo):
    """The card's YAML metadata as ``huggingface_hub.ModelCardData``."""
    from huggingface_hub import ModelCardData

    algorithm = info.algorithm.lower()
    tags = ["trl", "trl-envs", algorithm, "reinforcement-learning"] + [f"env:{e}" for e in info.envs]
    data: dict[str, Any] = dict(
        library_name="peft" if info.is_adapter else "transformers", pipeline_tag="text-generation", tags=tags
    )
    if base_model_is_hub_id(info.base_model):
        data["base_model"] = info.base_model
    if info.datasets:
        data["datasets"] = list(info.datasets)
    if info.envs:
        data["envs"] = list(info.envs)  # free-form key: the trl_envs env names
    return ModelCardData(**data)


def render_model_card(info: ModelCardInfo) -> str:
    """The full ``README.md`` text: YAML metadata, then the card's sections."""
    repo = info.repo_id or info.model_name
    algorithm = ALGORITHM_NAMES.get(info.algorithm.lower(), info.algorithm)
    what = "a LoRA (PEFT) adapter for" if info.is_adapter else "a fine-tuned version of"
    data = info.train_data or (", ".join(f"`{d}`" for d in info.datasets) if info.datasets else "preference data")
    envs = ", ".join(f"`{e}`" for e in info.envs) or data
    parts = [
        f"---\n{card_metadata(info).to_yaml()}\n---\n",
        f"# {info.model_name}\n",
        f"This model is {what} {_base_model_text(info.base_model)}, trained with {algorithm} on {envs} using "
        "trl_envs (Tinker-style environments trained with TRL).\n",
        _eval_section(info),
    ]
    if info.plot_file:
        parts.append(
            f"## Training curves\n\n![Training curves: reward and policy entropy against steps]"
            f"({info.plot_file})\n\nRising reward with falling (not collapsing) policy entropy is the healthy "
            "sign: the policy gets better while becoming more certain.\n"
        )
    parts.append(_load_section(info, repo))
    parts.append(_training_section(info, algorithm))
    return "\n".join(parts)


def write_model_card(output_dir: str | os.PathLike[str], info: ModelCardInfo) -> str:
    """Write :func:`render_model_card` to ``output_dir/README.md``; return its path."""
    path = os.path.join(output_dir, "README.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write(render_model_card(info))
    return path


def _base_model_text(base_model: str) -> str:
    if base_model_is_hub_id(base_model):
        return f"[{base_model}](https://huggingface.co/{base_model})"
    from ..model_names import DEMO_MODEL_NAME, MODEL_NAMES

    name = os.path.basename(os.path.normpath(base_model))
    if name in MODEL_NAMES:
        command = "trl-envs build-tiny-model" + ("" if name == DEMO_MODEL_NAME else f" --name {name}")
        return f"trl_envs' offline tiny chat model `{name}` (ships with trl_envs; `{command}` prints its path)"
    return f"the local model `{base_model}`"


def _eval_section(info: ModelCardInfo) -> str:
    if info.eval_before is None and info.eval_after is None:
        return "## Evaluation\n\nNot evaluated at the end of training.\n"
    results = [("before training", info.eval_before), ("after training", info.eval_after)]
    results = [(name, r) for name, r in results if r is not None]
    ks = sorted(set().union(*(r.pass_at_k for _, r in results)))
    lines = [
        "| metric | " + " | ".join(name for name, _ in results) + " |",
        "| --- |" + " ---: |" * len(results),
        "| mean total reward ± std | "
        + " | ".join(f"{r.mean_reward:.3f} ± {r.std_reward:.3f}" for _, r in results)
        + " |",
    ]
    for k in ks:
        lines.append(
            f"| pass@{k} | "
            + " | ".join(f"{r.pass_at_k[k]:.3f}" if k in r.pass_at_k else "-" for _, r in results)
            + " |"
        )
    lines.append(
        "| episodes (problems) | " + " | ".join(f"{r.num_episodes} ({r.num_problems})" for _, r in results) + " |"
    )
    command = info.eval_settings.get("command")
    settings = ", ".join(f"{k} {v}" for k, v in info.eval_settings.items() if k != "command")
    env = f" `{info.eval_env}`" if info.eval_env else ""
    reproduce = ""
    if command:
        reproduce = f"\n\nReproduce it (every number and setting is in `eval_results.json`):\n\n```bash\n{command}\n```"
    return (
        "## Evaluation\n\n"
        + "\n".join(lines)
        + f"\n\nMeasured on the held-out test problems of the env{env}"
        + (f" ({settings})" if settings else "")
        + "; an episode counts as solved when its total reward is above "
        f"{(info.eval_after or info.eval_before).success_threshold:g}." + reproduce + "\n"
    )


def _load_section(info: ModelCardInfo, repo: str) -> str:
    if info.is_adapter:
        code = (
            f"from peft import AutoPeftModelForCausalLM\nfrom transformers import AutoTokenizer\n\n"
            f'model = AutoPeftModelForCausalLM.from_pretrained("{repo}")  # the base model with this adapter\n'
            f'tokenizer = AutoTokenizer.from_pretrained("{repo}")\n\n'
            f"# or explicitly:\nfrom peft import PeftModel\nfrom transformers import AutoModelForCausalLM\n\n"
            f'base = AutoModelForCausalLM.from_pretrained("{info.base_model}")\n'
            f'model = PeftModel.from_pretrained(base, "{repo}")\n'
            "model = model.merge_and_unload()  # optional: a plain transformers model\n"
        )
    else:
        code = (
            f"from transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
            f'model = AutoModelForCausalLM.from_pretrained("{repo}")\n'
            f'tokenizer = AutoTokenizer.from_pretrained("{repo}")\n'
        )
    note = ""
    if info.is_adapter and not base_model_is_hub_id(info.base_model):
        note = (
            f"\nThe adapter's base model is the local path `{info.base_model}`: build or copy that model there "
            "first, or point `base_model_name_or_path` in `adapter_config.json` at your copy.\n"
        )
    chat = (
        "\nPrompt it with the tokenizer's chat template, as during training:\n\n```python\n"
        'messages = [{"role": "user", "content": "..."}]\n'
        'inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", '
        "return_dict=True)\nprint(tokenizer.decode(model.generate(**inputs, max_new_tokens=64)[0]))\n```\n"
    )
    return f"## How to load\n\n```python\n{code}```\n{note}{chat}"


def _training_section(info: ModelCardInfo, algorithm: str) -> str:
    import importlib.metadata as md

    rows = "\n".join(f"| `{k}` | `{v}` |" for k, v in info.hyperparameters.items())
    table = f"| setting | value |\n| --- | --- |\n{rows}\n\n" if rows else ""
    versions = []
    for package in ("trl_envs", "trl", "transformers", "peft", "torch"):
        try:
            versions.append(f"{package} {md.version(package.replace('_', '-'))}")
        except md.PackageNotFoundError:
            continue
    return (
        f"## Training\n\n{algorithm} with trl_envs' `Env{algorithm}Trainer` (TRL's `{algorithm}Trainer`).\n\n"
        f"{table}The full configuration is in `training_config.json`, the logged metrics in "
        f"`log_history.json`.\n\nFramework versions: {', '.join(versions)}.\n"
    )
