"""The result model of ``lair eval``: options, one record per sample, one result per suite.

Headline per suite: ``score`` is the mean over repeats of each repeat's score; ``stderr`` is the
mean of the repeats' standard errors over samples (lm-eval's own figure for lm-eval tasks,
``sqrt(p (1 - p) / (n - 1))`` for lair's needle); ``ci95`` is ``score ± 1.96 stderr``, clipped to
[0, 1]. The spread over repeats is their min, max and population standard deviation, plus
``flips``: the samples whose verdict was not the same in every repeat.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "EVAL_SCHEMA_VERSION",
    "EvalOptions",
    "EvalResult",
    "RepeatResult",
    "SampleRecord",
    "SuiteResult",
]

EVAL_SCHEMA_VERSION = 1


@dataclass
class EvalOptions:
    """What to evaluate and how."""

    suites: list[str] = field(default_factory=lambda: ["lair_arith"])
    model: str | None = None
    limit: int | None = None
    repeat: int = 1
    seed: int = 1234
    concurrency: int = 2
    api: str = "completions"  # completions | chat
    thinking: bool | None = None  # chat only: chat_template_kwargs.enable_thinking
    num_fewshot: int | None = None
    data: dict[str, Path] = field(default_factory=dict)
    """Local data file per suite name (key ``""``: every suite without its own)."""
    sandbox: str = "auto"
    timeout_s: float = 300.0
    max_gen_toks: int | None = None
    needle_context: int = 2048
    needle_depths: list[float] = field(default_factory=lambda: [0.1, 0.5, 0.9])
    api_key: str | None = field(default=None, repr=False)
    progress: Callable[[str], None] | None = field(default=None, repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k not in ("api_key", "progress")}
        d["data"] = {k: str(v) for k, v in self.data.items()}
        d["api_key_given"] = bool(self.api_key)
        return d


@dataclass
class SampleRecord:
    """One sample of one repeat: what was asked (its hash), what came back, and the verdict."""

    doc_id: int
    prompt_hash: str
    output: str
    target: str
    score: float
    verdict: str  # pass | fail | timeout (sandbox) | error
    repeat: int = 0
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RepeatResult:
    score: float
    stderr: float | None
    n: int
    seed: int
    wall_s: float
    metric: str
    metrics: dict[str, float] = field(default_factory=dict)
    samples: list[SampleRecord] = field(default_factory=list)


def _flips(repeats: list[RepeatResult]) -> int:
    verdicts: dict[int, set[str]] = {}
    for r in repeats:
        for s in r.samples:
            verdicts.setdefault(s.doc_id, set()).add(s.verdict)
    return sum(1 for v in verdicts.values() if len(v) > 1)


@dataclass
class SuiteResult:
    """One suite over its repeats (see the module docstring for the headline figures)."""

    suite: str
    task: str
    kind: str  # lm_eval | humaneval | needle
    metric: str
    repeats: list[RepeatResult]
    data: str = ""
    sandbox: str = ""

    @property
    def score(self) -> float:
        return statistics.fmean(r.score for r in self.repeats)

    @property
    def stderr(self) -> float | None:
        errs = [r.stderr for r in self.repeats if r.stderr is not None and not math.isnan(r.stderr)]
        return statistics.fmean(errs) if errs else None

    def spread(self) -> dict[str, Any]:
        scores = [r.score for r in self.repeats]
        return {
            "scores": scores,
            "min": min(scores),
            "max": max(scores),
            "std": statistics.pstdev(scores) if len(scores) > 1 else 0.0,
            "flips": _flips(self.repeats),
        }

    def as_dict(self) -> dict[str, Any]:
        se = self.stderr
        return {
            "suite": self.suite,
            "task": self.task,
            "kind": self.kind,
            "metric": self.metric,
            "score": self.score,
            "n": self.repeats[0].n,
            "stderr": se,
            "ci95": [max(0.0, self.score - 1.96 * se), min(1.0, self.score + 1.96 * se)]
            if se is not None
            else None,
            "repeats": len(self.repeats),
            "spread": self.spread(),
            "wall_s": round(sum(r.wall_s for r in self.repeats), 3),
            "seeds": [r.seed for r in self.repeats],
            "metrics": self.repeats[0].metrics,
            "data": self.data,
            "sandbox": self.sandbox,
        }

    def sample_rows(self) -> list[dict[str, Any]]:
        return [{"suite": self.suite, **s.as_dict()} for r in self.repeats for s in r.samples]


@dataclass
class EvalResult:
    url: str
    model: str
    started_at: str
    finished_at: str
    options: dict[str, Any]
    suites: list[SuiteResult]
    harness: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The summary that goes into ``results.json`` (per-sample rows are kept apart)."""
        return {
            "schema_version": EVAL_SCHEMA_VERSION,
            "url": self.url,
            "model": self.model,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "options": self.options,
            "harness": self.harness,
            "suites": [s.as_dict() for s in self.suites],
        }

    @property
    def samples(self) -> list[dict[str, Any]]:
        return [row for s in self.suites for row in s.sample_rows()]
