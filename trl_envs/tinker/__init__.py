"""Train environments written for tinker-cookbook unchanged (docs/from_tinker.md).

::

    from tinker_cookbook.recipes.math_rl.arithmetic_env import ArithmeticDatasetBuilder
    from trl_envs.tinker import adapt

    envs = adapt(ArithmeticDatasetBuilder(batch_size=4, model_name_for_tokenizer=path, renderer_name="qwen3_instruct",
                                          n_batches=100, group_size=8))
    EnvGRPOTrainer(path, args, env_dataset=envs).train()

or on the command line: ``--env tinker_cookbook.recipes.math_rl.arithmetic_env:ArithmeticDatasetBuilder``.

Needs tinker-cookbook, installed without its ``transformers`` pin (see docs/from_tinker.md for the exact lines).
``import trl_envs`` never imports this package.
"""

from .detect import is_tinker_cookbook_object  # imports nothing of tinker

_INSTALL = (
    "trl_envs.tinker needs tinker-cookbook. Install it without touching transformers:\n"
    "  pip install --no-deps tinker-cookbook==0.5.8 tinker==0.38.0 chz tml-renderers==0.2.1\n"
    "  pip install httpx sniffio distro orjson protobuf"
)

# Everything else imports tinker-cookbook, so it is loaded on first use (importing this package stays cheap and
# works without tinker-cookbook installed, for is_tinker_cookbook_object).
_LAZY = {
    "SamplerMessageCompleter": ".completer",
    "action_extra_of": ".convert",
    "cookbook_trajectory": ".convert",
    "model_input_of": ".convert",
    "stop_condition_of": ".convert",
    "tokens_of": ".convert",
    "TinkerDatasetBuilder": ".dataset",
    "TinkerRLDataset": ".dataset",
    "adapt": ".dataset",
    "InitialObservationOverflowError": ".env",
    "TinkerEnv": ".env",
    "TinkerGroupBuilder": ".group",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        try:
            module = importlib.import_module(_LAZY[name], __name__)
        except ModuleNotFoundError as e:
            if e.name and e.name.split(".")[0] in ("tinker", "tinker_cookbook", "chz", "tml_renderers"):
                raise ImportError(f"{_INSTALL}\n({e})") from e
            raise
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'trl_envs.tinker' has no attribute {name!r}")


__all__ = ["is_tinker_cookbook_object", *_LAZY]
