"""The recipe as run must be the published revision with only placeholder values filled in.

The report keeps the file as run (placeholders resolved, secret values ``***``). Both models are
walked together: every key and every non-string value must be equal; a string of the revision that
names placeholders (``{MODEL_DIR}/x.gguf``) must match the string as run with each placeholder bound to
one value throughout the recipe; ``meta``, ``placeholders`` and ``schema_version`` are never
resolved, so they must be equal as they are. A ``[meta.source]`` stamp (a copy made by ``lair pull``)
is left out, as the revision's sha256 leaves it out: a pulled revision's runs are that revision's.
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

from pydantic import ValidationError

from lair.recipe import Recipe, to_data
from lair.recipe.placeholders import LAUNCH_EXCLUDED, REF_RE
from lair.registry.service.canonical import recipe_from_canonical

__all__ = ["check_as_run"]

REDACTED = "***"


def _pattern(template: str) -> tuple[re.Pattern[str], list[str]]:
    parts, names, seen = [], [], set()
    pos = 0
    for m in REF_RE.finditer(template):
        parts.append(re.escape(template[pos : m.start()]))
        name = m.group(1)
        parts.append(f"(?P={name})" if name in seen else f"(?P<{name}>.*?)")
        seen.add(name)
        names.append(name)
        pos = m.end()
    parts.append(re.escape(template[pos:]))
    return re.compile("".join(parts), re.DOTALL), names


class _Walk:
    def __init__(self) -> None:
        self.bound: dict[str, str] = {}
        self.reasons: list[str] = []

    def string(self, where: str, want: str, got: str) -> None:
        if not REF_RE.search(want):
            if want != got:
                self.reasons.append(f"recipe as run: {where} is {got!r}; the revision has {want!r}")
            return
        pat, names = _pattern(want)
        m = pat.fullmatch(got)
        if m is None:
            self.reasons.append(
                f"recipe as run: {where} is {got!r}, not {want!r} with placeholders filled in"
            )
            return
        for name in names:
            value = m.group(name)
            if self.bound.setdefault(name, value) != value and REDACTED not in (value, self.bound[name]):
                self.reasons.append(f"recipe as run: placeholder {name} has two values ({where})")

    def node(self, where: str, want: Any, got: Any, resolved: bool) -> None:
        if isinstance(want, dict) and isinstance(got, dict):
            for k in sorted(set(want) | set(got)):
                here = f"{where}.{k}" if where else k
                if k not in got or k not in want:
                    self.reasons.append(f"recipe as run: {here} is {'missing' if k not in got else 'added'}")
                    continue
                self.node(here, want[k], got[k], resolved and not (not where and k in LAUNCH_EXCLUDED))
        elif isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
            for i, (a, b) in enumerate(zip(want, got, strict=True)):
                self.node(f"{where}[{i}]", a, b, resolved)
        elif resolved and isinstance(want, str) and isinstance(got, str):
            self.string(where, want, got)
        elif want != got:
            self.reasons.append(f"recipe as run: {where} is {got!r}; the revision has {want!r}")


def check_as_run(revision_toml: str, as_run_text: str) -> list[str]:
    """Every way the recipe as run differs from the revision beyond placeholder values (none: it is it)."""
    try:
        ran = to_data(Recipe.model_validate(tomllib.loads(as_run_text)))
    except (tomllib.TOMLDecodeError, ValidationError) as exc:
        return [f"recipe as run does not load: {str(exc).splitlines()[0]}"]
    meta = ran.get("meta")
    if isinstance(meta, dict):  # lair pull's [meta.source] stamp: where the copy came from, as the
        meta.pop("source", None)  # revision's sha256 leaves it out (lair.recipe.digest)
    walk = _Walk()
    walk.node("", to_data(recipe_from_canonical(revision_toml)), ran, True)
    return walk.reasons
