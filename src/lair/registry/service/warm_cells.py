"""Warm multi-turn cells of an uploaded report (``lair bench --sessions``), recomputed from the raw
per-request rows of ``sessions.jsonl`` with the client's own function
(:func:`lair.bench.warm.warm_figures`), as the open-loop cells are from ``load.jsonl``
(:mod:`.load_cells`).

What the registry checks before it stores a cell:

- the conversation: each context's rows are sessions 0..N-1 x turns 0..T-1, each turn's prompt
  longer than the one before it (it holds the whole previous turn), the reuse a row declares is
  exactly its session's previous prompt (0 on a first turn), and no response claims more cached
  tokens than its prompt had;
- the clocks: a row's first chunk, its chunks and its end are after its send and in order;
- the figures: declared, response and counter hit rates, TTFT per turn and TPOT percentiles,
  failures by kind, recomputed from the rows and the cell's engine-counter delta, agree with the cell.

Any disagreement refuses the report (422, each reason naming its cell). A cell that agrees is stored
with the registry's own figures and ``cache: warm``: ``verified`` when its responses' hit rate and
the engine counter's agree (the cell is certified warm), else ``reported-by-report`` saying why
(``cache-unconfirmed``, ``invalid-output``, ``client-bound``). The counter delta is the report's own
reading of the engine: the registry checks it against the responses, it cannot read the engine.
Warm cells are shown apart from cold ones and never ranked against them.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from lair.bench import definitions as d
from lair.bench.warm import warm_figures
from lair.registry.service.load_cells import same_figure

__all__ = ["SESSIONS_FILE", "check_sessions"]

SESSIONS_FILE = "sessions.jsonl"
_COMPARED = (
    "requests",
    "completed",
    "prompt_tokens",
    "declared_reuse_tokens",
    "response_cached_tokens",
    "declared_hit_rate",
    "response_hit_rate",
    "counter_hit_rate",
    "hit_rates_agree",
    "ttft_ms",
    "ttft_ms_by_turn",
    "tpot_ms",
    "failures",
)
_NOT_VERIFIED = {
    "cache-unconfirmed": (
        "cache-unconfirmed: the responses' and the engine counter's hit rates disagree or one is missing"
    ),
    "invalid-output": "invalid-output: answers failed the validity gate",
    "client-bound": "client-bound: the client's CPU was the bottleneck",
}


def _conversation(where: str, rows: list[dict[str, Any]], n: int, turns: int) -> list[str]:
    """The sessions x turns grid, the growing prompts and the declared reuse (module docstring)."""
    keys = sorted((int(r["session"]), int(r["turn"])) for r in rows)
    if keys != [(s, t) for s in range(n) for t in range(turns)]:
        return [f"{where}: sessions.jsonl rows are not sessions 0..{n - 1} x turns 0..{turns - 1}"]
    out = []
    by = {(int(r["session"]), int(r["turn"])): r for r in rows}
    for (s, t), r in sorted(by.items()):
        at = f"{where} session {s} turn {t}"
        prompt, declared = int(r.get("prompt_tokens") or 0), int(r.get("declared_reuse_tokens") or 0)
        before = int(by[(s, t - 1)].get("prompt_tokens") or 0) if t else 0
        if declared != before:
            out.append(f"{at}: declared_reuse_tokens {declared} but the previous turn's prompt was {before}")
        if t and prompt <= before:
            out.append(f"{at}: prompt_tokens {prompt} does not grow past the previous turn's {before}")
        if (cached := r.get("cached_tokens")) is not None and int(cached) > prompt:
            out.append(f"{at}: cached_tokens {cached} exceeds its prompt_tokens {prompt}")
        done, ttft, chunks = r.get("done_ms"), r.get("ttft_ms"), r.get("chunk_ms") or []
        if ttft is not None and (ttft <= 0 or (done is not None and ttft > done)):
            out.append(f"{at}: ttft_ms {ttft} is not within (0, done_ms]")
        if chunks and done is not None and chunks[-1] > done:
            out.append(f"{at}: a chunk at {chunks[-1]} ms after the end ({done} ms)")
    return out


def _flags(figures: dict[str, Any], cell: dict[str, Any]) -> set[str]:
    """The flags the rows show, added to the ones the cell claims (a claimed flag is kept)."""
    flags = set()
    if figures["hit_rates_agree"] is not True:
        flags.add("cache-unconfirmed")
    if figures["failures"].get("invalid-output"):
        flags.add("invalid-output")
    if any(k != "invalid-output" for k in figures["failures"]):
        flags.add("errors")
    if float(cell.get("client_cpu_fraction") or 0.0) > d.CLIENT_CPU_BOUND_FRACTION:
        flags.add("client-bound")
    return flags


def check_sessions(
    section: dict[str, Any] | None, rows: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[str]]:
    """(the rows to store: one per warm cell, every reason to refuse the report)."""
    if not section:
        return [], ["sessions.jsonl holds requests but results.json has no bench.sessions"] if rows else []
    reasons: list[str] = []
    groups: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[int(r["context"])].append(r)
    out: list[dict[str, Any]] = []
    for cell in section.get("cells") or []:
        ctx = int(cell["context"])
        where = f"warm cell ctx {ctx}"
        got = groups.pop(ctx, [])
        if not got:
            reasons.append(f"{where}: sessions.jsonl lacks its requests")
            continue
        reasons += _conversation(where, got, int(cell["sessions"]), int(cell["turns"]))
        again = warm_figures(got, cell.get("counter_hit_tokens"))
        for key in _COMPARED:
            if not same_figure(cell.get(key), again[key]):
                reasons.append(f"{where}: {key} {cell.get(key)!r} but the rows give {again[key]!r}")
        flags = sorted(set(cell.get("flags") or []) | _flags(again, cell))
        why = [text for flag, text in _NOT_VERIFIED.items() if flag in flags]
        shape = {k: cell[k] for k in ("sessions", "turns", "turn_tokens")}
        out.append({"kind": "warm", "context": ctx, "step": None, "offered_rate": None, "cache": "warm",
                    "figures": again | shape | {"counter_metric": cell.get("counter_metric")},
                    "flags": flags, "provenance": "reported-by-report" if why else "verified",
                    "note": "; ".join(why)})  # fmt: skip
    reasons += [f"sessions.jsonl has requests of ctx {c} that no warm cell reports" for c in groups]
    return out, reasons
