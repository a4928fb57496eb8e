"""A predicted speed with its error bar: the roofline times an efficiency learned from measured rows.

    efficiency of a row = measured speed / its roofline (what rating.py prints as %, over 100)
    matching rows       = rows of the same engine (any engine when none is named), model class
                          (dense | moe | mla, see :func:`model_class`) and weight format
    band                = p10, p50 and p90 of the matching rows' efficiencies (linear interpolation
                          between order statistics); with fewer than ``MIN_ROWS`` rows, the stated
                          default band (``DEFAULT_DECODE``, ``DEFAULT_PREFILL``) and the rows it
                          would have rested on, listed
    decode              = band x the decode ceiling per stream, and x the aggregate ceiling in total
    prefill             = band x the prefill ceiling (all GPUs of the replica) in total; per stream,
                          the total shared by the ``concurrency`` prompts prefilled at once

The efficiency is one number per row, whatever its context and concurrency: the band's width is what
that simplification costs (benchmarks/predict_loo.py measures how often it covers a held-out row).
Nothing here does I/O: rows come from :mod:`lair.fit.efficiencies` (the bundled table) or from a
registry's ``/api/v1/efficiencies``.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from lair.fit.fit import Hardware, Layout
from lair.fit.model_facts import ModelFacts
from lair.fit.roofline import DecodeBound, PrefillBound, decode_bound, prefill_bound

__all__ = [
    "DEFAULT_DECODE",
    "DEFAULT_PREFILL",
    "MIN_ROWS",
    "Band",
    "EfficiencyRow",
    "MatchKey",
    "Prediction",
    "SpeedRange",
    "band",
    "matching",
    "model_class",
    "predict",
    "predict_for",
]

MIN_ROWS = 3
"""Fewest matching rows a band is computed from (two rows give no p10 or p90 worth the name)."""

DEFAULT_DECODE = (0.10, 0.50, 0.85)
"""(low, expected, high) decode efficiency when too few rows match. High: a plain memory copy reached
89% of the H200's catalog bandwidth (benchmarks/results/gpu_fit_validate_h200.json, 4,268 of 4,800
GB/s), and a decode step does more than copy. Low: long contexts fall far below the ceiling (the
H200 decode loop: 7% at 131,072 tokens). Expected: the middle of the band, not a measurement."""

DEFAULT_PREFILL = (0.15, 0.40, 0.65)
"""(low, expected, high) prefill efficiency when too few rows match. High: a large square BF16 matmul
alone reached 64% of the H200's dense peak (benchmarks/results/gpu_telemetry_h200.json, 633 of 989
TFLOPS, under the card's power cap), and a prefill is more than one such matmul. Low and expected:
short prompts and attention kernels keep engines well under that; no measured prefill row backs them."""


@dataclass(frozen=True)
class EfficiencyRow:
    """One measured row as efficiencies (fractions of its roofline) and what it matches on."""

    id: str
    engine: str
    model_class: str  # "dense" | "moe" | "mla"
    weight_format: str
    decode: float | None = None
    prefill: float | None = None
    decode_tok_s: float | None = None  # what was measured, and the roofline it was held against
    decode_roofline_tok_s: float | None = None
    gpu: str = ""
    context: int = 0
    concurrency: int = 1
    link: str = ""
    source: str = ""  # "bundled" | "registry"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EfficiencyRow:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass(frozen=True)
class MatchKey:
    """What a prediction's rows must share (``engine`` None: rows of any engine)."""

    engine: str | None
    model_class: str
    weight_format: str

    def matches(self, row: EfficiencyRow) -> bool:
        same_engine = self.engine is None or _norm(row.engine) == _norm(self.engine)
        return same_engine and row.model_class == self.model_class and row.weight_format == self.weight_format


@dataclass(frozen=True)
class Band:
    """An efficiency: ``low`` (p10), ``expected`` (p50) and ``high`` (p90), from ``rows`` rows
    (``basis`` "rows"), or the default band (``basis`` "default", ``why`` says why)."""

    low: float
    expected: float
    high: float
    basis: str
    rows: int
    row_ids: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    why: str = ""


@dataclass(frozen=True)
class SpeedRange:
    """Tokens per second: the expected figure and the band around it."""

    expected: float
    low: float
    high: float


@dataclass(frozen=True)
class Prediction:
    """Expected decode and prefill at one context and concurrency, each with its band."""

    key: MatchKey
    context: int
    concurrency: int
    decode_efficiency: Band
    decode_per_stream_tok_s: SpeedRange
    decode_total_tok_s: SpeedRange
    prefill_efficiency: Band
    prefill_per_stream_tok_s: SpeedRange | None
    prefill_total_tok_s: SpeedRange | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _norm(engine: str) -> str:
    return engine.strip().lower()


def model_class(facts: ModelFacts) -> str:
    """``mla`` (multi-head latent attention, MoE or not), ``moe`` or ``dense``."""
    if facts.attention == "mla":
        return "mla"
    return "moe" if facts.is_moe else "dense"


def matching(rows: Iterable[EfficiencyRow], key: MatchKey, figure: str) -> list[EfficiencyRow]:
    """The rows ``key`` matches that measured ``figure`` ("decode" or "prefill")."""
    return [r for r in rows if key.matches(r) and getattr(r, figure) is not None]


def band(rows: Sequence[EfficiencyRow], figure: str, default: tuple[float, float, float]) -> Band:
    """p10 / p50 / p90 of the rows' ``figure`` efficiencies, else ``default`` (fewer than MIN_ROWS)."""
    ids, links = [r.id for r in rows], [r.link for r in rows if r.link]
    values = [float(getattr(r, figure)) for r in rows]
    if len(values) < MIN_ROWS:
        found = (
            f"{len(values)} matching row{'s' if len(values) != 1 else ''}" if values else "no matching row"
        )
        why = f"{found}; a band needs {MIN_ROWS}"
        return Band(*default, basis="default", rows=len(values), row_ids=ids, links=links, why=why)
    cuts = statistics.quantiles(values, n=10, method="inclusive")
    med = statistics.median(values)
    return Band(round(cuts[0], 4), round(med, 4), round(cuts[-1], 4), "rows", len(values), ids, links)


def _scaled(b: Band, ceiling: float) -> SpeedRange:
    return SpeedRange(round(b.expected * ceiling, 1), round(b.low * ceiling, 1), round(b.high * ceiling, 1))


def predict(
    decode: DecodeBound, prefill: PrefillBound, rows: Iterable[EfficiencyRow], key: MatchKey
) -> Prediction:
    """The ceilings of ``decode`` and ``prefill`` times the band of the rows ``key`` matches."""
    every = list(rows)
    dec = band(matching(every, key, "decode"), "decode", DEFAULT_DECODE)
    pre = band(matching(every, key, "prefill"), "prefill", DEFAULT_PREFILL)
    ceiling, conc = prefill.tok_s, max(decode.concurrency, 1)
    return Prediction(
        key=key,
        context=decode.context,
        concurrency=decode.concurrency,
        decode_efficiency=dec,
        decode_per_stream_tok_s=_scaled(dec, decode.per_stream_tok_s),
        decode_total_tok_s=_scaled(dec, decode.aggregate_tok_s),
        prefill_efficiency=pre,
        prefill_per_stream_tok_s=_scaled(pre, ceiling / conc) if ceiling else None,
        prefill_total_tok_s=_scaled(pre, ceiling) if ceiling else None,
    )


def predict_for(
    facts: ModelFacts,
    hw: Hardware,
    layout: Layout,
    rows: Iterable[EfficiencyRow],
    *,
    context: int,
    concurrency: int = 1,
    engine: str | None = None,
) -> Prediction:
    """:func:`predict` at ``context`` x ``concurrency``, the rows matched on ``engine`` (None: any)
    and on the model's class and weight format."""
    key = MatchKey(engine, model_class(facts), facts.weight_format)
    dec = decode_bound(facts, hw, layout, context=context, concurrency=concurrency)
    return predict(dec, prefill_bound(facts, hw, layout, prompt_tokens=context), rows, key)
