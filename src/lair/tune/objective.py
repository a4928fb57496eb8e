"""What a tune optimises: bench cells and a goal, limits on other cells, a quality guard.

    obj = parse_objective("max decode_tok_s_per_stream@ctx=32768,c=1")
    obj = parse_objective("0.7*decode_tok_s_aggregate@ctx=2048,c=8 + 0.3*prefill_tok_s@ctx=32768,c=1")
    lim = parse_constraint("ttft_ms_p90@ctx=32768,c=4 <= 2000")
    guard = parse_guard("gsm8k:2")        # reject a candidate more than 2 points below the start

A term is ``[WEIGHT*]METRIC@ctx=N,c=M``: a metric of one bench cell (context N tokens, M streams). The
goal is ``max`` or ``min``; without one, latencies (``ttft_*``) are minimised and speeds maximised.
Two objectives make a multi-objective tune (a Pareto front); more than one term in an objective is
a weighted sum.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from lair.errors import ConfigError

__all__ = [
    "METRICS",
    "Cell",
    "Constraint",
    "Guard",
    "Objective",
    "Term",
    "cell_value",
    "parse_constraint",
    "parse_guard",
    "parse_objective",
]

METRICS = {
    "decode_tok_s_per_stream": "max",
    "decode_tok_s_aggregate": "max",
    "prefill_tok_s": "max",
    "ttft_ms_p50": "min",
    "ttft_ms_p90": "min",
}
"""The bench's headline numbers per cell (see docs/bench.md) and the way each one is better."""

Goal = Literal["max", "min"]
_TERM = re.compile(
    r"^\s*(?:(?P<w>[0-9]*\.?[0-9]+(?:e[-+]?\d+)?)\s*\*\s*)?(?P<m>[a-z0-9_]+)\s*@\s*"
    r"ctx\s*=\s*(?P<ctx>\d+)\s*,\s*c\s*=\s*(?P<c>\d+)\s*$"
)
_CONSTRAINT = re.compile(r"^(?P<term>.+?)\s*(?P<op><=|>=)\s*(?P<limit>-?[0-9]*\.?[0-9]+)\s*$")


@dataclass(frozen=True)
class Cell:
    context: int
    concurrency: int

    def __str__(self) -> str:
        return f"ctx={self.context},c={self.concurrency}"


@dataclass(frozen=True)
class Term:
    metric: str
    cell: Cell
    weight: float = 1.0

    def __str__(self) -> str:
        w = "" if self.weight == 1.0 else f"{self.weight:g}*"
        return f"{w}{self.metric}@{self.cell}"


def cell_value(cells: Sequence[Any], metric: str, cell: Cell) -> float | None:
    """``metric`` of the bench cell at ``cell`` (a :class:`lair.bench.CellResult` or its dict)."""
    for c in cells:
        d = c if isinstance(c, dict) else c.as_dict()
        if d["context"] == cell.context and d["concurrency"] == cell.concurrency:
            v = d.get(metric)
            return float(v) if isinstance(v, int | float) else None
    return None


@dataclass(frozen=True)
class Objective:
    goal: Goal
    terms: tuple[Term, ...]
    text: str

    @property
    def label(self) -> str:
        return f"{self.goal} {' + '.join(str(t) for t in self.terms)}"

    def value(self, cells: Sequence[Any]) -> float | None:
        total = 0.0
        for t in self.terms:
            v = cell_value(cells, t.metric, t.cell)
            if v is None:
                return None
            total += t.weight * v
        return total

    def better(self, a: float, b: float) -> bool:
        return a > b if self.goal == "max" else a < b


@dataclass(frozen=True)
class Constraint:
    term: Term
    op: Literal["<=", ">="]
    limit: float
    text: str

    def holds(self, cells: Sequence[Any]) -> tuple[bool, float | None]:
        v = cell_value(cells, self.term.metric, self.term.cell)
        if v is None:
            return False, None
        return (v <= self.limit if self.op == "<=" else v >= self.limit), v


@dataclass(frozen=True)
class Guard:
    """A quality guard: the candidate's score on ``suite`` may be at most ``points`` below the
    starting recipe's (scores in percentage points)."""

    suite: str
    points: float

    def __str__(self) -> str:
        return f"{self.suite}:{self.points:g}"

    def verdict(self, score: float | None, start: float | None, start_error: str | None = None) -> str | None:
        """Why a candidate scoring ``score`` fails against the start's ``start`` (None: it passes).

        A candidate without a score, or a start without one (``start_error``: why its eval failed),
        fails: a guard that compared nothing vouches for nothing. Losing exactly ``points`` passes.
        """
        if start is None:
            why = f" ({start_error})" if start_error else ""
            return f"quality {self}: the starting recipe has no score on {self.suite} to compare with{why}"
        if score is None:
            return f"quality {self}: no score on {self.suite}"
        loss = round(start - score, 6)
        if loss > self.points:
            return (
                f"quality {self}: {score:.4g} points on {self.suite} against {start:.4g} at the start"
                f" ({loss:.4g} lost, more than {self.points:g})"
            )
        return None


def _term(text: str, where: str) -> Term:
    m = _TERM.match(text)
    if not m:
        raise ConfigError(
            f"{where} {text.strip()!r}: expected [WEIGHT*]METRIC@ctx=N,c=M",
            hint="e.g. decode_tok_s_per_stream@ctx=32768,c=1",
        )
    metric = m["m"]
    if metric not in METRICS:
        from difflib import get_close_matches

        near = get_close_matches(metric, METRICS, n=1)
        mean = f"did you mean {near[0]}? " if near else ""
        raise ConfigError(f"{where}: unknown metric {metric!r}", hint=f"{mean}metrics: {', '.join(METRICS)}")
    cell = Cell(int(m["ctx"]), int(m["c"]))
    if cell.context < 1 or cell.concurrency < 1:
        raise ConfigError(f"{where} {text.strip()!r}: ctx and c are at least 1")
    return Term(metric, cell, float(m["w"]) if m["w"] else 1.0)


def parse_objective(text: str) -> Objective:
    words = text.strip().split(None, 1)
    goal: Goal | None = None
    body = text
    if words and words[0] in ("max", "min", "maximize", "minimize"):
        goal = "max" if words[0].startswith("max") else "min"
        body = words[1] if len(words) > 1 else ""
    terms = tuple(_term(part, "--objective") for part in body.split("+"))
    if goal is None:
        goals = {METRICS[t.metric] for t in terms}
        if len(goals) > 1:
            raise ConfigError(
                f"--objective {text!r}: its terms are better in different directions",
                hint="say which: max ... or min ...",
            )
        goal = "max" if goals == {"max"} else "min"
    return Objective(goal, terms, text.strip())


def parse_constraint(text: str) -> Constraint:
    m = _CONSTRAINT.match(text.strip())
    if not m:
        raise ConfigError(
            f"--constraint {text!r}: expected METRIC@ctx=N,c=M <= LIMIT (or >=)",
            hint="e.g. ttft_ms_p90@ctx=32768,c=4 <= 2000",
        )
    term = _term(m["term"], "--constraint")
    if term.weight != 1.0:
        raise ConfigError(f"--constraint {text!r}: a limit is on one metric, without a weight")
    op: Literal["<=", ">="] = "<=" if m["op"] == "<=" else ">="
    return Constraint(term, op, float(m["limit"]), text.strip())


def parse_guard(text: str) -> Guard:
    suite, sep, points = text.rpartition(":")
    try:
        n = float(points)
    except ValueError:
        n = -1.0
    if not sep or not suite or n < 0:
        raise ConfigError(f"--guard {text!r}: expected SUITE:POINTS", hint="e.g. --guard gsm8k:2")
    return Guard(suite, n)
