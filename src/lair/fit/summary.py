"""One call for the CLI, ``lair report`` and the registry: fit + decode/prefill ceilings + measured rows
rated against them, as one JSON-ready dict."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

from lair.fit.fit import Hardware, Layout, Runtime, fit
from lair.fit.model_facts import ModelFacts
from lair.fit.predict import EfficiencyRow, predict_for
from lair.fit.rating import Measured, rate_row
from lair.fit.roofline import decode_bound, prefill_bound

__all__ = ["fit_summary"]


def _hardware_dict(hw: Hardware) -> dict[str, Any]:
    d = hw.device
    return {
        "device": d.id,
        "name": d.name,
        "gpus": hw.gpus,
        "memory_bytes_per_gpu": hw.gpu_memory_bytes,
        "memory_bandwidth_gbs": d.memory_bandwidth_gbs,
        "link_gbs_per_direction": round((d.link_bytes_s() or 0) / 1e9, 1) or None,
        "host_ram_bytes": hw.host_ram_bytes,
        "sources": [{"title": s.title, "url": s.url} for s in d.sources],
    }


def fit_summary(
    facts: ModelFacts,
    hw: Hardware,
    layout: Layout,
    *,
    context: int | None = None,
    concurrency: int = 1,
    measured: Iterable[Measured] = (),
    runtime: Runtime | None = None,
    efficiencies: Iterable[EfficiencyRow] | None = None,
    engine: str | None = None,
) -> dict[str, Any]:
    """Fit, ceilings at the fitted context (batch 1 and ``concurrency``), and each measured row rated;
    with ``efficiencies``, the predicted speed too (``prediction``: :mod:`lair.fit.predict`, rows of
    ``engine``, None: any)."""
    res = fit(facts, hw, layout, context=context, concurrency=concurrency, runtime=runtime)
    ctx = res.context
    one = decode_bound(facts, hw, layout, context=ctx)
    many = decode_bound(facts, hw, layout, context=ctx, concurrency=concurrency)
    pre = prefill_bound(facts, hw, layout, prompt_tokens=ctx)
    rows = list(efficiencies) if efficiencies is not None else None
    guess = (
        predict_for(facts, hw, layout, rows, context=ctx, concurrency=concurrency, engine=engine).as_dict()
        if rows is not None
        else None
    )
    return {
        "ok": True,
        **res.as_dict(),
        "decode_roofline_tok_s": round(one.per_stream_tok_s, 1),
        "decode_aggregate_roofline_tok_s": round(many.aggregate_tok_s, 1),
        "prefill_roofline_tok_s": round(pre.tok_s, 1) if pre.tok_s else None,
        "decode": many.as_dict(),
        "prefill": pre.as_dict(),
        "layout": asdict(layout),
        "hardware": _hardware_dict(hw),
        "model_facts": facts.as_dict(),
        "measured": [rate_row(facts, hw, layout, m).as_dict() for m in measured],
        **({"prediction": guess} if guess is not None else {}),
    }
