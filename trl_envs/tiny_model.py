"""Tiny ChatML chat models, built offline on a CPU once per machine, for tests, examples and smoke runs.

:func:`build_tiny_model` returns the directory of a Hugging Face model that loads with
``AutoTokenizer.from_pretrained`` / ``AutoModelForCausalLM.from_pretrained``. Two recipes, by name:

* ``tiny-chat-v5`` (:data:`DEMO_MODEL_NAME`), the demo model of the scripts, ``trl-envs play`` / ``eval`` /
  ``build-tiny-model``: a randomly initialised two-layer ``Qwen2ForCausalLM`` (float32, output layer untied from the
  embeddings) warm-started by :mod:`trl_envs.warm_start` on weighted demonstrations of ``arithmetic`` (bare and worked
  sums) and ``guess_number`` (including halving games), so that its greedy answer to every sum with operands 0..9 is
  right while, sampled at temperature 1, it is right only about a third of the time: GRPO has a signal on every
  question;
* ``tiny-chat-v1`` (:data:`MODEL_NAME`), the tests' model and this function's default: smaller and faster to build,
  tied embeddings, warm-started with TRL's ``SFTTrainer`` just enough that it answers with a bare number and
  ``<|im_end|>`` and is right only some of the time.

Both have a byte-level BPE tokenizer trained on the spot (a few hundred tokens; every digit is its own token) with the
special tokens ``<|im_start|>``, ``<|im_end|>`` (EOS, end of turn) and ``<|endoftext|>`` (padding), and a Qwen-style
ChatML chat template (``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message, generation prompt
``<|im_start|>assistant\\n``, no default system message).

The build is cached: a finished directory holds a ``BUILD_COMPLETE`` marker (JSON: seed, build time, warm-start
evaluation), written last, and later calls return it at once. Several processes may call :func:`build_tiny_model`
at the same time (e.g. every rank of ``accelerate launch``): one builds, under an exclusive lock on a file next to the
directory (``filelock``, on every platform), into a temporary sibling that is renamed into place; the others wait on the
lock and reuse it.

The warm start runs in a child Python process with a clean environment, so it never joins (or hangs) the caller's
``torch.distributed`` job, never touches the caller's ``accelerate`` state, and always runs on the CPU.

Command line: ``python -m trl_envs.tiny_model [--output_dir DIR] [--force]`` prints the directory.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from .model_names import DEMO_MODEL_NAME, MODEL_NAME, MODEL_NAMES  # noqa: F401 (re-exported)

MARKER_FILE = "BUILD_COMPLETE"
"""Written last into a build; a directory holding it is a finished model."""

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

# The v2 recipe (DEMO_MODEL_NAME). Tuned (seed 0) so that the model's greedy answer to every sum with operands 0..9 is
# right, while sampled at temperature 1 it is right ~37% of the time (the teacher of trl_envs.warm_start); GRPO
# then has reward variance on every question. Wider than v1 so that 100 sums are learned within the step budget.
# v4 adds the halving games of guess_number (trl_envs.warm_start.HALVING_SHARE, halving_examples) and twice its
# guess_number batch. v5 is v4's recipe computed faster (trl_envs.warm_start: logits only where there is a label, no
# attention mask; two threads), which rounds differently: a different model, so a new name.
V2_MODEL_CONFIG = dict(
    hidden_size=64,
    intermediate_size=192,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=1024,
)
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

# Variables that would make the warm-start child join the caller's distributed job or change its device/backend.
_DISTRIBUTED_ENV = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "GROUP_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "OMP_NUM_THREADS",
)
_DISTRIBUTED_ENV_PREFIXES = ("ACCELERATE_", "FSDP_", "TORCHELASTIC_", "PET_")


def default_tiny_model_path(name: str = MODEL_NAME) -> str:
    """``$TRL_ENVS_CACHE/<name>`` (default ``tiny-chat-v1``), where ``TRL_ENVS_CACHE`` defaults to
    ``~/.cache/trl_envs``."""
    _check_name(name)
    cache = os.environ.get("TRL_ENVS_CACHE") or os.path.join("~", ".cache", "trl_envs")
    return os.path.join(os.path.expanduser(cache), name)


def _check_name(name: str) -> None:
    if name not in MODEL_NAMES:
        raise ValueError(f"tiny_model: unknown model name {name!r}; known: {', '.join(MODEL_NAMES)}")


def is_built(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a finished build (its marker file exists)."""
    return os.path.isfile(os.path.join(path, MARKER_FILE))


def build_tiny_model(
    output_dir: str | None = None, *, force: bool = False, seed: int = 0, name: str = MODEL_NAME
) -> str:
    """Build the tiny chat model into ``output_dir`` (default :func:`default_tiny_model_path` ``(name)``) and return
    its path. ``name`` picks the recipe: ``tiny-chat-v1`` (:data:`MODEL_NAME`, small and fast, for tests) or
    ``tiny-chat-v5`` (:data:`DEMO_MODEL_NAME`, the demo model the training scripts use).

    If ``output_dir`` already holds a finished build it is returned immediately, without rebuilding, whatever
    ``seed`` it was built with; ``force=True`` rebuilds and replaces it. ``seed`` fixes the tokenizer corpus, the
    initial weights and the warm start. Safe to call from several processes at once: exactly one builds, the
    others block until it is done and then return the same directory.

    Raises:
        FileExistsError: ``output_dir`` is a non-empty directory that is not a finished build (and not ``force``);
            it is never deleted in that case.
        RuntimeError: the build failed (its stderr went to this process's stderr).
    """
    _check_name(name)
    target = Path(output_dir if output_dir is not None else default_tiny_model_path(name)).expanduser().resolve()
    if not force and is_built(target):
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(target.parent / f".{target.name}.lock"):
        if not force and is_built(target):  # another process built it while we waited for the lock
            return str(target)
        if target.exists() and not force and not _is_empty_dir(target):
            raise FileExistsError(
                f"build_tiny_model: {target} exists, is not empty and holds no finished build; "
                "remove it, pick another directory, or pass force=True to replace it"
            )
        for stale in _scratch_dirs(target):  # we hold the lock, so these were left by a builder that was killed
            shutil.rmtree(stale, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.{_STAGING}-", dir=target.parent))
        os.chmod(staging, 0o755)  # mkdtemp makes it private; the finished model is an ordinary cache directory
        try:
            _log(f"building the tiny model {name} into {target} (once: it is cached; progress every 10 s)")
            _run_build_subprocess(staging, seed, name)
            _move_into_place(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return str(target)


@contextlib.contextmanager
def _exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (``filelock.FileLock``; the file is created if missing) for the ``with``
    block."""
    from filelock import FileLock, Timeout

    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        _log(f"waiting for another process to finish building (lock: {path})")
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


HEARTBEAT_SECONDS = 10.0
"""How often a build in progress says it is still building."""

_STAGING, _RETIRED = "building", "old"  # infixes of the scratch directories next to the target


def _scratch_dirs(target: Path) -> list[Path]:
    return [p for infix in (_STAGING, _RETIRED) for p in target.parent.glob(f".{target.name}.{infix}-*")]


def _is_empty_dir(path: Path) -> bool:
    return path.is_dir() and not any(path.iterdir())


def _move_into_place(staging: Path, target: Path) -> None:
    """Atomically rename the finished ``staging`` dir to ``target``, first moving aside whatever is there."""
    if target.is_dir() and _is_empty_dir(target):
        target.rmdir()
    elif target.exists() or target.is_symlink():
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.{_RETIRED}-", dir=target.parent))
        os.replace(target, old / target.name)
        shutil.rmtree(old, ignore_errors=True)
    os.replace(staging, target)


def _run_build_subprocess(directory: Path, seed: int, name: str = MODEL_NAME) -> None:
    """Run :func:`_build_into` in a fresh interpreter with the distributed/accelerate variables removed."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in _DISTRIBUTED_ENV and not key.startswith(_DISTRIBUTED_ENV_PREFIXES)
    }
    env["CUDA_VISIBLE_DEVICES"] = ""  # the build is CPU-only; do not initialise (or occupy) any GPU
    env["DS_ACCELERATOR"] = "cpu"  # where DeepSpeed is installed, spare it (and us) the GPU probe and its warning
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    package_root = str(Path(__file__).resolve().parent.parent)  # so the child imports this very copy of trl_envs
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    command = [
        sys.executable,
        "-m",
        "trl_envs.tiny_model",
        "--_build_into",
        str(directory),
        "--seed",
        str(seed),
        "--name",
        name,
    ]
    # The child's stdout is pointed at its stderr (see `main`), so nothing but our own result reaches stdout.
    start = time.monotonic()
    child = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL)
    try:
        while True:
            try:
                child.wait(timeout=HEARTBEAT_SECONDS)
                break
            except subprocess.TimeoutExpired:  # a heartbeat, so a long build is never silent
                _log(f"still building ({time.monotonic() - start:.0f}s elapsed)")
    except BaseException:  # Ctrl-C or an error here: do not leave the child running
        child.kill()
        child.wait()
        raise
    result = child
    if result.returncode != 0 or not is_built(directory):
        raise RuntimeError(
            f"build_tiny_model: building the tiny model failed (exit code {result.returncode}); see the messages above"
        )


def _log(message: str) -> None:
    print(f"[trl_envs.tiny_model] {message}", file=sys.stderr, flush=True)


# -- the build itself (runs in the child process) -------------------------------------------------------------------


def _build_into(directory: Path, seed: int, name: str = MODEL_NAME) -> None:
    """Build tokenizer and warm-started model (recipe ``name``) into the existing empty ``directory``, marker file
    last."""
    start = time.monotonic()
    _quiet_libraries()
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM, set_seed

    torch.set_num_threads(V2_TORCH_THREADS if name == DEMO_MODEL_NAME else TORCH_THREADS)
    set_seed(seed)
    if name == DEMO_MODEL_NAME:
        from . import warm_start

        sources = [
            warm_start.Source("arithmetic", warm_start.arithmetic_examples(), V2_ARITHMETIC_PER_STEP),
            warm_start.Source("worked_sums", warm_start.worked_sum_examples(), V2_WORKED_PER_STEP),
            warm_start.Source(
                "guess_number", warm_start.guess_number_examples(V2_GUESS_GAMES, seed), V2_GUESS_PER_STEP
            ),
            warm_start.Source("halving", warm_start.halving_examples(), V2_HALVING_PER_STEP),
        ]
        conversations = [example.messages for source in sources for example in source.examples]
    else:
        conversations = _demonstrations(seed)
    tokenizer = _train_tokenizer(conversations)
    _log(f"trained a {len(tokenizer)}-token tokenizer ({time.monotonic() - start:.0f}s)")

    demo = name == DEMO_MODEL_NAME
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

    if name == DEMO_MODEL_NAME:
        _log(f"warm-starting on {len(conversations)} weighted demonstrations ({V2_TRAIN_STEPS} steps)")
        warm_start.train(
            model,
            tokenizer,
            sources,
            steps=V2_TRAIN_STEPS,
            learning_rate=V2_LEARNING_RATE,
            warmup_steps=V2_WARMUP_STEPS,
            seed=seed,
        )
    else:
        _log(f"warm-starting on {len(conversations)} demonstrations ({TRAIN_STEPS} steps)")
        _warm_start(model, tokenizer, conversations, directory, seed)
    model.config.use_cache = True  # the trainer turns the KV cache off for training
    evaluation = evaluate_warm_start(model, tokenizer, seed=seed + 10_000)
    _log(
        "sampled at temperature 1: "
        + ", ".join(f"{key} {value:.0%}" for key, value in evaluation.items())
        + f" ({time.monotonic() - start:.0f}s)"
    )

    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    marker = {
        "name": name,
        "seed": seed,
        "build_seconds": round(time.monotonic() - start, 1),
        "warm_start_eval": evaluation,
    }
    (directory / MARKER_FILE).write_text(json.dumps(marker, indent=2) + "\n")
    _log(f"built in {marker['build_seconds']:.0f}s")


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


def _warm_start(model, tokenizer, conversations, directory: Path, seed: int) -> None:
    """Supervised fine-tuning on the demonstrations with TRL: loss on assistant turns only, on the CPU, no
    checkpoints (the trainer's scratch directory inside ``directory`` is removed)."""
    from datasets import Dataset
    from transformers import PrinterCallback
    from trl import SFTConfig, SFTTrainer

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
        logging_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=seed,
        data_seed=seed,
    )
    dataset = Dataset.from_dict({"messages": conversations})
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
    trainer.remove_callback(PrinterCallback)  # it would print the final metrics dict
    trainer.train()
    shutil.rmtree(directory / "_sft", ignore_errors=True)
    model.eval()


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


def main(argv: list[str] | None = None) -> None:
    """``python -m trl_envs.tiny_model [--output_dir DIR] [--force] [--seed N]``: build or reuse; print the path."""
    parser = argparse.ArgumentParser(prog="python -m trl_envs.tiny_model", description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", default=None, help=f"default: {default_tiny_model_path(DEMO_MODEL_NAME)}")
    parser.add_argument("--force", action="store_true", help="rebuild even if a finished build is there")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--name", default=DEMO_MODEL_NAME, choices=MODEL_NAMES, help="the recipe (default: %(default)s)"
    )
    parser.add_argument("--_build_into", default=None, help=argparse.SUPPRESS)  # internal: the child process
    args = parser.parse_args(argv)
    if args._build_into is not None:
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # library chatter must not reach the caller's stdout
        _build_into(Path(args._build_into), args.seed, args.name)
        return
    print(build_tiny_model(args.output_dir, force=args.force, seed=args.seed, name=args.name))


if __name__ == "__main__":
    main()
