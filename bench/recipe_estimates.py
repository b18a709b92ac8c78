"""Estimated GPU memory and time of the real-model recipes in ``scripts/configs/qwen2.5-*/`` (computed, not measured;
the recipes measured on a GPU, :data:`MEASURED`, state the measurement instead).

    python bench/recipe_estimates.py                 # prints a table, writes bench/results/recipe_estimates.json

For each recipe: the parameter count from the model's published architecture (:data:`ARCHITECTURES`), the memory of
weights + gradients + AdamW states (full fine-tuning: fp32 weights and states, 16 bytes per parameter; LoRA: the frozen
bf16 base, 2 bytes per parameter, plus the adapter at 16 bytes per parameter), plus the largest activation, the fp32
logits of one micro-batch (``per_device_train_batch_size`` rows x tokens x vocabulary x 4 bytes); and the time of
``max_steps`` steps from two assumptions stated in :data:`ASSUMPTIONS` (decoding speed of ``generate`` and the GPU's
useful bf16 throughput for the training passes). Nothing here is measured: no machine here has the weights or a GPU to
run them.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "scripts" / "configs"

ARCHITECTURES = {
    # The published config.json of each model (Qwen2ForCausalLM).
    "Qwen/Qwen2.5-0.5B-Instruct": dict(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    ),
    "Qwen/Qwen2.5-1.5B-Instruct": dict(
        vocab_size=151936,
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    ),
}

DPO_TRAIN_PAIRS = 512  # trl_envs.training_data.preference_data.NUM_TRAIN

ASSUMPTIONS = {
    "gpu": "one 80 GB A100/H100-class GPU",
    "decode_seconds_per_token": 0.025,  # one decoding step of a batch with HF generate (launch-bound at this size)
    "train_tflops": 100.0,  # useful bf16 TFLOP/s of the training passes (about a third of an A100's peak)
    "prompt_tokens": 128,  # chat template + question / game state of one turn
}


def save_random_qwen(model_id: str, tokenizer, out: Path, layers: int = 0, vocab_size: int = 0) -> str:
    """A randomly initialised ``Qwen2ForCausalLM`` of ``model_id``'s published architecture (:data:`ARCHITECTURES`)
    with ``layers`` decoder layers (0: all of them), ``vocab_size`` rows in the embedding and output layer (0: the
    published vocabulary; below ``len(tokenizer)``: ``ValueError``) and ``tokenizer``, saved in bfloat16 under ``out``.
    No weights are downloaded anywhere: recipes are checked on such models. The weights are tiled from one small normal
    draw (drawing ~500M numbers one by one is most of the build time otherwise); norms are 1."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    arch = dict(ARCHITECTURES[model_id])
    if layers:
        arch["num_hidden_layers"] = layers
    if vocab_size:
        if vocab_size < len(tokenizer):
            raise ValueError(f"vocab_size {vocab_size} is below the tokenizer's {len(tokenizer)} tokens")
        arch["vocab_size"] = vocab_size
    config = Qwen2Config(
        **arch,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        use_sliding_window=False,
    )
    with torch.device("meta"):  # no default init
        model = Qwen2ForCausalLM(config)
    model = model.to_empty(device="cpu").to(torch.bfloat16)  # half the bytes to write; loads in any dtype
    model.tie_weights()  # to_empty gives the output layer its own storage: tie it again, as the published model is
    generator = torch.Generator().manual_seed(0)
    pool = torch.randn(1 << 20, generator=generator) * 0.02
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                offset = int(torch.randint(0, 1 << 19, (1,), generator=generator))
                flat = pool[offset:].repeat(param.numel() // (pool.numel() - offset) + 1)[: param.numel()]
                param.copy_(flat.view_as(param))
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


def num_parameters(arch: dict) -> int:
    """Parameters of a Qwen2 decoder: embeddings (tied output layer) + per layer attention (q/k/v with bias, o),
    SwiGLU MLP and two RMSNorms + the final norm."""
    h, i, layers, vocab = arch["hidden_size"], arch["intermediate_size"], arch["num_hidden_layers"], arch["vocab_size"]
    kv = arch["num_key_value_heads"] * h // arch["num_attention_heads"]
    attention = h * h + h + 2 * (h * kv + kv) + h * h
    per_layer = attention + 3 * h * i + 2 * h
    embeddings = vocab * h * (1 if arch["tie_word_embeddings"] else 2)
    return embeddings + layers * per_layer + h


def lora_parameters(arch: dict, r: int) -> int:
    """Parameters of rank-``r`` LoRA adapters on every linear layer of the decoder (``all-linear``)."""
    h, i, layers = arch["hidden_size"], arch["intermediate_size"], arch["num_hidden_layers"]
    kv = arch["num_key_value_heads"] * h // arch["num_attention_heads"]
    shapes = [(h, h), (h, kv), (h, kv), (h, h), (h, i), (h, i), (i, h)]
    return layers * sum(r * (a + b) for a, b in shapes)


def estimate(recipe: dict) -> dict:
    """Memory (GB) and time (minutes) of one recipe (a parsed YAML config)."""
    arch = ARCHITECTURES[recipe["model_name_or_path"]]
    params = num_parameters(arch)
    if recipe.get("use_peft"):
        trained = lora_parameters(arch, recipe.get("lora_r", 16))
        states = 2 * params + 16 * trained
    else:
        trained = params
        states = 16 * params
    dpo = "num_generations" not in recipe
    per_turn = recipe.get("max_completion_length") or recipe.get("max_tokens_per_turn") or 256
    turns = recipe.get("max_turns", 1) or 1
    rows = recipe.get("per_device_train_batch_size", 8) * (2 if dpo else 1)  # a micro-batch; DPO: chosen + rejected
    rows_per_step = rows * recipe.get("gradient_accumulation_steps", 1)
    tokens_per_row = ASSUMPTIONS["prompt_tokens"] + min(
        turns * (per_turn + 32), recipe.get("max_tokens_per_trajectory") or 10**9
    )
    logits = rows * tokens_per_row * arch["vocab_size"] * 4
    peak = states + logits
    steps = recipe.get("max_steps", -1)
    if steps <= 0:  # DPO by epochs over the built-in preference dataset's training pairs
        steps = math.ceil(DPO_TRAIN_PAIRS / recipe.get("per_device_train_batch_size", 8)) * recipe.get(
            "num_train_epochs", 3
        )
    train_passes = 3 if recipe.get("use_peft") or dpo else 4  # forward + backward (x3), + the old-policy forward
    train_s = train_passes * 2 * params * rows_per_step * tokens_per_row / (ASSUMPTIONS["train_tflops"] * 1e12)
    generate_s = 0.0 if dpo else turns * per_turn * ASSUMPTIONS["decode_seconds_per_token"]
    return {
        "parameters_m": round(params / 1e6, 1),
        "trained_parameters_m": round(trained / 1e6, 1),
        "weights_grads_optimizer_gb": round(states / 1e9, 1),
        "logits_gb": round(logits / 1e9, 1),
        "peak_memory_gb": round(peak / 1e9, 1),
        "steps": steps,
        "seconds_per_step": round(train_s + generate_s, 1),
        "minutes": round(steps * (train_s + generate_s) / 60, 1),
    }


# Recipes run at full size on a GPU: what was measured there replaces the estimate on the recipe's EXPECTS line.
MEASURED = {
    "scripts/configs/qwen2.5-0.5b/arithmetic.yaml": dict(
        gpu="NVIDIA H200",
        peak_memory_gb=11.6,
        seconds_per_step=[8.0, 9.2],  # steady steps
        first_step_seconds=36,
        how="a full-size, randomly initialised Qwen2.5-0.5B (24 layers) with the demo tokenizer, bf16, gradient "
        "checkpointing, 64 rows x 256 tokens per step, 4 steps, plain generate; the recipe_0.5b stage of "
        "scripts/gpu_check.sh repeats this run. That run's model had its output layer untied from the embeddings "
        "(136M parameters more than the published, tied model; since fixed), so the peak is an upper bound",
    ),
}

EXPECTS_PREFIX = "# EXPECTS:"


def _gpu_gb(peak: float) -> int:
    return 24 if peak <= 20 else 40 if peak <= 36 else 80


def expects_line(r: dict, measured: dict | None = None) -> str:
    """The comment line a recipe states its hardware, memory and time in (``--write_configs`` writes it): the
    estimate ``r``, or what was ``measured`` on a GPU (:data:`MEASURED`)."""
    if measured:
        low, high = measured["seconds_per_step"]
        return (
            f"{EXPECTS_PREFIX} one GPU with {_gpu_gb(measured['peak_memory_gb'])} GB or more (peak "
            f"{measured['peak_memory_gb']} GB); {low}-{high} s per step "
            f"(the first {measured['first_step_seconds']} s), "
            f"~{round(r['steps'] * low / 60)}-{round(r['steps'] * high / 60)} min for {r['steps']} steps: measured on "
            f"an {measured['gpu']} with a random full-size model and plain generate (the minutes from the step time)."
        )
    return (
        f"{EXPECTS_PREFIX} one GPU with {_gpu_gb(r['peak_memory_gb'])} GB or more (peak ~{r['peak_memory_gb']} GB); "
        f"~{r['seconds_per_step']} s per step, ~{r['minutes']} min for {r['steps']} steps on an A100/H100-class GPU: "
        "estimated by bench/recipe_estimates.py, not measured."
    )


def recipe_expects_line(path: str, recipe: dict) -> str:
    """The EXPECTS line of the recipe at ``path`` (relative to the repository): measured where it was, else
    estimated."""
    return expects_line(estimate(recipe), MEASURED.get(path))


def recipes() -> dict[str, dict]:
    """Every real-model recipe: ``scripts/configs/qwen2.5-*/*.yaml`` by path relative to the repository."""
    return {str(p.relative_to(REPO)): yaml.safe_load(p.read_text()) for p in sorted(CONFIGS.glob("qwen2.5-*/*.yaml"))}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default=str(REPO / "bench" / "results" / "recipe_estimates.json"))
    parser.add_argument("--write_configs", action="store_true", help="rewrite each recipe's '# EXPECTS:' line")
    args = parser.parse_args(argv)
    all_recipes = recipes()
    results = {path: estimate(recipe) for path, recipe in all_recipes.items()}
    print(f"Estimates (computed, not measured). Assumptions: {json.dumps(ASSUMPTIONS)}")
    print(f"{'recipe':<46} {'params':>7} {'peak GB':>8} {'s/step':>7} {'minutes':>8}")
    for path, r in results.items():
        print(
            f"{path:<46} {r['parameters_m']:>6}M {r['peak_memory_gb']:>8} {r['seconds_per_step']:>7} {r['minutes']:>8}"
        )
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    summary = {"assumptions": ASSUMPTIONS, "recipes": results, "measured": MEASURED}
    Path(args.output).write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {args.output}")
    if args.write_configs:
        for path, recipe in all_recipes.items():
            line = recipe_expects_line(path, recipe)
            lines = (REPO / path).read_text().splitlines(keepends=True)
            lines = [line + "\n" if old.startswith(EXPECTS_PREFIX) else old for old in lines]
            (REPO / path).write_text("".join(lines))
            print(f"wrote the EXPECTS line of {path}")
    return results


if __name__ == "__main__":
    main()
