"""The canonical form of a recipe: what a revision stores and what its sha256 is taken over.

- canonical TOML: ``lair export --format toml`` of the model (keys the author set, in model order);
- sha256: of the model as compact JSON with sorted keys (``to_data``), so two files that load to the
  same model (comments, layout, TOML vs YAML) have the same hash.
"""

from __future__ import annotations

import tomllib
from collections import OrderedDict
from typing import Any

from lair.errors import RegistryError
from lair.recipe import Recipe, export_text, load_text, to_data
from lair.recipe.digest import model_sha256

__all__ = ["canonical", "model_sha256", "parse_recipe", "recipe_from_canonical", "revision_model"]


def parse_recipe(text: str, name: str = "recipe.toml", fmt: str = "toml") -> Recipe:
    """A recipe checked by lair's recipe core; its located errors become a 422."""
    from lair.errors import RecipeError

    try:
        return load_text(text, name, fmt)
    except RecipeError as exc:
        raise RegistryError(422, "invalid_recipe", exc.message, errors=exc.issues) from None


def canonical(recipe: Recipe) -> tuple[str, str]:
    """(canonical TOML text, sha256 of the canonical model)."""
    return export_text(recipe, "toml"), model_sha256(recipe)


def recipe_from_canonical(toml_text: str) -> Recipe:
    """A stored revision back as a model (it was checked when published: no located checks again)."""
    return Recipe.model_validate(tomllib.loads(toml_text))


_PARSED: OrderedDict[str, tuple[Recipe, dict[str, Any]]] = OrderedDict()
PARSED_MAX = 4096


def revision_model(sha256: str, toml_text: str) -> tuple[Recipe, dict[str, Any]]:
    """(model, ``to_data`` of it) of a stored revision, memoized by its sha256: a revision never
    changes, so the entry is valid forever (callers must not mutate either)."""
    hit = _PARSED.get(sha256)
    if hit is not None:
        _PARSED.move_to_end(sha256)
        return hit
    recipe = recipe_from_canonical(toml_text)
    entry = (recipe, to_data(recipe))
    _PARSED[sha256] = entry
    if len(_PARSED) > PARSED_MAX:
        _PARSED.popitem(last=False)
    return entry
