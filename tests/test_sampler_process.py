"""The sampler process (``trl_envs.samplers.process``) that asynchronous GRPO samples with: its copy of the policy
shares the frozen weights, samples with the weights staged last (never half-updated ones), reports the version it
sampled with, raises the child's errors in the parent, names a dead child, and does not run the training script's top
level a second time.

CI time: about 25 s on 2 CPU cores (each sampler process imports torch and transformers).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
import torch
from transformers import AutoModelForCausalLM

from trl_envs import HFSampler, SampleRequest
from trl_envs.samplers.process import SamplerProcess, SamplerProcessDied

pytestmark = pytest.mark.timeout(300)


def requests(tokenizer, n=3, max_tokens=6) -> list[SampleRequest]:
    prompt = tokenizer("What is 2 + 3?")["input_ids"]
    return [SampleRequest(prompt=prompt + [i + 5], stop=[], max_tokens=max_tokens) for i in range(n)]


def tokens(results) -> list[list[int]]:
    return [list(r.tokens) for r in results]


@pytest.fixture
def policy(tiny_model_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    for name, p in model.named_parameters():
        p.requires_grad_("layers.0." in name)  # a LoRA-like split: only some weights train
    return model


def test_samples_with_the_staged_weights_and_shares_the_frozen_ones(policy, tokenizer):
    greedy = dict(temperature=0.0)
    local = HFSampler(policy, tokenizer, **greedy)
    sampler = SamplerProcess(policy, tokenizer, version=0, sampling_settings=greedy)
    try:
        frozen = {n: p for n, p in policy.named_parameters() if not p.requires_grad}
        copied = dict(sampler.model.named_parameters())
        assert all(copied[n] is p and p.is_shared() for n, p in frozen.items())  # shared with the child, not copied
        assert sampler.num_copied_parameters == sum(p.numel() for p in policy.parameters() if p.requires_grad) > 0

        version, before = sampler.sample_with_version(requests(tokenizer))
        assert version == 0 and tokens(before) == tokens(local.sample(requests(tokenizer)))

        with torch.no_grad():
            for p in policy.parameters():
                if p.requires_grad:
                    p.add_(torch.randn_like(p) * 0.5)
        changed = tokens(local.sample(requests(tokenizer)))
        assert changed != tokens(before)  # the training moved the greedy answers
        version, still = sampler.sample_with_version(requests(tokenizer))
        assert version == 0 and tokens(still) == tokens(before)  # not staged: the child keeps its weights

        sampler.stage(version=3)
        assert sampler.staged_version == 3
        version, after = sampler.sample_with_version(requests(tokenizer))
        assert version == 3 and tokens(after) == changed
        expected = [lp for r in local.sample(requests(tokenizer)) for lp in r.logprobs]
        assert [lp for r in after for lp in r.logprobs] == pytest.approx(expected, abs=1e-5)
    finally:
        sampler.close()
    assert not sampler.process.is_alive()


def test_child_errors_are_raised_in_the_parent_and_a_dead_child_is_named(policy, tokenizer):
    sampler = SamplerProcess(policy, tokenizer, version=0, sampling_settings=dict(temperature=0.0))
    try:
        with pytest.raises(Exception) as raised:  # an empty prompt: generate's own error, raised here as it was
            sampler.sample([SampleRequest(prompt=[], stop=[], max_tokens=4)])
        assert "in the sampler process" in str(raised.value.__cause__)
        assert len(sampler.sample(requests(tokenizer))) == 3  # the child serves on after an error

        os.kill(sampler.process.pid, signal.SIGKILL)
        with pytest.raises(
            SamplerProcessDied, match=r"sampler process \(pid \d+, .*\) was killed by SIGKILL \(exit code -9"
        ):
            sampler.sample(requests(tokenizer))
    finally:
        sampler.close()


def test_the_training_script_is_not_run_again_in_the_child(tmp_path, tiny_model_path):
    """A script without an ``if __name__ == "__main__":`` guard starts the sampler process once and samples: its top
    level runs once (multiprocessing's spawn would import it again in the child)."""
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            f"""
            from transformers import AutoModelForCausalLM, AutoTokenizer
            from trl_envs import SampleRequest
            from trl_envs.samplers.process import SamplerProcess
            print("TOP LEVEL RAN", flush=True)
            tokenizer = AutoTokenizer.from_pretrained({tiny_model_path!r})
            model = AutoModelForCausalLM.from_pretrained({tiny_model_path!r})
            sampler = SamplerProcess(model, tokenizer, version=0)
            print(len(sampler.sample([SampleRequest(prompt=[5, 6, 7], stop=[], max_tokens=3)])), "SAMPLED")
            sampler.close()
            """
        )
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("TOP LEVEL RAN") == 1 and "1 SAMPLED" in done.stdout


def test_a_model_class_defined_in_the_training_script_is_named_at_start(tmp_path, tiny_model_path):
    """The child cannot import a class that lives in the training script: the error says so, at start."""
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            f"""
            from transformers import AutoTokenizer, Qwen2ForCausalLM
            from trl_envs.samplers.process import SamplerProcess, SamplerProcessDied, SamplerProcessError

            class MyModel(Qwen2ForCausalLM):
                pass

            if __name__ == "__main__":
                model = MyModel.from_pretrained({tiny_model_path!r})
                try:
                    SamplerProcess(model, AutoTokenizer.from_pretrained({tiny_model_path!r}), version=0)
                except SamplerProcessError as error:
                    print("ERROR:", error)
            """
        )
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ERROR: the sampler process" in done.stdout and "died at 'start'" in done.stdout
    assert "defined in the training script itself" in done.stdout
