"""The scoring of an exact-match suite, taken from the suite's own lm-eval task config and run with
lm-eval's own code: its filter chain (e.g. lair_arith's ``first-integer`` regex, gsm8k's
``strict-match`` / ``flexible-extract``), its ``exact_match`` metric with the task's arguments, and
the references (``doc_to_target`` of each document of the data set, read offline from the
registry's own copy: bundled for lair_arith, the local Hugging Face cache for hub data sets).

:func:`scorer_for` answers a :class:`Scorer`, or the reason a suite cannot be re-scored here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["NeedleScorer", "Scorer", "scorer_for"]

_CONFIG_KEYS = ("metric", "aggregation", "higher_is_better")


@dataclass(frozen=True)
class Scorer:
    """How one suite scores a sample: ``verdict(output, target)`` -> (score, the extracted answer)."""

    filters: tuple[Any, ...]
    metric: Callable[..., dict[str, float]]
    kwargs: dict[str, Any]
    references: tuple[str, ...] | None
    """The data set's target per document, or None when the registry does not have the data set."""
    why_no_references: str = ""

    limited = True
    """``--limit`` takes the first documents of the data set."""

    @property
    def has_references(self) -> bool:
        return self.references is not None

    @property
    def size(self) -> int | None:
        return len(self.references) if self.references is not None else None

    def reference(self, repeat: int, doc_id: int) -> str | None:
        refs = self.references
        return refs[doc_id] if refs is not None and 0 <= doc_id < len(refs) else None

    def extract(self, output: str) -> str:
        resps: Any = [[output]]
        for f in self.filters:
            resps = list(f.apply(resps, [{}]))
        return str(resps[0])

    def score(self, output: str, target: str) -> tuple[float, str]:
        got = self.extract(output)
        return float(self.metric(references=[target], predictions=[got], **self.kwargs)["exact_match"]), got


@dataclass(frozen=True)
class NeedleScorer:
    """lair's needle: a sample passes when its answer holds the passphrase (any case); the passphrase
    of each depth is regenerated from the repeat's seed (:func:`lair.eval.needle.needle_secrets`)."""

    seed: int
    depths: int
    limited = False
    has_references = True
    why_no_references = ""

    @property
    def size(self) -> int:
        return self.depths

    def reference(self, repeat: int, doc_id: int) -> str | None:
        from lair.eval.needle import needle_secrets

        secrets = needle_secrets(self.seed + repeat, self.depths)
        return secrets[doc_id] if 0 <= doc_id < self.depths else None

    def score(self, output: str, target: str) -> tuple[float, str]:
        return (1.0 if target and target.lower() in output.lower() else 0.0), output[:80]


def _filters(cfg: dict[str, Any], name: str) -> tuple[Any, ...] | None:
    from lm_eval.filters import build_filter_ensemble

    for entry in cfg.get("filter_list") or []:
        if entry.get("name") == name:
            steps = [
                (f["function"], {k: v for k, v in f.items() if k != "function"}) for f in entry["filter"]
            ]
            return tuple(step() for step in build_filter_ensemble(name, steps).filters)
    return None


def _metric_kwargs(cfg: dict[str, Any], metric: str) -> dict[str, Any] | None:
    for entry in cfg.get("metric_list") or []:
        if entry.get("metric") == metric:
            return {k: v for k, v in entry.items() if k not in _CONFIG_KEYS}
    return None


def _target_of(template: Any) -> Callable[[dict[str, Any]], str] | None:
    from lm_eval.utils import apply_template

    if not isinstance(template, str):
        return None
    if "{{" in template:
        return lambda doc: apply_template(template, doc)
    return lambda doc: str(doc[template])


_LOADED: dict[str, tuple[str, ...]] = {}
"""References read once per process; a data set missing now is looked for again next time."""


def _references(suite: str) -> tuple[tuple[str, ...] | None, str]:
    """The targets of the suite's test documents, in lm-eval's doc_id order (offline)."""
    if suite in _LOADED:
        return _LOADED[suite], ""
    import datasets

    from lair.eval.suites import LOCAL_BUILDERS, builtin_config, hub_cached, offline_config, offline_env

    cfg = builtin_config(suite) or {}
    target = _target_of(cfg.get("doc_to_target"))
    if target is None or cfg.get("process_docs"):
        return None, f"{suite}: the task computes its references in code"
    path = str(cfg["dataset_path"])
    if path not in LOCAL_BUILDERS and not hub_cached(path):
        return (
            None,
            f"the data set {path} is not in the registry's Hugging Face cache: references not checked",
        )
    cfg = offline_config(cfg)
    try:
        with offline_env():
            docs = datasets.load_dataset(
                cfg["dataset_path"],
                cfg.get("dataset_name"),
                split=cfg["test_split"],
                **(cfg.get("dataset_kwargs") or {}),
            )
    except Exception as exc:  # the data sets library raises many kinds when a set is not cached
        return (
            None,
            f"the data set {path} is not on the registry ({type(exc).__name__}): references not checked",
        )
    _LOADED[suite] = tuple(target(dict(d)) for d in docs)
    return _LOADED[suite], ""


def scorer_for(suite: str, metric_key: str, references: bool = True) -> Scorer | str:
    """The scorer of ``suite`` for its headline ``metric_key`` (``exact_match,<filter>``), or why the
    registry cannot re-score it; without ``references`` the data set is not read."""
    try:
        from lm_eval.api.registry import get_metric

        from lair.eval.suites import builtin_config
    except ImportError:
        return "lm-eval is not installed on the registry (pip install 'lair[eval]')"
    cfg = builtin_config(suite)
    metric, _, filt = metric_key.partition(",")
    if cfg is None:
        return f"suite {suite} is not one the registry re-scores (lair_arith, gsm8k)"
    filters, kwargs, fn = _filters(cfg, filt), _metric_kwargs(cfg, metric), get_metric(metric)
    if metric != "exact_match" or filters is None or kwargs is None or fn is None:
        return f"suite {suite}: {metric_key} is not one of the task's exact-match metrics"
    if not references:
        return Scorer(
            filters, fn, kwargs, None, "evaluated on a local data file (--data): references not checked"
        )
    refs, why = _references(suite)
    return Scorer(filters, fn, kwargs, refs, why)
