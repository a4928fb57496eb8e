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

__all__ = ["FILLER_WORDS", "Counter", "PromptSizer", "filler", "needle_prompt", "prompt_text"]

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


Counter = Callable[[str], Awaitable[int | None]]
"""Counts a content text's tokens exactly (a local tokenizer, or the server's ``/tokenize``)."""

_FIT_ROUNDS = 12
_PAD_ROUNDS = 8


@dataclass
class PromptSizer:
    """Turns a target prompt size (server tokens) into a prompt.

    With an exact counter (``tokenizer_path``, or ``counter`` = the server's ``/tokenize``) every
    prompt is trimmed to the target: its filler grows or shrinks word by word (the filler is a
    prefix-stable sequence seeded by the prompt's nonce) until the count lands within 1% (at least
    one token). Without one, the size comes from the two-probe fit alone.
    """

    tokenizer_path: Path | None = None
    tokens_per_word: float = 1.3
    overhead: float = 8.0
    calibrated: bool = False
    counter: Counter | None = None
    _tok: Any = None

    def _count(self, text: str) -> int:
        if self._tok is None:
            from tokenizers import Tokenizer

            self._tok = Tokenizer.from_file(str(self.tokenizer_path))
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    async def count(self, text: str) -> int | None:
        """Exact content tokens of ``text``, or None without a counter."""
        if self.tokenizer_path:
            return self._count(text)
        return await self.counter(text) if self.counter else None

    async def calibrate(self, probe: Probe) -> None:
        """Fit tokens per word and the overhead (chat template) against the server's counts.

        ``overhead`` is what a prompt of zero filler words would count on the server.
        """
        small, large = prompt_text(_PROBE_SMALL), prompt_text(_PROBE_LARGE)
        c_small, c_large = await self.count(small), await self.count(large)
        if c_small is not None and c_large is not None and c_large > c_small:
            self.tokens_per_word = (c_large - c_small) / (_PROBE_LARGE - _PROBE_SMALL)
            got = await probe(small)
            if got is not None:
                self.overhead = got - c_small  # the chat template's tokens around the content
                self.calibrated = True
            return
        self.counter = None  # a counter that cannot tell two sizes apart is no counter
        p_small, p_large = await probe(small), await probe(large)
        if p_small is None or p_large is None or p_large <= p_small:
            return
        self.tokens_per_word = (p_large - p_small) / (_PROBE_LARGE - _PROBE_SMALL)
        self.overhead = p_small - self.tokens_per_word * _PROBE_SMALL
        self.calibrated = True

    def words_for(self, target_tokens: int) -> int:
        """Filler words (after the nonce) whose prompt comes to about ``target_tokens``."""
        return max(1, round((target_tokens - self.overhead) / self.tokens_per_word))

    async def fit(self, target_tokens: int, nonce: str | None = None) -> str:
        """A fresh prompt of about ``target_tokens`` server tokens.

        With a counter the filler length is searched (estimate, then bisection between a too-short and
        a too-long length): within 1% (at least one token); when whole words cannot get that close,
        the longest too-short prompt is grown by one-letter words (see :meth:`_pad`)."""
        nonce = nonce or secrets.token_hex(8)
        n = self.words_for(target_tokens)
        lo, hi = 0, 1 << 30  # filler lengths known to be too short / too long
        best: tuple[float, str] = (float("inf"), prompt_text(n, nonce))
        for _ in range(_FIT_ROUNDS):
            text = prompt_text(n, nonce)
            got = await self.count(text)
            if got is None:
                return text
            err = target_tokens - (got + self.overhead)
            best = min(best, (abs(err), text), key=lambda b: b[0])
            if abs(err) <= max(1.0, 0.01 * target_tokens):
                break
            lo, hi = (max(lo, n), hi) if err > 0 else (lo, min(hi, n))
            if hi - lo <= 1:
                break
            guess = n + (round(err / max(self.tokens_per_word, 0.1)) or (1 if err > 0 else -1))
            n = guess if lo < guess < hi else (lo + hi) // 2 if hi < 1 << 30 else lo + 1
        if best[0] > max(1.0, 0.01 * target_tokens) and lo > 0:
            best = min(best, await self._pad(prompt_text(lo, nonce), target_tokens), key=lambda b: b[0])
        return best[1]

    async def _pad(self, text: str, target_tokens: int) -> tuple[float, str]:
        """Closer than whole filler words allow: a prompt one word too short, grown by one-letter
        words (a token or so each) until it is within 1% (at least one token) or would pass it."""
        best: tuple[float, str] = (float("inf"), text)
        for _ in range(_PAD_ROUNDS):
            got = await self.count(text)
            if got is None:
                break
            err = target_tokens - (got + self.overhead)
            best = min(best, (abs(err), text), key=lambda b: b[0])
            if err <= max(1.0, 0.01 * target_tokens):
                break
            text += " a"
        return best
