"""The maintainers' builder of the tiny chat models and the preference dataset that ship with trl_envs.

The package ships them as data (``trl_envs/assets/``; :mod:`trl_envs.tiny_model` finds them); this script is how they
were made and how they are remade when a recipe changes. It is not part of the installed package::

    python scripts/tiny_models/build_tiny_models.py                    # rebuild all three into trl_envs/assets/
    python scripts/tiny_models/build_tiny_models.py --name tiny-chat-v5 --output_dir /tmp/v5   # one, elsewhere
    python scripts/tiny_models/build_tiny_models.py --check --name tiny-chat-v5   # rebuild aside and compare
    python scripts/tiny_models/build_tiny_models.py --quick_check      # the recipe's start, compared (seconds)

Two model recipes, by name:

* ``tiny-chat-v5`` (``DEMO_MODEL_NAME``), the demo model: a randomly initialised two-layer ``Qwen2ForCausalLM``
  (float32, output layer untied from the embeddings) warm-started by ``warm_start.py`` (next to this file) on weighted
  demonstrations of ``arithmetic`` (bare and worked sums) and ``guess_number`` (including halving games);
* ``tiny-chat-v1`` (``MODEL_NAME``), the tests' model: smaller, tied embeddings, warm-started with TRL's
  ``SFTTrainer`` just enough that it answers with a bare number and ``<|im_end|>``.

Both get a byte-level BPE tokenizer trained on the spot (every digit is its own token) and a ChatML chat template. The
build runs on the CPU with a fixed seed and thread count: two builds on one machine give the same bytes, builds on
different machines (other CPUs, other library versions) may round differently, which is why the weights ship rather
than being built on each machine. Next to the weights, ``build.json`` records the build: name, seed, recipe, build
time, the warm start's evaluation (:func:`evaluate_warm_start`: 100 samples per figure at temperature 1), each
source's training loss at a few early steps (:data:`RECORDED_LOSS_STEPS`), a fingerprint of the demonstrations,
library versions, machine, and the sha256 of every file.

Two checks that the recipe here still makes the model that ships:

* ``--check``, the maintainers' check before shipping a change (minutes: the demo model's build takes 2.5 to 8
  minutes on 2 cores, by load), rebuilds into a scratch folder and compares the warm start's evaluation with the
  shipped one: a rebuild is the same model, for RL's purposes, when every figure is within :data:`TOLERANCE` (on the
  machine that built the shipped models it is the same bytes, ``same_weights``);
* ``--quick_check``, what the test suite runs (seconds, :func:`quick_check`), compares exactly what involves no
  floating-point rounding (the demonstrations' fingerprint, the recipe's settings, the tokenizer, chat template and
  configs) and runs the first :data:`QUICK_CHECK_STEPS` warm-start steps, whose losses must be the recorded ones
  within :data:`LOSS_TOLERANCE` (which absorbs another CPU's rounding, not a changed learning rate, data mix,
  initialisation or seed). It does not evaluate a model: a recipe that starts the same but ends differently (its
  later steps, the evaluation) is ``--check``'s to find.

``arithmetic-preferences-v2``, the built-in preference dataset of offline DPO, is built by
``trl_envs.training_data.preference_data`` (pure Python, the same bytes on every machine) and saved here too.
"""

from __future__ import annotations

import os

os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the build is CPU-only: do not initialise (or occupy) any GPU
os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # the trl_envs of this checkout (its envs make the demonstrations)

import warm_start  # noqa: E402  (next to this file)

from trl_envs.model_names import DEMO_MODEL_NAME, MODEL_NAME, MODEL_NAMES  # noqa: E402
from trl_envs.tiny_model import ASSETS, BUILD_RECORD  # noqa: E402
from trl_envs.training_data.preference_data import DATASET_NAME  # noqa: E402

TOLERANCE = 0.12
"""How far (absolute) each warm-start evaluation figure of a rebuild may be from the shipped model's for the rebuild to
count as the same model: each figure is a fraction of 100 samples, whose sampling error alone is up to 0.05 (one
standard deviation at 0.5), and a rebuild that rounds differently is a different sample of the recipe."""

QUICK_CHECK_STEPS = 30
"""How many warm-start steps ``--quick_check`` runs (of 500 for the demo model, 250 for the tests' model): a few
seconds. Not more: past step ~32 the demo model's warm start amplifies rounding differences quickly (see
:data:`LOSS_TOLERANCE`)."""

RECORDED_LOSS_STEPS = (1, 10, 20, QUICK_CHECK_STEPS)
"""The steps whose per-source training loss (on that step's batch) a build records in ``build.json``
(``train_loss_at_step``) for ``--quick_check`` to compare: step 1's loss is the untrained model's (initialisation,
tokenizer, first batches); the later ones follow the learning rate, its warmup and the data mix."""

LOSS_TOLERANCE = 1e-3
"""How far (relative) each of a quick check's losses may be from the one the build recorded: far above another CPU's
rounding within :data:`QUICK_CHECK_STEPS` steps, far below what a change of the recipe does. Measured on the shipped
recipes (seed 0, torch 2.13.0, an AMD EPYC with AVX-512), as the largest relative change of a recorded loss:

* other CPUs, emulated (``MKL_CBWR=COMPATIBLE``; ``ATEN_CPU_CAPABILITY=default`` or ``avx2``; all of these with
  ``ONEDNN_MAX_CPU_ISA=SSE41``): at most 5e-7 (tiny-chat-v1: 0); 1, 2 or 4 torch threads give the same bytes. Past
  step 32 the demo model's differences grow fast: 1e-5 by step 35, 1.3e-4 by 40, 7e-4 by 50, 1.8e-2 by 60 (v1: 3e-5
  by 50, 3e-4 by 60), hence 30 steps;
* recipe changes: learning rate -10% 9.5e-2 (v1 1.0e-1), +10% 9.0e-2; 55 warmup steps instead of 50 8.5e-2; seed 1
  4.8e-2 (v1 5.8e-2); 60 arithmetic examples a step instead of 64 4.5e-2; initializer_range 0.022 instead of 0.02
  4.0e-2 (v1 2.2e-2); the teacher's QUICK_SHARE 0.80 instead of 0.82 1.7e-2; v1 with 1,900 arithmetic demonstrations
  instead of 2,000 4.8e-3. The total number of steps barely shows this early (450 instead of 500: 9.6e-4, the cosine
  decay has barely begun; v1 warms up flat until step 50: 0); the quick check catches it, as it catches a changed
  data mix or seed, in the recipe's settings and the demonstrations' fingerprint, which it compares exactly."""

IM_START, IM_END, PAD = "<|im_start|>", "<|im_end|>", "<|endoftext|>"

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['role'] == 'assistant' %}"
    "{%- generation %}{{- message['content'] + '<|im_end|>' }}{%- endgeneration %}"
    "{%- else %}"
    "{{- message['content'] + '<|im_end|>' }}"
    "{%- endif %}"
    "{{- '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""ChatML, as Qwen renders it but without a default system message. The ``{% generation %}`` markers (which render
nothing) let TRL mask the loss to assistant turns, ``<|im_end|>`` included."""

# The recipe. Tuned (seeds 0-2) so that, sampled at temperature 1, the warm-started model answers ``What is a + b?``
# (operands 0..9) with a bare integer and <|im_end|> ~97% of the time and correctly ~25-30% of the time; guesses in
# guess_number are bare numbers in range ~99% of the time. A learning rate much above 6e-3 (or a short warmup) makes
# learning the sums erratic across seeds (some runs never get past guessing the typical answer); more steps make the
# model right more often (~60% at 400 steps), leaving RL less to do.
VOCAB_SIZE = 512
MODEL_CONFIG = dict(
    hidden_size=64,
    intermediate_size=192,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=1024,
)
NUM_ARITHMETIC_DEMOS = 2000
NUM_GUESS_DEMOS = 600
TRAIN_STEPS = 250
BATCH_SIZE = 32
LEARNING_RATE = 6e-3
WARMUP_STEPS = 50
TORCH_THREADS = 1  # the model is so small that more threads only add synchronisation (much slower on a busy machine)

# The v2 recipe (DEMO_MODEL_NAME). Tuned (seed 0) so that the model's greedy answer is right for most sums with
# operands 0..9 (0.65 of them for the shipped v5), while sampled at temperature 1 it is right ~37% of the time (the
# teacher of trl_envs.warm_start); GRPO then has reward variance on every question.
# v4 adds the halving games of guess_number (trl_envs.warm_start.HALVING_SHARE, halving_examples) and twice its
# guess_number batch. v5 is v4's recipe computed faster (trl_envs.warm_start: logits only where there is a label, no
# attention mask; two threads), which rounds differently: a different model, so a new name.
V2_MODEL_CONFIG = dict(MODEL_CONFIG)  # the same architecture; the recipe differs
V2_TRAIN_STEPS = 500
V2_ARITHMETIC_PER_STEP = 64
V2_WORKED_PER_STEP = 32
V2_GUESS_GAMES = 600
V2_GUESS_PER_STEP = 8
V2_HALVING_PER_STEP = 4
V2_LEARNING_RATE = 6e-3
V2_WARMUP_STEPS = 50
V2_TORCH_THREADS = 2  # the demo model's steps are compute, not overhead: two threads build it faster on 2 cores

_GENERIC_TEXT = """\
You are a helpful assistant. Answer the question with just the number.
The quick brown fox jumps over the lazy dog. A small model learns to add numbers and to guess a hidden number.
Reinforcement learning improves a policy from rewards: the agent acts, the environment answers, and good answers
are reinforced. Please reply with one short answer. Thank you! Is that right? Yes, that is correct. No, try again.
Higher or lower? The number is between one and sixteen. What is the sum of two and three? It is five.
zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen
"""

# -- the build -------------------------------------------------------------------------------------------


def build_model(directory: Path, seed: int, name: str = MODEL_NAME) -> dict:
    """Build tokenizer and warm-started model (recipe ``name``) into the existing empty ``directory``, its
    ``build.json`` last, and return that record."""
    start, load_at_start = time.monotonic(), os.getloadavg()[0]
    demonstrations, tokenizer, model = _start_build(name, seed)
    _log(f"trained a {len(tokenizer)}-token tokenizer ({time.monotonic() - start:.0f}s)")
    losses, losses_at_step = _warm_start_recipe(name, demonstrations, tokenizer, model, directory, seed)
    model.config.use_cache = True  # the trainer turns the KV cache off for training
    evaluation = evaluate_warm_start(model, tokenizer, seed=seed + 10_000)
    _log(
        "sampled at temperature 1: "
        + ", ".join(f"{key} {value:.0%}" for key, value in evaluation.items())
        + f" ({time.monotonic() - start:.0f}s)"
    )

    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    record = {
        "name": name,
        "seed": seed,
        "recipe": recipe(name),
        "build_seconds": round(time.monotonic() - start, 1),
        "train_loss_tail": {key: round(value, 4) for key, value in losses.items()},
        "train_loss_at_step": losses_at_step,
        "demonstrations_sha256": demonstrations_sha256(demonstrations),
        "warm_start_eval": evaluation,
        "built_with": {**_libraries(), "load_average_at_start": round(load_at_start, 2)},
        "command": f"python scripts/tiny_models/build_tiny_models.py --name {name} --seed {seed}",
        "sha256": sha256_of_files(directory),
    }
    (directory / BUILD_RECORD).write_text(json.dumps(record, indent=2) + "\n")
    _log(f"built {name} in {record['build_seconds']:.0f}s")
    return record


def _libraries() -> dict:
    """The Python, library versions, torch thread count and machine of this process (``built_with`` of the record)."""
    import tokenizers
    import torch
    import transformers

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "torch_threads": torch.get_num_threads(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
    }


def _start_build(name: str, seed: int) -> tuple[list, object, object]:
    """The deterministic start of recipe ``name``'s build: its demonstrations (``warm_start.Source`` list for the demo
    model, conversations for the tests' model), the tokenizer trained on them, and the randomly initialised model.
    Sets the seed and torch's thread count as the recipe says."""
    _quiet_libraries()
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM, set_seed

    demo = name == DEMO_MODEL_NAME
    torch.set_num_threads(V2_TORCH_THREADS if demo else TORCH_THREADS)
    set_seed(seed)
    if demo:
        demonstrations = [
            warm_start.Source("arithmetic", warm_start.arithmetic_examples(), V2_ARITHMETIC_PER_STEP),
            warm_start.Source("worked_sums", warm_start.worked_sum_examples(), V2_WORKED_PER_STEP),
            warm_start.Source(
                "guess_number", warm_start.guess_number_examples(V2_GUESS_GAMES, seed), V2_GUESS_PER_STEP
            ),
            warm_start.Source("halving", warm_start.halving_examples(), V2_HALVING_PER_STEP),
        ]
        conversations = [example.messages for source in demonstrations for example in source.examples]
    else:
        demonstrations = conversations = _demonstrations(seed)
    tokenizer = _train_tokenizer(conversations)

    # v2 unties the output layer from the input embeddings: RL then sharpens the answer distribution without moving
    # the embeddings of the digits it reads in the question (tied, the tiny model's arithmetic collapses under GRPO).
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        tie_word_embeddings=not demo,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        use_sliding_window=False,
        **(V2_MODEL_CONFIG if demo else MODEL_CONFIG),
    )
    model = Qwen2ForCausalLM(config).to(torch.float32)
    model.generation_config.bos_token_id = None
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return demonstrations, tokenizer, model


def _warm_start_recipe(
    name: str, demonstrations: list, tokenizer, model, directory: Path, seed: int, stop_after: int | None = None
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Warm-start ``model`` as recipe ``name`` says (``stop_after``: only the first that many of its steps, which are
    the full build's first steps). Returns the trainer's loss summary (``train_loss_tail`` of the record; empty or
    partial when stopped early) and, for each step of :data:`RECORDED_LOSS_STEPS` that was run, each source's
    training loss on that step (``train_loss_at_step`` of the record, what :func:`quick_check` compares)."""
    losses_at_step: dict[str, dict[str, float]] = {}

    def record(step: int, losses: dict[str, float]) -> None:
        if step in RECORDED_LOSS_STEPS:
            losses_at_step[str(step)] = {key: round(value, 6) for key, value in losses.items()}

    if name == DEMO_MODEL_NAME:
        _log(
            f"warm-starting on {sum(len(s.examples) for s in demonstrations)} weighted demonstrations "
            f"({stop_after or V2_TRAIN_STEPS} of {V2_TRAIN_STEPS} steps)"
        )
        losses = warm_start.train(
            model,
            tokenizer,
            demonstrations,
            steps=V2_TRAIN_STEPS,
            learning_rate=V2_LEARNING_RATE,
            warmup_steps=V2_WARMUP_STEPS,
            seed=seed,
            stop_after=stop_after,
            on_step=record,
        )
    else:
        _log(
            f"warm-starting on {len(demonstrations)} demonstrations "
            f"({stop_after or TRAIN_STEPS} of {TRAIN_STEPS} steps)"
        )
        losses = _warm_start(model, tokenizer, demonstrations, directory, seed, stop_after=stop_after, on_step=record)
    return losses, losses_at_step


def demonstrations_sha256(demonstrations: list) -> str:
    """A fingerprint of the demonstrations as the recipe trains on them: the sha256 of their canonical JSON (sources
    with their names, per-step counts and every example's messages, weight and skipped tokens; or the conversations).
    They are pure Python, so the fingerprint is the same on every machine."""
    plain = [dataclasses.asdict(d) if dataclasses.is_dataclass(d) else d for d in demonstrations]
    canonical = json.dumps(plain, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def sha256_of_files(directory: Path) -> dict[str, str]:
    """The sha256 of every file in ``directory`` (relative path -> hex digest), the build record excepted."""
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file() and path.name != BUILD_RECORD
    }


def recipe(name: str) -> dict:
    """The recipe's settings, as recorded in ``build.json``."""
    if name == DEMO_MODEL_NAME:
        return {
            "model_config": V2_MODEL_CONFIG,
            "tie_word_embeddings": False,
            "vocab_size": VOCAB_SIZE,
            "train_steps": V2_TRAIN_STEPS,
            "per_step": {
                "arithmetic": V2_ARITHMETIC_PER_STEP,
                "worked_sums": V2_WORKED_PER_STEP,
                "guess_number": V2_GUESS_PER_STEP,
                "halving": V2_HALVING_PER_STEP,
            },
            "guess_games": V2_GUESS_GAMES,
            "learning_rate": V2_LEARNING_RATE,
            "warmup_steps": V2_WARMUP_STEPS,
            "torch_threads": V2_TORCH_THREADS,
            "teacher": {
                "quick_share": warm_start.QUICK_SHARE,
                "quick_offsets": {str(k): v for k, v in warm_start.QUICK_OFFSETS.items()},
                "halving_share": warm_start.HALVING_SHARE,
            },
            "trainer": "warm_start.train (plain PyTorch loop, AdamW, warmup then cosine)",
        }
    return {
        "model_config": MODEL_CONFIG,
        "tie_word_embeddings": True,
        "vocab_size": VOCAB_SIZE,
        "arithmetic_demos": NUM_ARITHMETIC_DEMOS,
        "guess_demos": NUM_GUESS_DEMOS,
        "train_steps": TRAIN_STEPS,
        "batch_size": BATCH_SIZE,
        "learning_rate": LEARNING_RATE,
        "warmup_steps": WARMUP_STEPS,
        "torch_threads": TORCH_THREADS,
        "trainer": "trl.SFTTrainer (assistant-only loss, padding-free, cosine)",
    }


def _quiet_libraries() -> None:
    """Silence progress bars, advisory warnings and info logs of the libraries: the build prints its own summary."""
    import warnings

    warnings.filterwarnings("ignore")
    import datasets
    import transformers

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()


def _demonstrations(seed: int) -> list[list[dict[str, str]]]:
    from trl_envs.envs.arithmetic import demonstrations as arithmetic_demos
    from trl_envs.envs.guess_number import demonstrations as guess_demos

    return arithmetic_demos(NUM_ARITHMETIC_DEMOS, seed) + guess_demos(NUM_GUESS_DEMOS, seed)


def _train_tokenizer(conversations: list[list[dict[str, str]]]):
    """A byte-level BPE tokenizer trained on the conversations' text plus some generic English."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[PAD, IM_START, IM_END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [_GENERIC_TEXT, "system\nuser\nassistant\n"]
    corpus += [message["content"] for convo in conversations for message in convo]
    bpe.train_from_iterator(corpus, trainer=trainer)

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token=None,
        eos_token=IM_END,
        pad_token=PAD,
        unk_token=None,
        extra_special_tokens=[IM_START],
        model_max_length=1024,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _warm_start(
    model,
    tokenizer,
    conversations,
    directory: Path,
    seed: int,
    *,
    stop_after: int | None = None,
    on_step: Callable[[int, dict[str, float]], None] | None = None,
) -> dict[str, float]:
    """Supervised fine-tuning on the demonstrations with TRL: loss on assistant turns only, on the CPU, no
    checkpoints (the trainer's scratch directory inside ``directory`` is removed). Returns the mean training loss
    (over the steps run). ``stop_after``: stop after that many of the ``TRAIN_STEPS`` steps (same batches, same
    schedule: the full run's first steps). ``on_step(step, {"sft": loss})`` is called after each step with the
    trainer's loss of that step (the trainer logs every step for it; logging does not change the training)."""
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    class StepLosses(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if stop_after is not None and state.global_step >= stop_after:
                control.should_training_stop = True

        def on_log(self, args, state, control, logs=None, **kwargs):
            if on_step is not None and logs and "loss" in logs:
                on_step(state.global_step, {"sft": logs["loss"]})

    args = SFTConfig(
        output_dir=str(directory / "_sft"),
        max_steps=TRAIN_STEPS,
        per_device_train_batch_size=BATCH_SIZE,
        learning_rate=LEARNING_RATE,
        lr_scheduler_type="cosine",
        warmup_steps=WARMUP_STEPS,
        weight_decay=0.0,
        assistant_only_loss=True,
        padding_free=True,  # concatenate each batch into one row: no padding (sdpa masks per sequence)
        max_length=None,  # required with padding_free; the demonstrations are short
        use_cpu=True,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        report_to="none",
        save_strategy="no",
        logging_strategy="steps",  # every step's loss to StepLosses
        logging_steps=1,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=seed,
        data_seed=seed,
    )
    dataset = Dataset.from_dict({"messages": conversations})
    trainer = SFTTrainer(
        model=model, args=args, train_dataset=dataset, processing_class=tokenizer, callbacks=[StepLosses()]
    )
    trainer.remove_callback(PrinterCallback)  # it would print the final metrics dict
    output = trainer.train()
    shutil.rmtree(directory / "_sft", ignore_errors=True)
    model.eval()
    return {"sft_mean_over_all_steps": output.training_loss}


def evaluate_warm_start(model, tokenizer, *, num: int = 100, seed: int = 10_000) -> dict[str, float]:
    """Sample replies at temperature 1 to ``num`` arithmetic questions and ``num`` guess_number game states.

    The game states are played games (from the env's demonstrations) cut just before one of their guesses, so
    they include later turns, after "Higher." / "Lower." hints. Returns the fractions

    * ``arithmetic_format``: well-formed replies (a bare integer or a worked sum, followed by ``<|im_end|>``);
    * ``arithmetic_correct``: replies whose answer is the right sum;
    * ``arithmetic_worked``: replies that work the sum out (``Let's add: 3 + 4 = 7``);
    * ``arithmetic_greedy_correct``: greedy replies whose answer is the right sum;
    * ``guess_in_range``: guesses that are a bare integer in the game's range, followed by ``<|im_end|>``.
    """
    import random

    from trl_envs.envs.arithmetic import demonstrations as arithmetic_demos
    from trl_envs.envs.arithmetic import read_answer
    from trl_envs.envs.guess_number import demonstrations as guess_demos

    questions = arithmetic_demos(num, seed=seed)
    answers = sample_replies(model, tokenizer, [convo[:1] for convo in questions], max_new_tokens=24)
    rng = random.Random(seed)
    states = [game[: rng.randrange(0, len(game), 2) + 1] for game in guess_demos(num, seed=seed)]
    guesses = sample_replies(model, tokenizer, states)
    greedy = sample_replies(model, tokenizer, [convo[:1] for convo in questions], temperature=0.0, max_new_tokens=24)

    def right(reply: str | None, convo) -> bool:
        return reply is not None and read_answer(reply) == int(convo[1]["content"])

    return {
        "arithmetic_format": sum(a is not None and read_answer(a) is not None for a in answers) / num,
        "arithmetic_correct": sum(right(a, q) for a, q in zip(answers, questions)) / num,
        "arithmetic_worked": sum(a is not None and "=" in a for a in answers) / num,
        "arithmetic_greedy_correct": sum(right(a, q) for a, q in zip(greedy, questions)) / num,
        "guess_in_range": sum(_is_integer(g) and 1 <= int(g) <= 16 for g in guesses) / num,
    }


def sample_replies(
    model, tokenizer, conversations: list[list[dict[str, str]]], *, max_new_tokens: int = 8, temperature: float = 1.0
) -> list[str | None]:
    """Sample one assistant reply per conversation (left-padded batch; ``temperature=0``: greedy). ``None`` where the
    reply did not end with ``<|im_end|>`` within ``max_new_tokens``."""
    import torch

    prompts = [tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in conversations]
    padding_side, tokenizer.padding_side = tokenizer.padding_side, "left"
    try:
        batch = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    finally:
        tokenizer.padding_side = padding_side
    with torch.no_grad():
        sampling = (
            dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
            if temperature > 0
            else dict(do_sample=False)
        )
        out = model.generate(
            **batch,
            **sampling,
            max_new_tokens=max_new_tokens,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
    replies: list[str | None] = []
    for row in out[:, batch["input_ids"].shape[1] :].tolist():
        if tokenizer.eos_token_id not in row:
            replies.append(None)
            continue
        replies.append(tokenizer.decode(row[: row.index(tokenizer.eos_token_id)]))
    return replies


_INTEGER = re.compile(r"-?[0-9]+")


def _is_integer(text: str | None) -> bool:
    return text is not None and _INTEGER.fullmatch(text) is not None


# -- command line ---------------------------------------------------------------------------------------------------


def _log(message: str) -> None:
    print(f"[build_tiny_models] {message}", file=sys.stderr, flush=True)


def build_preferences(directory: Path, seed: int) -> None:
    """The built-in preference dataset into ``directory`` (replaced)."""
    from trl_envs.training_data.preference_data import build_preference_dataset

    build_preference_dataset(str(directory), seed=seed, force=True)
    _log(f"built {DATASET_NAME} into {directory}")


def build(name: str, target: Path, seed: int) -> dict | None:
    """Build ``name`` (a model or the preference dataset) into ``target``, replacing it only once the build is done;
    return the model's build record."""
    target = target.resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.building-", dir=target.parent))
    try:
        if name == DATASET_NAME:
            build_preferences(staging / "data", seed)
            record = None
        else:
            (staging / "data").mkdir()
            record = build_model(staging / "data", seed, name)
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging / "data", target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return record


def compare(rebuilt: dict, shipped: dict, tolerance: float = TOLERANCE) -> dict:
    """How a rebuild's record compares with the shipped one: each warm-start figure of both, the largest absolute
    difference, whether it is within ``tolerance``, and whether the weights are the very same bytes."""
    figures = {
        key: {"shipped": shipped["warm_start_eval"][key], "rebuilt": value}
        for key, value in rebuilt["warm_start_eval"].items()
    }
    largest = max(abs(f["rebuilt"] - f["shipped"]) for f in figures.values())
    return {
        "name": rebuilt["name"],
        "warm_start_eval": figures,
        "largest_difference": round(largest, 4),
        "tolerance": tolerance,
        "same_quality": largest <= tolerance,
        "same_weights": rebuilt["sha256"].get("model.safetensors") == shipped["sha256"].get("model.safetensors"),
        "rebuild_seconds": rebuilt["build_seconds"],
    }


def quick_check(name: str, seed: int, shipped: dict) -> dict:
    """The cheap part of a rebuild of model ``name`` compared with ``shipped`` (its ``build.json`` record): the
    demonstrations (fingerprint, exactly), the recipe's settings (:func:`recipe`, exactly), the files the recipe
    determines apart from the weights (tokenizer, chat template, configs: the same content as the shipped files, apart
    from what only records the libraries' version or state, :data:`_LIBRARY_STATE`) and the first
    :data:`QUICK_CHECK_STEPS` warm-start steps (each source's loss at each step of :data:`RECORDED_LOSS_STEPS` within
    :data:`LOSS_TOLERANCE`, relative). ``same_recipe`` is true when all of them match; a figure the shipped record
    lacks (a build older than the figure) is a mismatch. Seconds, not minutes: the full rebuild is ``--check``."""
    start = time.monotonic()
    demonstrations, tokenizer, model = _start_build(name, seed)
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        _, losses_at_step = _warm_start_recipe(
            name, demonstrations, tokenizer, model, directory, seed, stop_after=QUICK_CHECK_STEPS
        )
        model.config.use_cache = True  # as the full build saves it
        model.save_pretrained(directory)
        tokenizer.save_pretrained(directory)
        files = {
            file: _recipe_content(directory / file) == _recipe_content(ASSETS / name / file)
            for file in sorted(shipped["sha256"])
            if file != "model.safetensors"
        }
    settings = json.loads(json.dumps(recipe(name)))  # as build.json holds them
    recorded = shipped.get("train_loss_at_step", {})
    losses = {
        step: {
            source: {"shipped": recorded.get(step, {}).get(source), "rebuilt": value}
            for source, value in step_losses.items()
        }
        for step, step_losses in losses_at_step.items()
    }
    differences = [
        abs(pair["rebuilt"] - pair["shipped"]) / abs(pair["shipped"]) if pair["shipped"] else float("inf")
        for step_losses in losses.values()
        for pair in step_losses.values()
    ]
    largest = max(differences)
    fingerprint = demonstrations_sha256(demonstrations)
    same_demonstrations = shipped.get("demonstrations_sha256") == fingerprint
    same_settings = settings == shipped["recipe"]
    return {
        "name": name,
        "steps": QUICK_CHECK_STEPS,
        "demonstrations_sha256": {
            "shipped": shipped.get("demonstrations_sha256"),
            "rebuilt": fingerprint,
            "same": same_demonstrations,
        },
        "same_recipe_settings": same_settings,
        "same_files": files,
        "train_loss_at_step": losses,
        "largest_relative_difference": largest if largest == float("inf") else float(f"{largest:.3g}"),
        "loss_tolerance": LOSS_TOLERANCE,
        "same_recipe": same_demonstrations and same_settings and all(files.values()) and largest <= LOSS_TOLERANCE,
        "seconds": round(time.monotonic() - start, 1),
        "built_with": {"shipped": shipped.get("built_with"), "here": _libraries()},
    }


_LIBRARY_STATE = {
    "config.json": {"transformers_version"},
    "generation_config.json": {"transformers_version"},
    "tokenizer.json": {"padding", "truncation"},  # the backend's last padding call (the evaluation pads left)
}
"""Keys of the saved JSON files that record the libraries' version or state rather than the recipe."""


def _recipe_content(path: Path) -> object:
    """What of the file ``path`` the recipe determines: a JSON file's content without its :data:`_LIBRARY_STATE`
    keys, any other file's bytes (``None`` if there is no such file)."""
    if not path.is_file():
        return None
    if path.name not in _LIBRARY_STATE:
        return path.read_bytes()
    return {key: value for key, value in json.loads(path.read_text()).items() if key not in _LIBRARY_STATE[path.name]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python scripts/tiny_models/build_tiny_models.py", description=__doc__.split("\n\n")[0]
    )
    targets = (*MODEL_NAMES, DATASET_NAME)
    parser.add_argument("--name", choices=targets, action="append", help="what to build (default: all three)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output_dir", default=None, help=f"with one --name (default: {ASSETS}/<name>)")
    parser.add_argument(
        "--check",
        action="store_true",
        help=f"rebuild each model into a scratch folder and compare with the shipped one (within {TOLERANCE}); "
        "prints the comparison as JSON, exit status 1 if a model is off",
    )
    parser.add_argument(
        "--quick_check",
        action="store_true",
        help=f"compare the demonstrations, tokenizer and configs of each model's recipe and its first "
        f"{QUICK_CHECK_STEPS} warm-start steps with the shipped build's record (seconds); prints the comparison as "
        "JSON, exit status 1 if a model is off",
    )
    args = parser.parse_args(argv)
    names = args.name or list(targets)
    if args.output_dir and len(names) != 1:
        parser.error("--output_dir needs exactly one --name")
    if args.check and args.quick_check:
        parser.error("--check or --quick_check, not both")
    if args.quick_check:
        results = [
            quick_check(name, args.seed, json.loads((ASSETS / name / BUILD_RECORD).read_text()))
            for name in names
            if name != DATASET_NAME
        ]
        print(json.dumps(results, indent=2))
        return 0 if all(r["same_recipe"] for r in results) else 1
    if args.check:
        results = []
        for name in names:
            if name == DATASET_NAME:
                continue
            with tempfile.TemporaryDirectory() as scratch:
                rebuilt = build(name, Path(scratch) / name, args.seed)
            shipped = json.loads((ASSETS / name / BUILD_RECORD).read_text())
            results.append(compare(rebuilt, shipped))
        print(json.dumps(results, indent=2))
        return 0 if all(r["same_quality"] for r in results) else 1
    for name in names:
        target = Path(args.output_dir) if args.output_dir else ASSETS / name
        build(name, target, args.seed)
        print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
