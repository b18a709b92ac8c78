"""The seam to TRL (trl_envs/trainers/trl_seam.py): the installed TRL has every private name it uses, a missing one is
reported by name, and no other module of the package names a TRL private attribute or unexported class."""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

import pytest

from trl_envs.trainers import trl_seam

PACKAGE = Path(trl_seam.__file__).resolve().parents[1]
ROOT = PACKAGE.parent


def test_installed_trl_has_every_private_name_the_seam_uses():
    trl_seam.check_trl_compatibility()


def test_a_missing_private_name_is_reported_with_the_seam_module(monkeypatch):
    from trl import GRPOTrainer

    monkeypatch.delattr(GRPOTrainer, "_generate_and_score_completions")
    with pytest.raises(trl_seam.TRLCompatibilityError, match=r"trl_seam\.py.*'_generate_and_score_completions'"):
        trl_seam.check_trl_compatibility()


def test_a_missing_private_attribute_set_in_init_is_reported(monkeypatch):
    entry = trl_seam.PrivateName("self._no_such_thing", "trl.GRPOTrainer", "nothing", check="source")
    with pytest.raises(trl_seam.TRLCompatibilityError, match=r"trl_seam\.py relies on 'self\._no_such_thing'"):
        trl_seam.check_trl_compatibility([entry])


def _identifier(name: str) -> str | None:
    bare = name.removeprefix("self.")
    return bare if bare.isidentifier() else None


def _violations(path: Path) -> list[str]:
    return _violations_in(path.read_text(), path.relative_to(ROOT).as_posix())


def _violations_in(text: str, rel: str) -> list[str]:
    """Uses of the seam's private names in one module: every identifier token equal to one of them (strings and comments
    do not count), except ``def NAME`` and ``super().NAME`` for a hook the seam lists as overridden in that module;
    and, for names that are message texts, any occurrence of the text."""
    identifiers = {_identifier(e.name) for e in trl_seam.TRL_PRIVATE_NAMES} - {None}
    overridable = {_identifier(e.name) for e in trl_seam.TRL_PRIVATE_NAMES if e.overridden_in == rel}
    found = [
        f"{rel}: message text {e.name!r}"
        for e in trl_seam.TRL_PRIVATE_NAMES
        if _identifier(e.name) is None and e.name in text
    ]
    tokens = [
        t
        for t in tokenize.generate_tokens(io.StringIO(text).readline)
        if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT)
    ]
    for i, tok in enumerate(tokens):
        if tok.type != tokenize.NAME or tok.string not in identifiers:
            continue
        before = [t.string for t in tokens[max(i - 4, 0) : i]]
        is_def = before[-1:] == ["def"]
        is_super_call = before[-4:] == ["super", "(", ")", "."]
        if tok.string in overridable and (is_def or is_super_call):
            continue
        found.append(f"{rel}:{tok.start[0]}: {tok.string}")
    return found


def test_no_module_but_the_seam_names_a_trl_private_name():
    modules = [p for p in sorted(PACKAGE.rglob("*.py")) if p.resolve() != Path(trl_seam.__file__).resolve()]
    assert len(modules) > 30
    violations = [v for p in modules for v in _violations(p)]
    assert not violations, (
        "TRL private names outside trl_envs/trainers/trl_seam.py (route them through the seam and "
        "list them in TRL_PRIVATE_NAMES): " + "; ".join(violations)
    )


def test_the_grep_check_catches_private_attributes_and_unlisted_overrides():
    grpo = "trl_envs/trainers/grpo.py"
    text = (ROOT / grpo).read_text()
    assert _violations_in(text, grpo) == []
    peek = "\n\ndef peek(trainer):\n    return trainer._pending_metrics  # _tokenizer in a comment is fine\n"
    assert [v.split(": ")[-1] for v in _violations_in(text + peek, grpo)] == ["_pending_metrics"]
    assert len(_violations_in(text, "trl_envs/trainers/dpo.py")) >= 2  # the GRPO hook is not DPO's to override
    assert _violations_in("import warnings\nMSG = \"You are using 'rollout_func'\"\n", "trl_envs/x.py")


def test_overridden_hooks_are_listed_with_their_module():
    for entry in trl_seam.TRL_PRIVATE_NAMES:
        if entry.overridden_in:
            source = (ROOT / entry.overridden_in).read_text()
            assert f"def {entry.name}(" in source, entry
