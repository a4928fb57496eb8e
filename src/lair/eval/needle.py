"""The needle suite: lair's own needle-in-a-haystack (:func:`lair.bench.run_bench` with ``needle``)
at each of ``EvalOptions.needle_depths``; a sample per depth, found = pass."""

from __future__ import annotations

import hashlib
import math
import random
import time

from lair.eval.model import EvalOptions, RepeatResult, SampleRecord

__all__ = ["run_needle"]


def _stderr(p: float, n: int) -> float | None:
    return math.sqrt(p * (1 - p) / (n - 1)) if n > 1 else None


def run_needle(url: str, model: str, opts: EvalOptions, repeat: int) -> RepeatResult:
    from lair.bench import BenchOptions, run_bench

    seed = opts.seed + repeat
    rnd = random.Random(seed)
    t0 = time.monotonic()
    records = []
    for i, depth in enumerate(opts.needle_depths):
        secret = f"{rnd.choice(['amber', 'cobalt', 'violet', 'saffron'])}-{rnd.randrange(1000, 10000)}"
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
