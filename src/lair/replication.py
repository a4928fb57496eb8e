"""Replication of a published speed row: its stable id, the noise band its own repeats give, and the
verdict on another run of the same cell. Pure functions: ``lair reproduce`` prints them and the
registry applies the same rule to every replication attempt it stores (it imports nothing of lair
but the errors, so both layers may use it).

A row id is ``<slug>@<revision>#<measurement id>`` (``tiny-cpu@1#42``); a report id is
``<slug>@<revision>#report-<report id>`` (every row of that report). A reference given to
``lair reproduce`` is a slug or a recipe URL, optionally with ``@revision`` (or ``/revisions/N``) and
``#row`` (``#42``, ``#row-42``, ``#report-<id>``): :func:`parse_ref`.

The band of a figure is the range its repeats spanned (the ``min``..``max`` of the row's report:
per-repeat speeds, per-request TTFTs), widened by :data:`FLOOR` of each end, so a row measured with
little spread still allows ``FLOOR`` either way::

    low  = min(repeats) * (1 - FLOOR)
    high = max(repeats) * (1 + FLOOR)

A figure is *inside* when the new run's headline (its p50, as the row's) lies in [low, high]; a row
is reproduced when every figure both runs have is inside (faster is outside too: a replication that
beats the row by more than its noise says the row was not measured as published). A row without
repeats (typed by its author) has the band of its one value.

A new run whose own samples of a figure spread wider than the row's band (its max / min above the
band's high / low) is *inconclusive*: its headline could fall inside or outside the band by its own
noise alone, so it says neither (:data:`INCONCLUSIVE`, whatever the other figures say).

Which rows of a group are independent evidence (the registry's speed and quality tiers both ask):
:func:`evidence`. Each rig counts once (a rig is its fingerprint, else its report, else the row),
and each account once (rows with no submitter are one unknown account, ``?``); a group can be
replicated only with :data:`MIN_RIGS` or more rigs of :data:`MIN_ACCOUNTS` or more accounts, since one
account with two fingerprints is still one uploader.
"""

from __future__ import annotations

import re
import urllib.parse
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lair.errors import ConfigError

__all__ = [
    "FLOOR",
    "INCONCLUSIVE",
    "LOAD_FLOOR",
    "LOAD_METRICS",
    "METRICS",
    "MIN_ACCOUNTS",
    "MIN_RIGS",
    "NOT_REPRODUCED",
    "REPLICATED",
    "Band",
    "Comparison",
    "Evidence",
    "RecipeRef",
    "RowRef",
    "band",
    "compare",
    "compare_load",
    "evidence",
    "parse_ref",
    "parse_row_id",
    "spread",
    "verdict",
]

FLOOR = 0.05
"""How far each end of a band is widened beyond the repeats' range (5%)."""

REPLICATED = "replicated"
NOT_REPRODUCED = "not-reproduced"
INCONCLUSIVE = "inconclusive"

MIN_RIGS = 2
"""Fewest distinct rigs whose rows can replicate a group."""
MIN_ACCOUNTS = 2
"""Fewest distinct accounts whose rows can replicate a group."""

METRICS: tuple[tuple[str, str, str, str], ...] = (
    ("prefill_tok_s", "prefill_tok_s", "prefill_tok_s", "prefill tok/s"),
    ("decode_tok_s", "decode_tok_s_aggregate", "decode_tok_s_aggregate", "decode tok/s"),
    ("decode_tok_s_per_stream", "decode_tok_s_per_stream", "decode_tok_s_per_stream", "decode tok/s/stream"),
    ("ttft_ms", "ttft_ms_p50", "ttft_ms", "TTFT ms"),
)
"""(the row's key, the bench cell's headline key, the key of the cell's ``stats``, label)."""

LOAD_FLOOR = 0.10
"""Each end of an open-loop cell's band: its value +-10%. A load cell has no repeats to draw a range
from (one schedule of requests at one offered rate), so the band is its own value widened."""

LOAD_METRICS: tuple[tuple[str, str | None, str], ...] = (
    ("achieved_rate", None, "achieved rate req/s"),
    ("output_tok_s", None, "output tok/s"),
    ("ttft_ms", "p50", "TTFT p50 ms"),
    ("tpot_ms", "p50", "TPOT p50 ms"),
)
"""(the load cell's figure, its percentile when it has several, label): the figures an open-loop cell
is reproduced on. Medians, not p99s: 64 requests give one p99 sample, which no band can hold."""

_SLUG = r"[a-z0-9]+(?:-[a-z0-9]+)*"
_FRAG = re.compile(r"^(?:row-)?(?P<row>[1-9][0-9]{0,17})$|^report-(?P<report>[0-9a-f]{1,32})$")
_ROW_ID = re.compile(rf"^(?P<slug>{_SLUG})@(?P<rev>[1-9][0-9]{{0,8}})#(?P<frag>[^#]+)$")
_LOCAL = re.compile(rf"^(?P<slug>{_SLUG})(?:@(?P<rev>[1-9][0-9]{{0,8}}))?$")
_PATH = re.compile(
    rf"^(?P<base>.*?)/recipes/(?P<slug>{_SLUG})(?:@(?P<rev>[1-9][0-9]{{0,8}})|/revisions/(?P<rev2>[1-9][0-9]{{0,8}}))?/?$"
)


@dataclass(frozen=True)
class RowRef:
    """One published row (``row``: its measurement id) or every row of one report (``report``)."""

    slug: str
    revision: int
    row: int | None = None
    report: str | None = None

    def __str__(self) -> str:
        return f"{self.slug}@{self.revision}#{self.row if self.row is not None else f'report-{self.report}'}"


@dataclass(frozen=True)
class RecipeRef:
    """What ``lair reproduce`` was given: the registry (None: the logged-in one), the slug, and the
    revision and row when named."""

    registry: str | None
    slug: str
    revision: int | None = None
    row: int | None = None
    report: str | None = None


def _frag(frag: str, ref: str) -> tuple[int | None, str | None]:
    m = _FRAG.match(frag)
    if m is None:
        raise ConfigError(
            f"{ref!r}: #{frag} names no row",
            hint="a row is #<measurement id> (e.g. #42 or #row-42), a report #report-<id>: "
            "copy the row id from the recipe page",
        )
    return (int(m["row"]) if m["row"] else None), m["report"]


def parse_row_id(text: str) -> RowRef:
    """``slug@revision#row`` (or ``#report-<id>``) as a :class:`RowRef`; ValueError when it is not one."""
    m = _ROW_ID.match(text)
    if m is None:
        raise ValueError("a row id is SLUG@REVISION#ROW, e.g. tiny-cpu@1#42 (or #report-<id>)")
    try:
        row, report = _frag(m["frag"], text)
    except ConfigError as exc:
        raise ValueError(exc.message) from None
    return RowRef(m["slug"], int(m["rev"]), row, report)


def parse_ref(ref: str) -> RecipeRef:
    """A slug, ``slug@rev``, ``slug@rev#row`` or a recipe URL (``.../recipes/SLUG[/revisions/N][#row]``)."""
    text = ref.strip()
    head, _, frag = text.partition("#")
    row, report = _frag(frag, ref) if frag else (None, None)
    if head.startswith(("http://", "https://")):
        u = urllib.parse.urlsplit(head)
        m = _PATH.match(u.path)
        if m is None:
            raise ConfigError(f"{ref!r}: not a recipe URL", hint="e.g. https://HOST/recipes/SLUG#42")
        base = f"{u.scheme}://{u.netloc}{m['base']}".rstrip("/")
        rev = m["rev"] or m["rev2"]
        return RecipeRef(base, m["slug"], int(rev) if rev else None, row, report)
    m = _LOCAL.match(head)
    if m is None:
        raise ConfigError(f"{ref!r}: not a recipe reference", hint="SLUG, SLUG@REV, SLUG@REV#ROW or a URL")
    return RecipeRef(None, m["slug"], int(m["rev"]) if m["rev"] else None, row, report)


@dataclass(frozen=True)
class Band:
    """The range a figure may take and still be the same measurement."""

    low: float
    high: float
    repeats: int
    """How many values the range was drawn from (1: the row's own value only)."""

    def inside(self, value: float) -> bool:
        return self.low <= value <= self.high

    @property
    def ratio(self) -> float:
        """high / low: the widest spread (max / min) a run may have and still be judged by it."""
        return self.high / self.low if self.low > 0 else float("inf")

    def as_dict(self) -> dict[str, Any]:
        return {"low": self.low, "high": self.high, "repeats": self.repeats}


def band(value: float, stats: Mapping[str, Any] | None, floor: float = FLOOR) -> Band:
    """The band of a row's figure ``value`` from its summary ``stats`` (``min``, ``max``, ``n``);
    without a summary, the band of the value alone. The value itself is always inside."""
    lo = hi = float(value)
    n = 1
    if stats and stats.get("min") is not None and stats.get("max") is not None:
        lo, hi = min(lo, float(stats["min"])), max(hi, float(stats["max"]))
        n = int(stats.get("n") or 1)
    return Band(lo * (1 - floor), hi * (1 + floor), n)


@dataclass(frozen=True)
class Comparison:
    """One figure of a row against the same figure of a new run."""

    metric: str
    label: str
    theirs: float
    yours: float | None
    band: Band
    spread: float | None = None
    """max / min of the new run's own samples of the figure (None: fewer than two)."""

    @property
    def conclusive(self) -> bool:
        """False when the new run's own spread is wider than the band (see the module docstring)."""
        return self.spread is None or self.spread <= self.band.ratio

    @property
    def delta_pct(self) -> float | None:
        if self.yours is None or self.theirs == 0:
            return None
        return 100.0 * (self.yours - self.theirs) / self.theirs

    @property
    def inside(self) -> bool | None:
        return None if self.yours is None else self.band.inside(self.yours)

    def as_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "label": self.label,
            "theirs": self.theirs,
            "yours": self.yours,
            "delta_pct": self.delta_pct,
            "band": self.band.as_dict(),
            "inside": self.inside,
            "spread": self.spread,
            "conclusive": self.conclusive,
        }


def spread(stats: Mapping[str, Any] | None) -> float | None:
    """max / min of a summary (``min``, ``max``, ``n``) of two or more positive samples, else None."""
    if not stats or int(stats.get("n") or 0) < 2 or stats.get("min") is None or stats.get("max") is None:
        return None
    lo, hi = float(stats["min"]), float(stats["max"])
    return hi / lo if lo > 0 else None


def compare(
    row: Mapping[str, Any],
    stats: Mapping[str, Any] | None,
    yours: Mapping[str, Any],
    your_stats: Mapping[str, Any] | None = None,
) -> list[Comparison]:
    """Each figure the row has against the new run's cell ``yours`` (bench cell keys); ``stats``: the
    row's cell summaries (``results.json``'s ``stats``, or the registry's recomputation of them);
    ``your_stats``: the new run's (its spread decides :attr:`Comparison.conclusive`; None: not known)."""
    out = []
    for key, cell_key, stats_key, label in METRICS:
        theirs = row.get(key)
        if theirs is None:
            continue
        got = yours.get(cell_key)
        b = band(float(theirs), (stats or {}).get(stats_key))
        mine = spread((your_stats or {}).get(stats_key))
        out.append(Comparison(key, label, float(theirs), None if got is None else float(got), b, mine))
    return out


def _load_value(cell: Mapping[str, Any], key: str, pct: str | None) -> float | None:
    value = cell.get(key)
    if pct is not None:
        value = value.get(pct) if isinstance(value, Mapping) else None
    return None if value is None else float(value)


def compare_load(
    theirs: Mapping[str, Any], yours: Mapping[str, Any] | None, floor: float = LOAD_FLOOR
) -> list[Comparison]:
    """Each :data:`LOAD_METRICS` figure of a published open-loop cell (the registry's recomputation:
    ``achieved_rate``, ``output_tok_s``, ``ttft_ms`` {p50, p99...}) against the new run's cell of the
    same context and offered rate (None: the new run has none, e.g. its sweep stopped sooner)."""
    out = []
    for key, pct, label in LOAD_METRICS:
        value = _load_value(theirs, key, pct)
        if value is None:
            continue
        got = None if yours is None else _load_value(yours, key, pct)
        out.append(
            Comparison(key if pct is None else f"{key}_{pct}", label, value, got, band(value, None, floor))
        )
    return out


def verdict(comparisons: Sequence[Comparison]) -> str:
    """``inconclusive`` when the new run's own spread of a figure both runs have is wider than that
    figure's band; else ``replicated`` when every such figure is inside its band, else
    ``not-reproduced`` (also when the new run has none of the row's figures)."""
    measured = [c for c in comparisons if c.inside is not None]
    if any(not c.conclusive for c in measured):
        return INCONCLUSIVE
    return REPLICATED if measured and all(c.inside for c in measured) else NOT_REPRODUCED


@dataclass(frozen=True)
class Evidence:
    """The independent evidence of a group of rows: each rig's values and each account, with whether
    it was new (every row of it in the group was filed while it was new)."""

    per_rig: dict[str, list[float]]
    new: dict[str, bool]

    @property
    def rigs(self) -> int:
        return len(self.per_rig)

    @property
    def accounts(self) -> int:
        return len(self.new)

    @property
    def new_accounts(self) -> int:
        return sum(self.new.values())

    @property
    def enough(self) -> bool:
        """Enough rigs and accounts to replicate, if their values also agree."""
        return self.rigs >= MIN_RIGS and self.accounts >= MIN_ACCOUNTS


def evidence(rows: Iterable[Mapping[str, Any]], value: str) -> Evidence:
    """The rigs and accounts of ``rows`` that have a ``value``: a row's rig is its ``rig``
    fingerprint, else its ``report_id``, else its ``id``; its account is ``submitted_by`` (``?`` when
    none), new when its ``filer_new`` is true."""
    per_rig: dict[str, list[float]] = defaultdict(list)
    new: dict[str, bool] = {}
    for r in rows:
        if r.get(value) is None:
            continue
        per_rig[str(r.get("rig") or r.get("report_id") or r["id"])].append(float(r[value]))
        who = str(r.get("submitted_by") or "?")
        new[who] = new.get(who, True) and r.get("filer_new") is True
    return Evidence(dict(per_rig), new)
