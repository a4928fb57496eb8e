"""The sha256 of a recipe's canonical model: what ties a run report to a published revision.

Taken over the model as compact JSON with sorted keys (:func:`lair.recipe.to_data`), so two files that
load to the same model (comments, layout, TOML vs YAML) have the same hash. The registry stores it per
revision; the report writer records it for the source recipe (before placeholders are resolved).
"""

from __future__ import annotations

import hashlib
import json

from lair.recipe import Recipe, to_data

__all__ = ["model_sha256"]


def model_sha256(recipe: Recipe) -> str:
    """The digest; a ``[meta.source]`` stamp (where a pulled copy came from) is left out, so a pulled
    recipe keeps its revision's digest."""
    data = to_data(recipe)
    meta = data.get("meta")
    if isinstance(meta, dict) and "source" in meta:
        meta.pop("source")
        if not meta:
            data.pop("meta")
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()
