"""What a verified cell must hold beyond its headline: every repeat on the roofline and close to the
others, and energy figures the GPUs it names could have drawn. Pure functions of a report's raw rows
and certificate; :mod:`.verify` calls them for each cell it would verify, and a cell that fails one is
stored ``reported-by-report`` with the reasons as its note (never refused: its timings agree with
themselves, they are only not physically checked).

1. **Repeats on the roofline.** The headline is a median, so one repeat at 20,000 tok/s between two
   slow ones passed while only the median was rated. Each repeat's prefill and per-stream decode
   (the p50 of its requests) is rated on the same roofline as the cell (:func:`roofline_reasons`).
2. **Repeats that agree.** The decode speeds of a cell's repeats (aggregate, and per stream) may
   spread by at most :data:`~.recompute.MAX_REPEAT_SPREAD` ((max - min) / median): a replication's
   band is the repeats' range widened by 5% (:mod:`lair.replication`), so a row whose repeats span
   5 to 20,000 tok/s would take any attempt as reproduced (:func:`spread_reasons`).
3. **Energy within physics** (:func:`power_reasons`). The average and peak watts of the cell, and the
   watts its joules per output token imply over the cell's own raw timings (J/token x output tokens
   / the repeats' spans: the bench divides the energy of those same spans), lie between the floor
   and the ceiling of the GPUs: at least one GPU's ``idle_w`` (times the GPUs sampled, at most the
   fingerprint's count) and at most the fingerprint's GPUs' ``tdp_w`` x (1 + :data:`POWER_MARGIN`),
   figures of the catalog (:mod:`lair.fit.catalog`). Zero, negative, NaN or infinite watts, joules
   per token or $/Mtok are refused; so is a GPU the catalog gives no power figures, and a cell with no
   energy figure (an AMD rig's: lair's bench samples NVIDIA GPUs only).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

from lair.bench import definitions as d
from lair.fit.catalog import Device
from lair.registry.service.recompute import MAX_REPEAT_SPREAD, timing_of

__all__ = [
    "POWER_MARGIN",
    "Repeat",
    "power_reasons",
    "repeats_of",
    "roofline_reasons",
    "span_s",
    "spread",
    "spread_reasons",
]

POWER_MARGIN = 0.10
"""How far above the GPUs' summed board power (``tdp_w``) a cell's watts may read. The board holds its
power limit, which can be raised no higher than the TDP, over its control window; a sampled reading
overshoots it briefly, and the power-integral estimate between samples can too. 10% keeps an honest run
at the limit well inside and refuses anything a board could not draw (1e12 W, or eight GPUs' worth on
one)."""


@dataclass(frozen=True)
class Repeat:
    """One repeat of a cell, recomputed from its raw rows by the bench's definitions."""

    index: int
    prefill_tok_s: float | None
    decode_tok_s_per_stream: float | None
    """The p50 over the repeat's requests (as the cell's figure is over all of them)."""
    decode_tok_s: float | None
    """The repeat's aggregate decode (the cell's ``decode_tok_s_aggregate`` is the p50 of these)."""


def repeats_of(reps: dict[int, list[dict[str, Any]]]) -> list[Repeat]:
    """Each repeat of one cell (``reps``: its raw request rows by repeat index), in order."""
    out = []
    for i in sorted(reps):
        timings = [t for t in (timing_of(r) for r in reps[i]) if t.ok]
        streams = [v for t in timings if (v := d.per_stream_decode_tok_s(t)) is not None]
        per_stream = d.percentile(streams, 50) if streams else None
        out.append(Repeat(i, d.prefill_tok_s(timings), per_stream, d.aggregate_decode_tok_s(timings)))
    return out


def spread(values: Sequence[float]) -> float | None:
    """(max - min) / median of ``values`` (None: fewer than two, or a median of 0)."""
    if len(values) < 2:
        return None
    mid = median(values)
    return (max(values) - min(values)) / mid if mid > 0 else None


_SPREAD = (("decode_tok_s", "decode tok/s"), ("decode_tok_s_per_stream", "decode tok/s/stream"))


def spread_reasons(where: str, repeats: Sequence[Repeat]) -> list[str]:
    """Why the repeats' decode speeds disagree by more than :data:`MAX_REPEAT_SPREAD`, if they do."""
    out = []
    for key, label in _SPREAD:
        values = [float(v) for r in repeats if (v := getattr(r, key)) is not None]
        s = spread(values)
        if s is not None and s > MAX_REPEAT_SPREAD:
            shown = ", ".join(f"{v:,.1f}" for v in values)
            out.append(
                f"{where}: its repeats' {label} ({shown}) spread by {s:.0%} of their median, more than "
                f"the {MAX_REPEAT_SPREAD:.0%} one cell's repeats may"
            )
    return out


Rate = Callable[[float | None, float | None], dict[str, Any] | None]
"""A cell's roofline: (prefill tok/s, decode tok/s per stream) -> the rating (:func:`lair.fit.rate_row`)."""


def roofline_reasons(where: str, repeats: Sequence[Repeat], rate: Rate) -> list[str]:
    """Each repeat above 100% of the cell's roofline, by its index and figure."""
    out = []
    for r in repeats:
        rating = rate(r.prefill_tok_s, r.decode_tok_s_per_stream)
        if rating is not None and rating["implausible"]:
            out.append(f"{where} repeat {r.index}: above 100% of the roofline ({rating['why']})")
    return out


def span_s(reps: dict[int, list[dict[str, Any]]]) -> float:
    """Seconds the cell's repeats ran by their raw rows: per repeat, its first send (0) to its last
    chunk, summed (the spans the bench's energy figure is measured over)."""
    total = 0.0
    for rows in reps.values():
        ends = [float(r["send_ms"]) + float(r["chunk_ms"][-1]) for r in rows if r.get("chunk_ms")]
        total += max(ends, default=0.0) / 1000
    return total


def _positive(name: str, value: Any) -> str | None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        return f"{name} is {value!r}: a GPU that ran the cell spent energy (more than 0)"
    return None


def _figures(energy: dict[str, Any]) -> list[str]:
    """Each energy figure the certificate must give as a positive number ($/Mtok where it gives one)."""
    out = [_positive(k, energy.get(k)) for k in ("avg_w", "j_per_output_token")]
    out += [_positive(k, energy[k]) for k in ("peak_w", "j_per_prompt_token") if energy.get(k) is not None]
    usd = energy.get("usd_per_mtok")
    if isinstance(usd, dict):
        out += [_positive(f"usd_per_mtok.{k}", v) for k, v in sorted(usd.items()) if v is not None]
    return [x for x in out if x]


@dataclass(frozen=True)
class Power:
    """The watts a cell's GPUs could draw: ``floor`` to ``ceiling``, and the words for them."""

    floor: float
    ceiling: float
    gpus: str


def power_of(device: Device, gpus: int, sampled: Any) -> Power | None:
    """The floor (``idle_w`` of the GPUs sampled, at least one, at most ``gpus``) and the ceiling
    (``tdp_w`` of ``gpus``, plus :data:`POWER_MARGIN`) of ``gpus`` x ``device``; None: no figures."""
    if not device.tdp_w or not device.idle_w:
        return None
    n = sampled if isinstance(sampled, int) and not isinstance(sampled, bool) else 1
    n = min(max(n, 1), gpus)
    ceiling = device.tdp_w * gpus * (1 + POWER_MARGIN)
    return Power(device.idle_w * n, ceiling, f"{gpus}x {device.name}")


def _watts(name: str, w: float, p: Power) -> str | None:
    if p.floor <= w <= p.ceiling:
        return None
    if w < p.floor:
        side = f"below {p.floor:,.0f} W, the idle floor"
    else:
        side = f"above {p.ceiling:,.0f} W, the TDP (+{POWER_MARGIN:.0%})"
    return f"{name} {w:,.6g} W is {side} of {p.gpus} (the catalog's figures)"


def _implied(energy: dict[str, Any], reps: dict[int, list[dict[str, Any]]], p: Power) -> str | None:
    """Why the watts the cell's J/output token implies over its raw spans are out of bounds, if so."""
    rows = [r for group in reps.values() for r in group if not r.get("error")]
    tokens, seconds = sum(float(r.get("completion_tokens") or 0) for r in rows), span_s(reps)
    if tokens <= 0 or seconds <= 0:
        return None
    j = float(energy["j_per_output_token"])
    return _watts(
        f"{j:.6g} J/output token x {tokens:,.0f} tokens / {seconds:.3f} s =", j * tokens / seconds, p
    )


def power_reasons(
    where: str, cert: dict[str, Any], device: Device, gpus: int, reps: dict[int, list[dict[str, Any]]]
) -> list[str]:
    """Why the cell's energy figures (``cert``: the cell's certificate) are not within the physics of
    ``gpus`` x ``device`` (see the module doc), or why it has none to hold; [] when they are."""
    energy = cert.get("energy")
    if not isinstance(energy, dict):
        why = "no energy figure (lair's bench samples NVIDIA GPUs only)"
        return [f"{where}: {why}: its watts are not held to {gpus}x {device.name}'s"]
    bad = _figures(energy)
    if bad:
        return [f"{where}: {x}" for x in bad]
    p = power_of(device, gpus, (cert.get("gpu") or {}).get("gpus"))
    if p is None:
        return [f"{where}: the catalog has no idle and TDP figures for {device.name} to hold its watts to"]
    out = [_watts("average power", float(energy["avg_w"]), p), _implied(energy, reps, p)]
    if energy.get("peak_w") is not None:
        out.append(_watts("peak power", float(energy["peak_w"]), p))
    return [f"{where}: {x}" for x in out if x]
