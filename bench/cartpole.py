"""CartPole-v1: Stable-Baselines3 PPO vs trl_envs GRPO with the tiny language model, in one run.

Each contender is evaluated the same way, SB3-style: mean +/- std of the episode return over ``--eval_episodes``
episodes reset with seeds ``--eval_seed, --eval_seed + 1, ...`` (full 500-step episodes, deterministic policy:
SB3 ``deterministic=True``, the language model greedy). Printed per contender: the evaluation, the environment steps
used to train, and the training wall time.

* ``scripted``: "push toward where the pole is falling" (sign of angle + angular velocity), played through the same
  text interface the language model sees (``TextPolicySampler``): shows the interface is solvable. No training.
* ``ppo``: ``PPO("MlpPolicy", "CartPole-v1")`` for ``--ppo_timesteps`` steps (20k, as in SB3's classic example).
* ``grpo``: ``EnvGRPOTrainer`` on the built-in ``cartpole`` env (per-turn rows, per-turn credit), settings of
  ``scripts/configs/cartpole.yaml``; also evaluated before training and with sampling (temperature 1).

Target: trl_envs mean >= 475 (CartPole-v1's "solved" threshold).

    pip install -e ".[bench]"
    python bench/cartpole.py                          # all three
    python bench/cartpole.py --skip ppo --grpo_steps 10
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time

import _common
import numpy as np
import torch
from transformers import PrinterCallback, TrainerCallback

from trl_envs import EnvGRPOConfig, EnvGRPOTrainer, HFSampler, Renderer, make_env_dataset
from trl_envs.envs.cartpole import ACTION_NAMES, ENV_ID, cartpole_text, lean_policy
from trl_envs.gym.evaluation import GymEvalResult, evaluate_gym
from trl_envs.samplers.text_policy import TextPolicySampler
from trl_envs.tiny_model import DEMO_MODEL_NAME, MODEL_NAME

SOLVED = 475.0


def show(name: str, result: GymEvalResult, env_steps: int | str, seconds: float) -> dict:
    print(
        f"{name:24s} {result.mean_reward:7.1f} +/- {result.std_reward:6.1f}  (episodes {result.episode_rewards}, "
        f"valid replies {result.parse_ok:.2f})  train env steps {env_steps}  train wall {seconds:.0f} s",
        flush=True,
    )
    return {
        "mean": result.mean_reward,
        "std": result.std_reward,
        "episodes": result.episode_rewards,
        "parse_ok": result.parse_ok,
        "env_steps": env_steps,
        "seconds": seconds,
    }


def eval_lm(model, tokenizer, renderer, args, temperature: float) -> GymEvalResult:
    torch.manual_seed(args.seed)
    return evaluate_gym(
        HFSampler(model, tokenizer, temperature=temperature),
        ENV_ID,
        renderer,
        args.eval_episodes,
        seed=args.eval_seed,
        formatter=cartpole_text,
        action_names=ACTION_NAMES,
        default_action=_default_action(args.default_action),
        max_tokens_per_turn=4,
    )


def run_ppo(args) -> tuple[list[float], int, float]:
    import gymnasium as gym
    from stable_baselines3 import PPO

    model = PPO("MlpPolicy", ENV_ID, seed=args.seed, verbose=0, device="cpu")
    start = time.perf_counter()
    model.learn(total_timesteps=args.ppo_timesteps)
    seconds = time.perf_counter() - start
    returns = []
    for i in range(args.eval_episodes):  # the same seeds as the language model's evaluation
        env = gym.make(ENV_ID)
        obs, _ = env.reset(seed=args.eval_seed + i)
        total, done = 0.0, False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(int(action))
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    return returns, int(model.num_timesteps), seconds


class _Progress(TrainerCallback):
    """One line per training step: the mean CartPole return of the step's episodes and the share of legal replies."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "env/cartpole/episode_return" in logs:
            print(
                f"  step {state.global_step:3d}: return {logs['env/cartpole/episode_return']:6.1f}  valid replies "
                f"{logs['env/cartpole/parse_ok']:.2f}  entropy {logs.get('entropy', float('nan')):.3f}",
                flush=True,
            )


def _default_action(text: str):
    return "random" if text == "random" else int(text)


def run_grpo(args, model_path: str, tokenizer, renderer) -> tuple[object, int, float, list[dict]]:
    builder = make_env_dataset(
        "cartpole",
        renderer,
        group_size=args.group_size,
        batch_size=args.groups_per_step,
        num_batches=args.grpo_steps,
        seed=args.seed,
        max_episode_steps=args.train_max_episode_steps,
        invalid_action_penalty=args.invalid_action_penalty,
        default_action=_default_action(args.default_action),
    )
    with tempfile.TemporaryDirectory() as out:
        config = EnvGRPOConfig(
            output_dir=out,
            use_cpu=True,
            bf16=False,
            report_to="none",
            gradient_checkpointing=False,
            disable_tqdm=True,
            seed=args.seed,
            num_generations=args.group_size,
            per_device_train_batch_size=args.group_size * args.groups_per_step,
            max_steps=args.grpo_steps,
            learning_rate=args.lr,
            beta=0.0,
            max_completion_length=4,
            max_turns=500,
            logging_steps=1,
            save_strategy="no",
            training_rows="auto",
            credit_assignment="per_turn",
            credit_gamma=args.gamma,
            num_iterations=args.num_iterations,
        )
        trainer = EnvGRPOTrainer(model_path, config, builder, processing_class=tokenizer)
        trainer.remove_callback(PrinterCallback)
        trainer.add_callback(_Progress())
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
    episodes_per_step = args.group_size * args.groups_per_step
    history = [h for h in trainer.state.log_history if "env/cartpole/episode_length" in h]
    env_steps = int(round(sum(h["env/cartpole/episode_length"] * episodes_per_step for h in history)))
    curve = [
        {
            "step": h["step"],
            "return": round(h["env/cartpole/episode_return"], 1),
            "parse_ok": round(h["env/cartpole/parse_ok"], 3),
        }
        for h in history
    ]
    return trainer.model.eval(), env_steps, seconds, curve


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip", nargs="*", default=[], choices=["scripted", "ppo", "grpo"])
    parser.add_argument("--eval_episodes", type=int, default=10)
    parser.add_argument("--eval_seed", type=int, default=10_000, help="first evaluation seed (training uses 0, 1, ...)")
    parser.add_argument("--ppo_timesteps", type=int, default=20_000)
    parser.add_argument("--grpo_steps", type=int, default=40)
    parser.add_argument("--group_size", type=int, default=8)
    parser.add_argument("--groups_per_step", type=int, default=2)
    parser.add_argument(
        "--train_max_episode_steps",
        type=int,
        default=100,
        help="cap on training episodes (evaluation always plays up to CartPole-v1's 500)",
    )
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--invalid_action_penalty", type=float, default=-0.1)
    parser.add_argument("--default_action", default="0", help="played after an illegal reply: random, 0 or 1")
    parser.add_argument("--gamma", type=float, default=0.95, help="credit_gamma of the per-turn reward-to-go")
    parser.add_argument("--num_iterations", type=int, default=1, help="GRPO updates per batch of episodes (TRL's mu)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--model",
        default=None,
        help=f"model path (default: the offline {MODEL_NAME}, which learned "
        f"CartPole better than the demo model {DEMO_MODEL_NAME}: bench/results/history.md)",
    )
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--check", action="store_true", help="exit 1 when trl_envs misses the target")
    args = parser.parse_args()
    _common.setup_torch(args.threads, args.seed)
    model_path, tokenizer, untrained = _common.load_tiny_model(args.model)
    renderer = Renderer(tokenizer)
    results: dict[str, dict] = {}
    print(
        f"{ENV_ID}: {args.eval_episodes} evaluation episodes, seeds {args.eval_seed}..."
        f"{args.eval_seed + args.eval_episodes - 1}; mean +/- std of the episode return",
        flush=True,
    )

    if "scripted" not in args.skip:
        result = evaluate_gym(
            TextPolicySampler(renderer, lean_policy),
            ENV_ID,
            renderer,
            args.eval_episodes,
            seed=args.eval_seed,
            formatter=cartpole_text,
            action_names=ACTION_NAMES,
        )
        results["scripted"] = show("scripted (text)", result, 0, 0.0)
    if "ppo" not in args.skip:
        returns, steps, seconds = run_ppo(args)
        print(
            f"{'SB3 PPO MlpPolicy':24s} {np.mean(returns):7.1f} +/- {np.std(returns):6.1f}  (episodes {returns})  "
            f"train env steps {steps}  train wall {seconds:.0f} s",
            flush=True,
        )
        results["ppo"] = {
            "mean": float(np.mean(returns)),
            "std": float(np.std(returns)),
            "episodes": returns,
            "env_steps": steps,
            "seconds": seconds,
        }
    if "grpo" not in args.skip:
        results["untrained_greedy"] = show(
            "tiny model, untrained", eval_lm(untrained, tokenizer, renderer, args, 0.0), 0, 0.0
        )
        model, steps, seconds, curve = run_grpo(args, model_path, tokenizer, renderer)
        print(
            "training curve (mean episode return, valid replies): "
            + ", ".join(f"{c['step']}: {c['return']} ({c['parse_ok']})" for c in curve),
            flush=True,
        )
        results["grpo_greedy"] = show(
            "trl_envs GRPO (greedy)", eval_lm(model, tokenizer, renderer, args, 0.0), steps, seconds
        )
        results["grpo_sampled"] = show(
            "trl_envs GRPO (T=1)", eval_lm(model, tokenizer, renderer, args, 1.0), steps, seconds
        )
        results["grpo_curve"] = {"curve": curve}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if "grpo_greedy" in results:
        met = results["grpo_greedy"]["mean"] >= SOLVED
        print(
            f"\ntarget {'MET' if met else 'MISSED'}: trl_envs GRPO mean >= {SOLVED:.0f} "
            f"(got {results['grpo_greedy']['mean']:.1f})"
        )
        if args.check and not met:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
