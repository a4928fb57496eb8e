"""Service-level objectives of a load cell: ``--slo ttft_p99<=2s,tpot<=50ms``.

A spec is terms joined by commas, each ``METRIC[_pQ] OP VALUE[UNIT]``:

- ``METRIC``: ``ttft`` (send to first content chunk), ``tpot`` (time per output token after the
  first chunk), ``itl`` (time between content chunks, per token), ``e2e`` (send to the end of the
  response), ``send_error`` (the client's lateness against the schedule);
- ``_pQ``: the percentile of the cell's requests the term holds at (``p50``, ``p99``, ``p99.9``);
  without one the term holds for every request (as ``p100``);
- ``OP``: ``<=`` or ``<``;
- ``VALUE``: a number with a unit, ``ms`` or ``s`` (no unit: ms).

A cell meets the SLO when every term holds at its percentile; a request counts towards goodput when
it completed and each of its own figures meets each term's bound (:mod:`lair.bench.load`).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from lair.errors import ConfigError

__all__ = ["SLO_METRICS", "SloTerm", "parse_slo"]

SLO_METRICS = ("ttft", "tpot", "itl", "e2e", "send_error")
_MAX_SPEC = 500
_MAX_TERMS = 16
_TERM = re.compile(
    r"^(?P<metric>[a-z][a-z0-9_]*?)(?:_p(?P<q>\d+(?:\.\d+)?))?\s*(?P<op><=|<)\s*(?P<value>\d+(?:\.\d+)?)\s*(?P<unit>ms|s)?$"
)


@dataclass(frozen=True)
class SloTerm:
    """One bound: ``metric`` at percentile ``q`` (100: every request) ``<=`` (or ``<``) ``bound_ms``."""

    metric: str
    q: float
    bound_ms: float
    strict: bool = False

    def holds(self, value_ms: float) -> bool:
        return value_ms < self.bound_ms if self.strict else value_ms <= self.bound_ms

    def text(self) -> str:
        pct = "" if self.q == 100 else f"_p{self.q:g}"
        return f"{self.metric}{pct}{'<' if self.strict else '<='}{self.bound_ms:g}ms"


def _bad(spec: str, col: int, why: str) -> ConfigError:
    return ConfigError(
        f"--slo {spec!r}: column {col + 1}: {why}",
        hint="terms like ttft_p99<=2s,tpot<=50ms; metrics " + ", ".join(SLO_METRICS) + "; units ms, s",
    )


def _term(spec: str, col: int, text: str) -> SloTerm:
    m = _TERM.match(text.strip())
    if m is None:
        raise _bad(spec, col, f"{text.strip()!r} is not METRIC[_pQ]<=VALUE[ms|s]")
    metric = m["metric"]
    if metric not in SLO_METRICS:
        near = difflib.get_close_matches(metric, SLO_METRICS, n=1)
        also = f" (did you mean {near[0]}?)" if near else ""
        raise _bad(spec, col, f"unknown metric {metric!r}{also}")
    q = float(m["q"]) if m["q"] else 100.0
    if not 0 < q <= 100:
        raise _bad(spec, col, f"percentile p{m['q']} is not in (0, 100]")
    value = float(m["value"]) * (1000.0 if m["unit"] == "s" else 1.0)
    return SloTerm(metric, q, value, strict=m["op"] == "<")


def parse_slo(spec: str) -> list[SloTerm]:
    """The terms of ``spec``; a :class:`~lair.errors.ConfigError` naming the column of a bad term."""
    if len(spec) > _MAX_SPEC:
        raise _bad(spec[:40] + "...", _MAX_SPEC, f"longer than {_MAX_SPEC} characters")
    terms, col = [], 0
    for part in spec.split(","):
        if part.strip():
            terms.append(_term(spec, col + len(part) - len(part.lstrip()), part))
        col += len(part) + 1
    if not terms:
        raise _bad(spec, 0, "no terms")
    if len(terms) > _MAX_TERMS:
        raise _bad(spec, 0, f"more than {_MAX_TERMS} terms")
    return terms
