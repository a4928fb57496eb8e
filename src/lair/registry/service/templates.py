"""The site's Jinja2 environment: the page templates (``lair/registry/web/templates``, autoescaped)
and their filters. Service code renders the stored pages with it and the web layer its live ones:
the same templates and filters either way, without the service importing the web layer."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape

from lair.registry.service.page import fmt_tokens
from lair.vocabulary import attempt_word, tiers_phrase

__all__ = ["TEMPLATES", "page_env"]

TEMPLATES = Path(__file__).resolve().parents[1] / "web" / "templates"


def _num(v: Any) -> str:
    if v is None or v == "":
        return "—"
    if isinstance(v, float) and not v.is_integer():
        return f"{v:,.1f}"
    return f"{int(v):,}"


def _sig(v: Any) -> str:
    """A figure with three significant digits (0.391, 9.38, 312), thousands separated above 1,000."""
    if v is None or v == "":
        return "—"
    x = float(v)
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}" if abs(x) >= 1e-4 else f"{x:.2e}"


@cache
def page_env() -> Environment:
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(default=True))
    env.filters["num"] = _num
    env.filters["sig"] = _sig
    env.filters["tokens"] = fmt_tokens
    env.filters["tiers"] = tiers_phrase  # lair.vocabulary: the one set of words for tiers
    env.filters["attempt"] = attempt_word
    env.trim_blocks = env.lstrip_blocks = True
    return env
