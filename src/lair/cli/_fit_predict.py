"""``lair fit --predict`` and ``lair fit --rank``: the predicted speed with its band, and candidate
models ranked by it (the computation: :mod:`lair.fit.predict`, :mod:`lair.fit.ranking`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lair.cli._common import dump_json, err

__all__ = ["cmd_rank", "efficiency_rows", "render_prediction"]


def efficiency_rows(args: argparse.Namespace) -> list[Any]:
    """The bundled rows, plus the registry's verified rows with ``--registry [URL]``."""
    from lair.fit.efficiencies import bundled_rows, rows_from_json

    rows = list(bundled_rows())
    if args.registry is None:
        return rows
    from lair.client import Client, Credentials

    creds = Credentials.load()
    url = (args.registry or creds.url).rstrip("/")
    client = Client(Credentials(url, creds.token if url == creds.url else None))
    got = rows_from_json(client.efficiencies().get("rows") or [])
    return rows + [_absolute(r, url) for r in got]


def _absolute(row: Any, base: str) -> Any:
    from dataclasses import replace

    return replace(row, link=base + row.link) if row.link.startswith("/") else row


def _speed(r: dict[str, Any] | None) -> str:
    if r is None:
        return "unknown"
    return f"{r['expected']:,} tok/s ({r['low']:,} to {r['high']:,})"


def _basis(b: dict[str, Any]) -> str:
    pct = f"{100 * b['low']:.0f}-{100 * b['high']:.0f}% of the roofline, expected {100 * b['expected']:.0f}%"
    if b["basis"] == "rows":
        return f"{pct}, from {b['rows']} measured rows"
    return f"{pct}, the default band ({b['why']})"


def render_prediction(o: dict[str, Any]) -> list[str]:
    """The text lines of a summary's ``prediction``."""
    p = o["prediction"]
    eng = p["key"]["engine"] or "any engine"
    key = f"{eng}, {p['key']['model_class']}, {p['key']['weight_format']}"
    lines = [
        f"  predicted at {p['context']:,} tokens x {p['concurrency']} ({key}):",
        f"    decode per stream {_speed(p['decode_per_stream_tok_s'])}; "
        f"total {_speed(p['decode_total_tok_s'])}",
        f"      efficiency {_basis(p['decode_efficiency'])}",
        f"    prefill per stream {_speed(p['prefill_per_stream_tok_s'])}; "
        f"total {_speed(p['prefill_total_tok_s'])}",
        f"      efficiency {_basis(p['prefill_efficiency'])}",
    ]
    ids = p["decode_efficiency"]["row_ids"]
    if ids:
        shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
        lines.append(f"    decode rows: {shown} (all of them and their links: --json)")
    return lines


@dataclass(frozen=True)
class FitInputs:
    """``lair fit``'s readers of its command line (:mod:`lair.cli.fit_cmds` passes them in: that
    module calls this one, which must not import it back)."""

    recipe_and_facts: Callable[[argparse.Namespace], tuple[Any, Any, Any]]
    hardware: Callable[[argparse.Namespace, Any, int], Any]
    layout: Callable[[argparse.Namespace, Any, Any], Any]


def _one(
    args: argparse.Namespace, name: str, hw: Any, layout: Any, rows: list[Any], inputs: FitInputs
) -> dict[str, Any]:
    from lair.errors import FitError
    from lair.fit.ranking import RANK_CONTEXT, candidate, unknown_candidate
    from lair.fit.summary import fit_summary

    try:
        _, facts, source = inputs.recipe_and_facts(
            argparse.Namespace(**{**vars(args), "model": name, "file": None})
        )
    except FitError as exc:
        return unknown_candidate(name, exc.message)
    out = fit_summary(
        facts,
        hw,
        layout,
        context=args.context or RANK_CONTEXT,
        concurrency=args.concurrency,
        efficiencies=rows,
        engine=args.engine,
    )
    where = source.as_dict()
    return candidate(name, out) | {"model_source": {"kind": where["kind"], "where": where["where"]}}


def ranking(args: argparse.Namespace, inputs: FitInputs) -> dict[str, Any]:
    """The ranking document ``lair fit --rank ... --json`` prints."""
    from lair.fit.ranking import RANK_CONTEXT, rank

    layout = inputs.layout(args, None, None)
    hw = inputs.hardware(args, None, layout.gpus * layout.dp)
    rows = efficiency_rows(args)
    found = [_one(args, name, hw, layout, rows, inputs) for name in args.rank]
    return {
        "ok": True,
        "gpu": hw.device.name,
        "gpus": hw.gpus,
        "context": args.context or RANK_CONTEXT,
        "concurrency": args.concurrency,
        "engine": args.engine,
        "candidates": rank(found),
    }


def _cells(c: dict[str, Any]) -> list[str]:
    rank = str(c["rank"]) if c["rank"] else "-"
    if c["prediction"] is None or c["rank"] is None:
        return [rank, c["name"], c["verdict"], "-", "-", "-", c["why"]]
    t, s, e = c["decode_total_tok_s"], c["decode_per_stream_tok_s"], c["efficiency"]
    basis = f"{e['rows']} rows" if e["basis"] == "rows" else "default"
    total = f"{t['expected']:,} ({t['low']:,}-{t['high']:,})"
    return [rank, c["name"], c["verdict"], total, f"{s['expected']:,}", basis, c["why"]]


def cmd_rank(args: argparse.Namespace, inputs: FitInputs) -> int:
    from lair.table import text_table

    doc = ranking(args, inputs)
    if args.json:
        dump_json(doc)
    else:
        print(
            f"{len(doc['candidates'])} candidates on {doc['gpus']} x {doc['gpu']} at "
            f"{doc['context']:,} tokens x {doc['concurrency']} ({doc['engine'] or 'any engine'}):"
        )
        head = ["rank", "model", "verdict", "decode total tok/s (band)", "per stream", "efficiency", "why"]
        print(text_table(head, [_cells(c) for c in doc["candidates"]]))
        err("predicted = roofline x measured efficiency (docs/fit.md, Predicted speed); --json for the rows")
    return 0 if any(c["rank"] for c in doc["candidates"]) else 1
