"""Cells with invalid answers are never verified. A cell flagged ``invalid-output`` by the bench's
validity gate (:func:`lair.bench.definitions.output_problem`: an empty answer, one token repeated,
text that does not decode, the same answer to different prompts, or forced output outside 0.9-1.1x
of the tokens asked), or whose raw rows show it, keeps its row as ``reported-by-report`` at most,
its note beginning with each reason ("cell ctx 256 x1: invalid-output: 4 completion tokens, 32
asked (allowed 29-35)"), as a noisy cell does (:mod:`.noise`).

The token bounds are checked again here on ``requests.jsonl``'s completion-token counts with the
bench's own function, so a report that drops the flag still does not verify; the text checks need the
answers' text, which a report does not carry, so their per-request verdicts (``output_check``) and the
cell's certificate are read as the bench wrote them.
"""

from __future__ import annotations

from typing import Any

from lair.bench.definitions import output_token_bounds
from lair.vocabulary import REPORTED_BY_REPORT, VERIFIED

__all__ = ["invalid_output_reasons", "invalid_output_rows"]

_MOST = 3
"""Reasons named per cell (the rest are counted)."""


def _row_problems(cell: dict[str, Any], rows: list[dict[str, Any]], options: dict[str, Any]) -> list[str]:
    """The problems of the cell's successful rows: the bench's verdict, else the token bounds."""
    want, force = options.get("decode_tokens"), options.get("force_output") is not False
    lo, hi = output_token_bounds(want) if isinstance(want, int) and want > 0 else (0, 1 << 62)
    out = []
    for r in rows:
        if (r.get("context"), r.get("concurrency")) != (cell["context"], cell["concurrency"]):
            continue
        if r.get("status") != 200 or r.get("error"):
            continue
        n = r.get("completion_tokens")
        if isinstance(r.get("output_check"), str) and r["output_check"]:
            out.append(r["output_check"])
        elif force and isinstance(n, int) and not lo <= n <= hi:
            out.append(f"{n} completion tokens, {want} asked (allowed {lo}-{hi})")
    return out


def invalid_output_reasons(
    cell: dict[str, Any], rows: list[dict[str, Any]], options: dict[str, Any]
) -> list[str]:
    """Why the cell's answers are invalid, located by the cell; [] when they pass the gate."""
    problems = _row_problems(cell, rows, options)
    output = (cell.get("certificate") or {}).get("output") or {}
    if not problems and output.get("valid") is False:
        problems = [str(e.get("problem")) for e in output.get("examples") or [] if isinstance(e, dict)]
    if not problems and "invalid-output" in (cell.get("flags") or []):
        problems = ["flagged by the bench"]
    where = f"cell ctx {cell['context']} x{cell['concurrency']}: invalid-output"
    named = [f"{where}: {p}" for p in dict.fromkeys(problems)]
    more = len(named) - _MOST
    return named[:_MOST] + ([f"{where}: {more} more"] if more > 0 else [])


def invalid_output_rows(
    rows_out: list[dict[str, Any]],
    cells: list[dict[str, Any]],
    requests: list[dict[str, Any]],
    options: dict[str, Any],
) -> list[dict[str, Any]]:
    """The rows of ``cells`` (the same order), each with invalid answers at most reported-by-report
    with its reasons first in its note."""
    for row, cell in zip(rows_out, cells, strict=True):
        reasons = invalid_output_reasons(cell, requests, options)
        if reasons:
            if row["provenance"] == VERIFIED:
                row["provenance"] = REPORTED_BY_REPORT
            row["note"] = "; ".join([*reasons, *([row["note"]] if row.get("note") else [])])
    return rows_out
