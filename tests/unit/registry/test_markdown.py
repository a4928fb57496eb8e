"""User prose is Markdown with raw HTML off, then sanitized: formatting survives, scripts and
javascript: links never do."""

from __future__ import annotations

from lair.registry.service.markdown import render_markdown


def test_markdown_keeps_formatting_and_drops_what_could_run() -> None:
    out = render_markdown(
        "**bold** `code` [docs](https://example.org) [x](javascript:alert(1)) <b onclick=x>t</b>"
    )
    assert "<strong>bold</strong>" in out and "<code>code</code>" in out
    assert '<a href="https://example.org" rel="nofollow noopener noreferrer">docs</a>' in out
    assert "javascript:" not in out.replace("[x](javascript:alert(1))", "") and "<b" not in out
    assert "&lt;b onclick=x&gt;" in out  # raw HTML shown as text


def test_angle_brackets_in_recipe_prose_stay_text() -> None:
    assert "overlay/&lt;f&gt;:ro" in render_markdown("overlay/<f>:ro")
    assert render_markdown("") == render_markdown(None) == ""
