"""Never-seen prompts of a target size.

Every prompt starts with a fresh random nonce (at the start, so no prefix cache block can match)
followed by random filler words. Sizing: the server's prompt tokens are modelled as
``overhead + tokens(content)``; with a local ``tokenizer.json`` the content is counted exactly and one
probe request fixes the overhead (chat template); without one, two probe requests fit tokens per word
and the overhead. The table always shows the server-reported prompt tokens, not this estimate.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["FILLER_WORDS", "PromptSizer", "filler", "needle_prompt", "prompt_text"]

_WORDS_TEXT = """
time year people way day man thing woman life child world school state family student group country
problem hand part place case week company system program question work government number night point
home water room mother area money story fact month lot right study book eye job word business issue
side kind head house service friend father power hour game line end member law car city community
name president team minute idea kid body information back parent face others level office door
health person art war history party result change morning reason research girl guy moment air
teacher force education river garden stone window market paper music letter table field village
mountain bridge island engine signal forest summer winter harbor valley lantern
"""
FILLER_WORDS = tuple(_WORDS_TEXT.split())
"""Common English words the filler is drawn from."""

_PROBE_SMALL, _PROBE_LARGE = 32, 512

Probe = Callable[[str], Awaitable[int | None]]
"""Sends one prompt (content text) and returns the server-reported prompt tokens."""


def filler(n_words: int, rnd: random.Random) -> str:
    """``n_words`` random filler words."""
    return " ".join(rnd.choices(FILLER_WORDS, k=n_words))


def prompt_text(n_words: int, nonce: str | None = None) -> str:
    """A fresh prompt: the nonce first, then random filler (seeded by the nonce)."""
    nonce = nonce or secrets.token_hex(8)
    return f"{nonce} " + filler(n_words, random.Random(nonce))


def needle_prompt(n_words: int, depth: float, secret: str) -> str:
    """A haystack of filler with one needle sentence at ``depth`` (0 = start, 1 = end) and a question."""
    nonce = secrets.token_hex(8)
    words = filler(n_words, random.Random(nonce)).split(" ")
    at = max(0, min(len(words), round(depth * len(words))))
    needle = f"The secret passphrase is {secret}."
    body = " ".join([*words[:at], needle, *words[at:]])
    return f"{nonce} {body}\n\nWhat is the secret passphrase? Answer with the passphrase only."


@dataclass
class PromptSizer:
    """Turns a target prompt size (server tokens) into a number of filler words."""

    tokenizer_path: Path | None = None
    tokens_per_word: float = 1.3
    overhead: float = 8.0
    calibrated: bool = False
    _tok: Any = None

    def _count(self, text: str) -> int:
        if self._tok is None:
            from tokenizers import Tokenizer

            self._tok = Tokenizer.from_file(str(self.tokenizer_path))
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    async def calibrate(self, probe: Probe) -> None:
        """Fit tokens per word and the overhead (chat template, nonce) against the server's counts.

        ``overhead`` is what a prompt of zero filler words would count on the server.
        """
        small, large = prompt_text(_PROBE_SMALL), prompt_text(_PROBE_LARGE)
        if self.tokenizer_path:
            self.tokens_per_word = (self._count(large) - self._count(small)) / (_PROBE_LARGE - _PROBE_SMALL)
            got = await probe(small)
            if got is not None:
                self.overhead = got - self.tokens_per_word * _PROBE_SMALL
                self.calibrated = True
            return
        p_small, p_large = await probe(small), await probe(large)
        if p_small is None or p_large is None or p_large <= p_small:
            return
        self.tokens_per_word = (p_large - p_small) / (_PROBE_LARGE - _PROBE_SMALL)
        self.overhead = p_small - self.tokens_per_word * _PROBE_SMALL
        self.calibrated = True

    def words_for(self, target_tokens: int) -> int:
        """Filler words (after the nonce) whose prompt comes to about ``target_tokens``."""
        return max(1, round((target_tokens - self.overhead) / self.tokens_per_word))
