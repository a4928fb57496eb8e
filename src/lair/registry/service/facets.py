"""Facets of a recipe (what the filters compare) and the text the full-text index holds."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from lair.recipe import Recipe

__all__ = ["Facets", "facets_of", "norm_key", "slugify"]

_NON_ALNUM = re.compile(r"[^a-z0-9]+")


def norm_key(text: str | None) -> str | None:
    """A comparison key: lower case, letters and digits only (``RTX PRO 6000`` -> ``rtxpro6000``)."""
    if not text:
        return None
    return _NON_ALNUM.sub("", text.lower()) or None


def slugify(text: str) -> str:
    return _NON_ALNUM.sub("-", text.lower()).strip("-")[:200] or "recipe"


def model_id_of(recipe: Recipe) -> str | None:
    m = recipe.meta
    if m.model_repo or m.upstream_weights:
        return m.model_repo or m.upstream_weights
    if recipe.model and "{" not in recipe.model:
        return recipe.model
    return (m.model_facts.name if m.model_facts else None) or recipe.served_model_name


@dataclass(frozen=True)
class Facets:
    title: str
    summary: str
    engine: str
    gpu_model: str | None
    gpu_key: str | None
    gpu_count: int | None
    vram_gb: float | None
    model_id: str | None
    model_key: str | None
    max_context: int | None
    license: str | None
    tags: tuple[str, ...]
    best_decode_tok_s: float | None
    search_text: str

    def columns(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d.pop("tags")
        return d


def _max_context(recipe: Recipe) -> int | None:
    return recipe.meta.max_context or recipe.max_model_len


def facets_of(recipe: Recipe) -> Facets:
    from lair.registry.service.launchview import card_line

    m, hw = recipe.meta, recipe.meta.hardware
    model_id = model_id_of(recipe)
    tags = tuple(dict.fromkeys(t.strip().lower() for t in m.tags if t.strip()))
    decodes = [r.decode_tok_s for r in m.performance if r.decode_tok_s is not None]
    text = [m.title or recipe.display_name, m.summary or "", model_id or "", m.upstream_weights or ""]
    text += [" ".join(tags), m.notes or "", m.performance_notes or "", recipe.engine]
    return Facets(
        title=m.title or recipe.display_name,
        summary=m.summary or card_line(recipe, max(decodes) if decodes else None),
        engine=(m.engine.name if m.engine and m.engine.name else recipe.engine).lower(),
        gpu_model=hw.gpu_model if hw else None,
        gpu_key=norm_key(hw.gpu_model) if hw else None,
        gpu_count=hw.gpu_count if hw else None,
        vram_gb=hw.vram_gb if hw else None,
        model_id=model_id,
        model_key=norm_key(model_id),
        max_context=_max_context(recipe),
        license=m.license,
        tags=tags,
        best_decode_tok_s=max(decodes) if decodes else None,
        search_text="\n".join(t for t in text if t),
    )
