"""A registry revision pulled to a file: downloaded, checked against its sha256 and stamped untrusted
(``lair pull``, ``lair reproduce`` and the MCP server's plan tool share this one copy)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lair.errors import Invalid, LairError
from lair.launch.trust_store import stamp_pulled
from lair.recipe import load_recipe
from lair.recipe.digest import model_sha256

__all__ = ["pull_revision"]


def pull_revision(client: Any, slug: str, rev: int | None, out: Path) -> tuple[dict[str, Any], str]:
    """Download a revision to ``out``, check its sha256 and stamp it untrusted (``lair pull``);
    (the revision's JSON document, its sha256). ``client``: a :class:`lair.client.api.Client`."""
    doc = client.recipe(slug, rev)
    out.write_text(client.recipe_toml(slug, rev), encoding="utf-8")
    try:
        sha = model_sha256(load_recipe(out))
        if sha != doc["sha256"]:
            raise Invalid(f"{out}: sha256 {sha} is not the revision's {doc['sha256']}", code="mismatch")
    except LairError:
        out.unlink()  # not the revision: nothing of it stays, to be planned as the user's own
        raise
    stamp_pulled(out, registry=client.creds.url, slug=slug, revision=int(doc["revision"]), sha256=sha)
    return doc, sha
