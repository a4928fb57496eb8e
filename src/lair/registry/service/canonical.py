"""The canonical form of a recipe: what a revision stores and what its sha256 is taken over.

- canonical TOML: ``lair export --format toml`` of the model (keys the author set, in model order);
- sha256: of the model as compact JSON with sorted keys (``to_data``), so two files that load to the
  same model (comments, layout, TOML vs YAML) have the same hash.
"""

from __future__ import annotations

import tomllib

from lair.errors import RegistryError
from lair.recipe import Recipe, export_text, load_text
from lair.recipe.digest import model_sha256

__all__ = ["canonical", "model_sha256", "parse_recipe", "recipe_from_canonical"]


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
