"""User-written prose (summaries, notes, flags, revision notes) as Markdown: markdown-it-py with raw
HTML off (``<f>`` stays text), then sanitized by nh3 (Ammonia) to a short allow-list; links only to
http(s), with ``rel="nofollow noopener noreferrer"``. Everything else on a page is escaped by Jinja2."""

from __future__ import annotations

from functools import cache
from typing import Any

__all__ = ["render_markdown"]

TAGS = {"p", "br", "em", "strong", "code", "pre", "ul", "ol", "li", "a", "blockquote", "h3", "h4", "hr"}


@cache
def _md() -> Any:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False, "linkify": False}).disable(["image"])


def render_markdown(text: str | None) -> str:
    """Safe HTML for ``text`` (empty for none)."""
    if not text:
        return ""
    import nh3

    html = _md().render(text)
    return str(
        nh3.clean(
            html,
            tags=TAGS,
            attributes={"a": {"href"}},
            url_schemes={"http", "https"},
            link_rel="nofollow noopener noreferrer",
        )
    )
