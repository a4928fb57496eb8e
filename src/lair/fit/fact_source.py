"""Where a model's facts came from, fact by fact: the Hub (``repo@commit`` and the file), a local
folder, the HF cache, the ``fit/config.json`` bundled beside a recipe (``bundled``), the table of model
facts bundled with lair (``bundled with lair``: :mod:`lair.fit.bundled_models`), or the recipe's own
``[meta.model_facts]``. ``lair fit`` prints it (text and ``--json``: ``model_source``)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal

from lair.fit.model_facts import ModelFacts

__all__ = ["WEIGHT_FACTS", "FactSource", "Kind", "fact_source"]

Kind = Literal["hub", "local folder", "hf cache", "bundled", "bundled with lair", "recipe"]
WEIGHT_FACTS = ("weight_bytes", "expert_bytes", "embedding_bytes", "extra_bytes")
"""Facts the weight files give (safetensors headers, the index's total size); the rest is config.json's."""


@dataclass(frozen=True)
class FactSource:
    kind: Kind
    where: str  # "ORG/NAME@<commit>" or a path
    facts: dict[str, str]  # fact name -> the file (or table) it was read from

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "where": self.where, "facts": dict(self.facts)}


def _files(facts: ModelFacts, kind: Kind) -> tuple[str, str]:
    """(the file the shape came from, the one the weight bytes came from), read off ``facts.source``."""
    if kind == "recipe":
        return "meta.model_facts", "meta.model_facts"
    src = facts.source.split(": ", 1)[-1].split(", ")[0]
    if src.startswith("GGUF"):
        return src, src
    weights = src.removeprefix("config.json + ") if src.startswith("config.json + ") else ""
    return "config.json", weights or "config.json (counted from the architecture and weight format)"


def fact_source(kind: Kind, where: str, facts: ModelFacts) -> FactSource:
    """Every fact of ``facts`` mapped to the file it came from."""
    shape, weights = _files(facts, kind)
    names = [f.name for f in fields(ModelFacts) if f.name not in ("name", "source")]
    return FactSource(kind, where, {n: weights if n in WEIGHT_FACTS else shape for n in names})
