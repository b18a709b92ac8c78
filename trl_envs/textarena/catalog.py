"""Which registered TextArena games ``trl-envs list`` lists, and why the others are left out.

A listed game trains by name: it starts offline with its own player count and plays to its end
(``tests/test_ecosystem_games.py`` plays one full game of each with a scripted policy). The games of
:data:`NOT_LISTED` cannot, in the TextArena version this table was checked against (0.7.4): they still resolve by name
and fail as they do. Games that read NLTK's word list are listed, with the download line when the data is missing
(training one without it stops with that line).
"""

from __future__ import annotations

NOT_LISTED: dict[str, str] = {
    "BabyAiText": "imports a module textarena does not ship",
    "UsedCar": "imports a module textarena does not ship",
    "Checkers": "its module has a syntax error on this Python",
    "Chess": "its module has a syntax error on this Python",
    "IteratedStagHunt": "its module has a syntax error on this Python",
    "Klondike": "its module has a syntax error on this Python",
    "ReverseTicTacToe": "its module has a syntax error on this Python",
    "UltimateTexasHoldem": "its module has a syntax error on this Python",
    "Debate": "judged by a hosted LLM (needs an OpenRouter API key)",
    "GuessWho": "played against a hosted LLM (needs an OpenRouter API key)",
    "ScenarioPlanning": "judged by a hosted LLM (needs an OpenRouter API key)",
    "TwentyQuestions": "played against a hosted LLM (needs an OpenRouter API key)",
    "ScorableGames": "its configuration files are not in the textarena package",
    "UsedCarNegotiation": "its configuration files are not in the textarena package",
    "CharacterConclave": "crashes on its first move (textarena bug)",
    "Stratego": "crashes on its first move (textarena bug)",
    "Countdown": "a reply it rejects crashes its scoring (textarena bug)",
    "Cryptarithm": "a reply it rejects crashes its scoring (textarena bug)",
    "Slitherlink": "a reply it rejects crashes its scoring (textarena bug)",
    "Poker": "an unreadable reply never ends it and it names no moves for a scripted player",
    "MarketEntryGame": "an unreadable reply never ends it and it names no moves for a scripted player",
    "SantoriniBaseFixed": "an unreadable reply never ends it and it names no moves for a scripted player",
    "SpiteAndMalice": "an unreadable reply never ends it and it names no moves for a scripted player",
}
"""Game families (the id before ``-v0``) left out of the list -> why."""

NEEDS_NLTK_WORDS = (
    "Codenames",
    "DontSayIt",
    "Hangman",
    "LetterAuction",
    "SpellingBee",
    "WordChains",
    "WordLadder",
    "WordSearch",
    "Wordle",
)
"""Game families that read NLTK's ``words`` corpus."""

NLTK_WORDS_INSTALL = "python -c \"import nltk; nltk.download('words')\""


def family(env_id: str) -> str:
    """``"Wordle"`` for ``"Wordle-v0-long"``."""
    return env_id.split("-v", 1)[0]


def nltk_words_installed() -> bool:
    """Whether NLTK's ``words`` corpus is installed (looked up on disk, never downloaded)."""
    import os

    try:
        import nltk
    except ImportError:
        return False
    # nltk.data.find can spend seconds on its lookups; the corpus is a folder or a zip under one of nltk's paths
    return any(
        os.path.exists(os.path.join(str(root), "corpora", entry))
        for root in nltk.data.path
        for entry in ("words", "words.zip")
    )


def listing(env_ids: list[str]) -> dict[str, str]:
    """``{env id: description}`` of the listed ids of ``env_ids``."""
    words = None
    out = {}
    for env_id in env_ids:
        name = family(env_id)
        if name in NOT_LISTED:
            continue
        description = "TextArena game (self-play, one env per player)"
        if name in NEEDS_NLTK_WORDS:
            words = nltk_words_installed() if words is None else words
            if not words:
                description += f"; needs NLTK's word list: {NLTK_WORDS_INSTALL}"
        out[env_id] = description
    return out
