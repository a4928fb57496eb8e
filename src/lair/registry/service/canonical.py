"""The canonical form of a recipe: what a revision stores and what its sha256 is taken over.

- canonical TOML: ``lair export --format toml`` of the model (keys the author set, in model order);
- sha256: of the model as compact JSON with sorted keys (``to_data``), so two files that load to the
  same model (comments, layout, TOML vs YAML) have the same hash.
"""

from __future__ import annotations

import threading
import tomllib
from typing import Any

from cachetools import LRUCache

from lair.errors import Invalid
from lair.recipe import CheckResult, Recipe, check_text, export_text, to_data
from lair.recipe.digest import model_sha256

__all__ = [
    "canonical",
    "check_depth",
    "check_recipe",
    "model_sha256",
    "parse_recipe",
    "recipe_from_canonical",
    "revision_model",
]


MAX_DEPTH = 32
"""Nesting of a recipe's tables, arrays and dotted keys (a real recipe is 4 deep); deeper text is
refused before the TOML parser, which recurses once per level."""
MAX_PLACEHOLDERS = 100


def _refused(name: str, line: int, col: int, path: str, message: str) -> Invalid:
    from lair.errors import Issue

    issue = Issue(name, line, col, path, message)
    return Invalid(issue.render(), code="invalid_recipe", errors=[issue])


def _too_deep(text: str) -> tuple[int, int] | None:
    """(line, column) where the text nests deeper than ``MAX_DEPTH`` (brackets, braces and the dots
    of dotted keys, outside strings and comments), or None."""
    depth, dots, line, start, i, quote = 0, 0, 1, 0, 0, ""
    while i < len(text):
        c = text[i]
        if quote:
            if text.startswith(quote, i) and (quote[0] == "'" or text[i - 1] != "\\" or text[i - 2] == "\\"):
                i, quote = i + len(quote), ""
                continue
        elif c in "\"'":
            quote = c * 3 if text.startswith(c * 3, i) else c
            i += len(quote)
            continue
        elif c == "#":
            i = text.find("\n", i) % (len(text) + 1)  # to the line's end (or the text's: -1)
            continue
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
        elif c == "." and not (text[i - 1 : i].isdigit() and text[i + 1 : i + 2].isdigit()):
            dots += 1
        if c == "\n":
            line, start, dots = line + 1, i + 1, 0
        elif depth + dots > MAX_DEPTH:
            return line, i - start + 1
        i += 1
    return None


def check_depth(text: str, name: str = "recipe.toml") -> None:
    """A located 422 when ``text`` nests deeper than ``MAX_DEPTH`` (call it before anything parses
    the text: every TOML parser here recurses once per level)."""
    if (at := _too_deep(text)) is not None:
        raise _refused(name, *at, "", f"nested deeper than {MAX_DEPTH} levels")


def check_recipe(text: str, name: str = "recipe.toml", fmt: str = "toml") -> CheckResult:
    """lair's recipe checks of ``text`` (its warnings too) with a model; its located errors become a
    422 (so does a recipe nested deeper than ``MAX_DEPTH`` or with more than ``MAX_PLACEHOLDERS``
    placeholders). One parse serves every later step of a write (the secret scan's warnings, the
    facets, the canonical text)."""
    check_depth(text, name)
    try:
        result = check_text(text, name, fmt)
    except RecursionError:  # a nesting the scan does not see (YAML flow collections)
        raise _refused(name, 1, 1, "", f"nested deeper than {MAX_DEPTH} levels") from None
    if result.recipe is None or result.errors:
        from lair.errors import RecipeError

        message = RecipeError(result.errors).message
        raise Invalid(message, code="invalid_recipe", errors=list(result.errors))
    if len(result.recipe.placeholders) > MAX_PLACEHOLDERS:
        count = len(result.recipe.placeholders)
        raise _refused(name, 1, 1, "placeholders", f"{count} placeholders (at most {MAX_PLACEHOLDERS})")
    return result


def parse_recipe(text: str, name: str = "recipe.toml", fmt: str = "toml") -> Recipe:
    """The model of ``check_recipe``."""
    recipe = check_recipe(text, name, fmt).recipe
    assert recipe is not None  # check_recipe raised otherwise
    return recipe


def canonical(recipe: Recipe) -> tuple[str, str]:
    """(canonical TOML text, sha256 of the canonical model)."""
    return export_text(recipe, "toml"), model_sha256(recipe)


def recipe_from_canonical(toml_text: str) -> Recipe:
    """A stored revision back as a model (it was checked when published: no located checks again)."""
    return Recipe.model_validate(tomllib.loads(toml_text))


PARSED_MAX = 4096
_PARSED: LRUCache[str, tuple[Recipe, dict[str, Any]]] = LRUCache(PARSED_MAX)
_PARSED_LOCK = threading.Lock()  # the routes call it from worker threads; LRUCache is not thread-safe


def revision_model(sha256: str, toml_text: str) -> tuple[Recipe, dict[str, Any]]:
    """(model, ``to_data`` of it) of a stored revision, memoized by its sha256: a revision never
    changes, so the entry is valid forever (callers must not mutate either)."""
    with _PARSED_LOCK:
        hit = _PARSED.get(sha256)
    if hit is not None:
        return hit
    recipe = recipe_from_canonical(toml_text)  # outside the lock: two threads may both parse one
    entry = (recipe, to_data(recipe))
    with _PARSED_LOCK:
        _PARSED[sha256] = entry
    return entry
