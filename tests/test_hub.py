"""Publishing a trained model: the folder that is pushed (adapter loadable with PEFT, same outputs as the trained
model; tokenizer, config, curves, model card with the before/after evaluation), and the upload itself, through
huggingface_hub's real ``create_repo`` + ``upload_folder`` against a local stand-in of the Hub's HTTP API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cpu_configs import cpu_grpo_config
from hub_stand_in import TOKEN, USER, HubStandIn

from trl_envs.cli.run_folder import RUN_RECORD
from trl_envs.hub.push import files_to_push, push_folder_to_hub
from trl_envs.trainers.checkpoints import LOCK_FILE

pytestmark = pytest.mark.timeout(400)

ROOT = Path(__file__).resolve().parents[1]
REPO_ID = "me/tiny-grpo-arithmetic"


@pytest.fixture
def online(monkeypatch):
    """huggingface_hub allowed to send requests (the suite runs with HF_HUB_OFFLINE=1)."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)


@pytest.fixture(scope="module")
def published(tmp_path_factory, tiny_model_path, tokenizer, renderer):
    """Two GRPO steps with a LoRA adapter on arithmetic, saved like the script does, then published and pushed."""
    import huggingface_hub.constants
    from peft import LoraConfig

    from trl_envs import EnvGRPOTrainer, make_env_dataset
    from trl_envs.hub.publish import PublishArguments, publish_run, take_over_push

    output_dir = tmp_path_factory.mktemp("run") / "tiny-grpo-arithmetic"
    args = cpu_grpo_config(
        output_dir.parent,
        output_dir=str(output_dir),
        max_steps=2,
        max_turns=2,
        learning_rate=2e-2,
        disable_tqdm=True,
        push_to_hub=True,
        hub_model_id=REPO_ID,
        hub_token=TOKEN,
    )
    with pytest.MonkeyPatch.context() as mp, HubStandIn() as hub:
        mp.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
        mp.setattr(huggingface_hub.constants, "ENDPOINT", hub.url)
        push = take_over_push(args)
        env = make_env_dataset("arithmetic", renderer, group_size=4, batch_size=2, num_batches=10, max_operand=3)
        trainer = EnvGRPOTrainer(
            tiny_model_path,
            args,
            env,
            processing_class=tokenizer,
            peft_config=LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM"),
        )
        trainer.train()
        trainer.save_model(str(output_dir))
        tokenizer.save_pretrained(str(output_dir))
        result = publish_run(
            trainer,
            base_model=tiny_model_path,
            algorithm="grpo",
            envs=["arithmetic"],
            push=push,
            publish_args=PublishArguments(card_eval_problems=3, card_eval_samples=2),
            env_kwargs={"max_operand": 3},
        )
    return trainer, result, hub, output_dir


def test_pushed_adapter_loads_with_peft_and_gives_the_trained_models_outputs(published, tiny_model_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    trainer, _, _, output_dir = published
    ids = torch.tensor([[1, 410, 201, 264, 262, 223, 23, 265, 223, 23, 33, 2, 201, 1, 464, 201]])
    trained = trainer.model.eval()
    with torch.no_grad():
        expected = trained(input_ids=ids).logits
        base = AutoModelForCausalLM.from_pretrained(tiny_model_path)
        base_logits = base(input_ids=ids).logits
        loaded = PeftModel.from_pretrained(base, str(output_dir)).eval()
        got = loaded(input_ids=ids).logits
    assert (expected - base_logits).abs().max() > 1e-4, "training did not change the model: the check is vacuous"
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_the_stand_in_received_exactly_the_folder_byte_for_byte(published):
    _, result, hub, output_dir = published
    assert result.repo_url == f"{hub.url}/{REPO_ID}"
    on_disk = {p.relative_to(output_dir).as_posix(): p.read_bytes() for p in output_dir.rglob("*") if p.is_file()}
    expected = {
        "adapter_config.json",
        "adapter_model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "README.md",
        "training_config.json",
        "training_curves.png",
        "eval_results.json",
    }
    assert expected <= set(on_disk), sorted(on_disk)
    bookkeeping = {name for name in on_disk if name in (LOCK_FILE, RUN_RECORD)}
    pushed = {name: data for name, data in on_disk.items() if name not in bookkeeping}
    assert sorted(pushed) == files_to_push(output_dir)  # nothing but the run's bookkeeping is left out of the push
    repo = hub.repos[REPO_ID]
    assert repo.files == pushed  # same names, identical bytes
    assert not bookkeeping & set(repo.files)
    assert [c["revision"] for c in repo.commits] == ["main"]  # one commit
    assert hub.unexpected == []
    upload = [(m, p) for m, p, _ in hub.requests if p != "/api/agent-harnesses"]
    # the repo is created once before training (take_over_push: a bad token shows then), found again at the end
    assert upload == [
        ("POST", "/api/repos/create"),
        ("POST", "/api/repos/create"),
        ("POST", "/api/validate-yaml"),
        ("POST", f"/api/models/{REPO_ID}/preupload/main"),
        ("POST", f"/api/models/{REPO_ID}/commit/main"),
    ]
    assert all(authorized for _, p, authorized in hub.requests if p != "/api/agent-harnesses")


def test_model_card_names_env_base_model_eval_table_plot_and_loading(published, tiny_model_path):
    from huggingface_hub import ModelCard

    _, result, _, output_dir = published
    card = ModelCard.load(output_dir / "README.md")
    assert card.data.library_name == "peft"
    assert {"trl", "trl-envs", "grpo", "env:arithmetic"} <= set(card.data.tags)
    assert card.data.get("base_model") is None  # a local path is not a Hub id: kept out of the metadata
    text = card.text
    assert "LoRA (PEFT) adapter" in text and "tiny-chat-v1" in text and "`arithmetic`" in text
    before, after = result.eval_before, result.eval_after
    assert (
        f"| mean total reward ± std | {before.mean_reward:.3f} ± {before.std_reward:.3f} | "
        f"{after.mean_reward:.3f} ± {after.std_reward:.3f} |" in text
    )
    assert f"| pass@2 | {before.pass_at_k[2]:.3f} | {after.pass_at_k[2]:.3f} |" in text
    assert "![Training curves" in text and "(training_curves.png)" in text
    assert f'AutoPeftModelForCausalLM.from_pretrained("{REPO_ID}")' in text
    assert f'PeftModel.from_pretrained(base, "{REPO_ID}")' in text
    assert "trl-envs eval --model me/tiny-grpo-arithmetic --env arithmetic --env_kwargs" in text

    saved = json.loads((output_dir / "eval_results.json").read_text())
    assert saved["after"]["mean_reward"] == pytest.approx(after.mean_reward)
    assert saved["env"] == "arithmetic" and saved["env_kwargs"] == {"max_operand": 3}
    config = json.loads((output_dir / "training_config.json").read_text())
    assert config["algorithm"] == "grpo" and config["envs"] == ["arithmetic"] and config["push_to_hub"] is True
    assert config["training_args"]["hub_model_id"] == REPO_ID
    assert TOKEN not in (output_dir / "training_config.json").read_text()  # the token is masked


def test_the_cards_eval_command_reproduces_the_after_column(published, tmp_path):
    """The 'after' column is what anyone gets from the pushed folder with the command the card shows."""
    import shlex

    from trl_envs.cli.commands import main

    _, result, _, output_dir = published
    command = json.loads((output_dir / "eval_results.json").read_text())["settings"]["command"]
    assert f"--model {REPO_ID}" in command and command in (output_dir / "README.md").read_text()
    argv = shlex.split(command.replace(REPO_ID, str(output_dir)))
    assert argv[:2] == ["trl-envs", "eval"]
    assert main(argv[1:] + ["--device", "cpu", "--no_progress", "--output", str(tmp_path / "again.json")]) == 0
    again = json.loads((tmp_path / "again.json").read_text())
    assert again["episode_rewards"] == result.eval_after.episode_rewards
    assert again["pass_at_k"]["2"] == pytest.approx(result.eval_after.pass_at_k[2])


def test_training_curves_png_from_the_real_log_history(published):
    from matplotlib.image import imread

    trainer, result, _, output_dir = published
    assert any("entropy" in h and "env/all/reward/total" in h for h in trainer.state.log_history)
    png = output_dir / "training_curves.png"
    assert result.plot_path == str(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    height, width = imread(png).shape[:2]
    assert width == 700 and height > 400  # two panels: reward and entropy


def test_push_excludes_checkpoints_and_scratch_files(tmp_path, online):
    folder = tmp_path / "run"
    (folder / "checkpoint-5").mkdir(parents=True)
    (folder / "checkpoint-5" / "model.safetensors").write_bytes(b"old")
    (folder / "_scratch.txt").write_text("temporary")
    (folder / "sub").mkdir()
    (folder / "sub" / "weights.bin").write_bytes(bytes(range(256)) * 40)
    (folder / "config.json").write_text("{}")
    (folder / LOCK_FILE).write_text("")  # the run's bookkeeping: the folder's lock, the record of its run
    (folder / RUN_RECORD).write_text('{"algorithm": "grpo"}')
    assert files_to_push(folder) == ["config.json", "sub/weights.bin"]
    with HubStandIn() as hub:
        url = push_folder_to_hub(
            folder, "no-namespace", token=TOKEN, endpoint=hub.url, private=True, revision="experiments"
        )
        assert url == f"{hub.url}/{USER}/no-namespace"  # the token owner's namespace, as on the Hub
        repo = hub.repos[f"{USER}/no-namespace"]
        assert repo.private
        assert repo.files == {"config.json": b"{}", "sub/weights.bin": bytes(range(256)) * 40}
        assert [c["revision"] for c in repo.commits] == ["experiments"]
        assert ("POST", f"/api/models/{USER}/no-namespace/branch/experiments", True) in hub.requests
        assert hub.unexpected == []


def test_push_with_a_bad_token_fails_loudly(tmp_path, online):
    from huggingface_hub.errors import HfHubHTTPError

    (tmp_path / "a.txt").write_text("a")
    with HubStandIn() as hub, pytest.raises(HfHubHTTPError, match="401"):
        push_folder_to_hub(tmp_path, "me/x", token="hf_wrong", endpoint=hub.url)


def test_push_is_refused_in_offline_mode_before_training(tmp_path, monkeypatch):
    import huggingface_hub.constants

    from trl_envs import EnvGRPOConfig
    from trl_envs.hub.publish import take_over_push

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    args = EnvGRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        report_to="none",
        push_to_hub=True,
        hub_model_id="me/x",
        num_generations=2,
        per_device_train_batch_size=2,
    )
    with pytest.raises(ValueError, match="HF_HUB_OFFLINE"):
        take_over_push(args)
    with pytest.raises(RuntimeError, match="offline mode"):
        push_folder_to_hub(tmp_path, "me/x", token=TOKEN)
    args.push_to_hub = False
    assert take_over_push(args) is False


def test_train_grpo_script_pushes_its_output_folder(tmp_path, tiny_model_path):
    """``scripts/train_grpo.py --push_to_hub`` end to end (a full model this time), the Hub at HF_ENDPOINT."""
    output_dir = tmp_path / "out"
    with HubStandIn() as hub:
        env = dict(
            os.environ,
            HF_ENDPOINT=hub.url,
            HF_HUB_OFFLINE="0",
            HF_TOKEN=TOKEN,
            PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
            TOKENIZERS_PARALLELISM="false",
        )
        proc = subprocess.run(
            [
                sys.executable,
                "scripts/train_grpo.py",
                "--model_name_or_path",
                tiny_model_path,
                "--output_dir",
                str(output_dir),
                "--max_steps",
                "1",
                "--per_device_train_batch_size",
                "8",
                "--num_generations",
                "4",
                "--groups_per_batch",
                "2",
                "--max_completion_length",
                "8",
                "--card_eval_problems",
                "2",
                "--card_eval_samples",
                "2",
                "--push_to_hub",
                "--hub_model_id",
                "me/script-run",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=360,
        )
        assert proc.returncode == 0, proc.stderr[-5000:]
        on_disk = {p.relative_to(output_dir).as_posix(): p.read_bytes() for p in output_dir.rglob("*") if p.is_file()}
        assert {
            "model.safetensors",
            "config.json",
            "README.md",
            "eval_results.json",
            "training_curves.png",
            "log_history.json",
            "training_config.json",
            "tokenizer.json",
        } <= set(on_disk)
        assert {LOCK_FILE, RUN_RECORD} <= set(on_disk)  # the run's bookkeeping stays on the machine
        assert hub.repos["me/script-run"].files == {
            k: v for k, v in on_disk.items() if k not in (LOCK_FILE, RUN_RECORD)
        }
        assert hub.unexpected == []
    assert "pushed" in proc.stdout and "library_name: transformers" in on_disk["README.md"].decode()


def test_card_eval_false_skips_the_evaluation_cleanly(tmp_path, tiny_model_path):
    from types import SimpleNamespace

    from trl import ModelConfig

    from trl_envs import EnvGRPOConfig
    from trl_envs.hub.publish import PublishArguments, publish_run

    args = EnvGRPOConfig(
        output_dir=str(tmp_path / "run"),
        use_cpu=True,
        bf16=False,
        report_to="none",
        num_generations=2,
        per_device_train_batch_size=2,
    )
    os.makedirs(args.output_dir)
    trainer = SimpleNamespace(
        args=args,
        accelerator=SimpleNamespace(is_main_process=True, device="cpu"),
        state=SimpleNamespace(log_history=[{"step": 1, "env/all/reward/total": 0.5}]),
    )
    result = publish_run(
        trainer,
        base_model=tiny_model_path,
        algorithm="grpo",
        envs=["guess_number"],
        push=False,
        publish_args=PublishArguments(card_eval=False),
        model_args=ModelConfig(model_name_or_path=tiny_model_path),
    )
    assert result.eval_before is None and result.eval_after is None and result.repo_url is None
    assert sorted(os.listdir(args.output_dir)) == ["README.md", "training_config.json", "training_curves.png"]
    card = (tmp_path / "run" / "README.md").read_text()
    assert "Not evaluated at the end of training." in card and "fine-tuned version of" in card
    assert "library_name: transformers" in card and "env:guess_number" in card
    config = json.loads((tmp_path / "run" / "training_config.json").read_text())
    assert config["model_args"]["model_name_or_path"] == tiny_model_path


def test_an_offline_dpo_card_names_its_hub_dataset_and_rows():
    from trl_envs.hub.model_card import ModelCardInfo, render_model_card

    card = render_model_card(
        ModelCardInfo(
            model_name="m",
            base_model="Qwen/Qwen2.5-0.5B-Instruct",
            algorithm="dpo",
            datasets=["trl-lib/ultrafeedback_binarized"],
            train_data="`trl-lib/ultrafeedback_binarized` (train split, 62135 rows)",
        )
    )
    metadata = card.split("---")[1]
    assert "datasets:\n- trl-lib/ultrafeedback_binarized" in metadata
    assert "trained with DPO on `trl-lib/ultrafeedback_binarized` (train split, 62135 rows)" in card
