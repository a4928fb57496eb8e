"""The needle suite: lair's own needle-in-a-haystack (:func:`lair.bench.run_bench` with ``needle``)
at each of ``EvalOptions.needle_depths``; a sample per depth, found = pass."""

from __future__ import annotations

import hashlib
import math
import random
import time

from lair.eval.records import EvalOptions, RepeatResult, SampleRecord

__all__ = ["needle_secrets", "run_needle"]

COLOURS = ("amber", "cobalt", "violet", "saffron")


def needle_secrets(seed: int, count: int) -> list[str]:
    """The passphrases of a repeat with ``seed``, one per depth (the registry regenerates them)."""
    rnd = random.Random(seed)
    return [f"{rnd.choice(COLOURS)}-{rnd.randrange(1000, 10000)}" for _ in range(count)]


def _stderr(p: float, n: int) -> float | None:
    return math.sqrt(p * (1 - p) / (n - 1)) if n > 1 else None


def run_needle(url: str, model: str, opts: EvalOptions, repeat: int) -> RepeatResult:
    from lair.bench import BenchOptions, run_bench

    seed = opts.seed + repeat
    t0 = time.monotonic()
    records = []
    secrets = needle_secrets(seed, len(opts.needle_depths))
    for i, (depth, secret) in enumerate(zip(opts.needle_depths, secrets, strict=True)):
        bench = BenchOptions(
            model=model,
            contexts=[opts.needle_context],
            decode_tokens=8,
            repeat=1,
            needle=True,
            needle_depth=depth,
            needle_secret=secret,
            api_key=opts.api_key,
            request_timeout_s=opts.timeout_s,
        )
        n = run_bench(url, bench).needle
        found = bool(n and n.found)
        key = f"needle ctx={opts.needle_context} depth={depth}".encode()
        records.append(
            SampleRecord(
                doc_id=i,
                prompt_hash=hashlib.sha256(key).hexdigest(),
                output=n.answer if n else "",
                target=secret,
                score=1.0 if found else 0.0,
                verdict="pass" if found else ("error" if n and n.error else "fail"),
                repeat=repeat,
                detail=n.error if n else "",
            )
        )
    score = sum(r.score for r in records) / len(records)
    wall = round(time.monotonic() - t0, 3)
    return RepeatResult(score, _stderr(score, len(records)), len(records), seed, wall, "found", {}, records)
