"""The part of a schema-invalid recipe that still validates, so that ``lair check`` can run its
cross-field checks in the same pass as the schema errors (every problem of a file in one run).

:func:`salvage` drops what each schema error points at (an unknown key, a value of the wrong type,
a whole list when one of its items is bad: dropping an item would shift the indices every later
issue is located by) and validates again, a few rounds at most. It returns the recipe the rest
validates to, with the top-level keys whose values it dropped: a check that reads one of them is
skipped (its input would be a default, not what the file says), the others run.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from lair.recipe.model import Recipe

__all__ = ["Salvaged", "salvage"]

_ROUNDS = 5
"""Validation rounds at most: each drops what the errors of the last one pointed at."""


@dataclass(frozen=True)
class Salvaged:
    """The recipe the valid rest of a file makes, and the top-level keys dropped on the way (unknown
    keys are dropped too but not named: the file never set a value the checks could read there)."""

    recipe: Recipe
    dropped: frozenset[str]


def salvage(data: dict[str, Any]) -> Salvaged | None:
    """The recipe ``data`` makes once its invalid parts are dropped (None: nothing valid is left,
    e.g. a required key is missing or a whole-recipe rule failed)."""
    rest, dropped = copy.deepcopy(data), set[str]()
    for _ in range(_ROUNDS):
        try:
            return Salvaged(Recipe.model_validate(rest), frozenset(dropped))
        except ValidationError as exc:
            for err in exc.errors():
                top = _drop(rest, tuple(err["loc"]))
                if top is None or err["type"] == "missing":
                    return None
                if err["type"] != "extra_forbidden":
                    dropped.add(top)
    return None


def _drop(data: dict[str, Any], loc: tuple[Any, ...]) -> str | None:
    """Remove the value at ``loc`` (or the list holding it); the top-level key it was under, None
    when ``loc`` names no key of the file."""
    if not loc or not isinstance(loc[0], str):
        return None
    holder: Any = data
    for i, key in enumerate(loc):
        if not isinstance(holder, dict) or key not in holder:
            break
        value = holder[key]
        if i == len(loc) - 1 or not isinstance(value, dict):
            del holder[key]
            break
        holder = value
    return str(loc[0])
