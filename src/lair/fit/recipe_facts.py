"""Model facts and placement carried by a recipe (``[meta.model_facts]``, ``[meta.fit_layout]``).

``lair push`` writes them from what ``lair fit`` reads locally (:func:`local_facts`); a registry,
which never reads model folders, reads them back (:func:`recipe_facts`, :func:`with_fit_layout`).
The table's field names are :class:`~lair.fit.ModelFacts`'s, so the two convert one to one.
"""

from __future__ import annotations

from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any

from lair.fit.catalog import GIB
from lair.fit.fit import Layout
from lair.fit.model_facts import ModelFacts
from lair.recipe.model import FitLayout, ModelFactsTable, Recipe

__all__ = [
    "facts_table",
    "fit_layout_table",
    "local_facts",
    "recipe_facts",
    "with_fit_layout",
    "with_fit_tables",
]

_TABLE_FIELDS = tuple(ModelFactsTable.model_fields)
_SIZES = {"cpu_offload_gb": ("cpu_offload_bytes", GIB), "ssd_tables_gb": ("ssd_tables_bytes", 1e9)}


def recipe_facts(recipe: Recipe) -> ModelFacts | None:
    """The facts the recipe carries (``meta.model_facts``), named after its model when unnamed."""
    table = recipe.meta.model_facts
    if table is None:
        return None
    data = table.model_dump()
    data["name"] = data["name"] or recipe.meta.model_repo or recipe.model or recipe.display_name
    data["source"] = "the recipe's meta.model_facts" + (f" ({table.source})" if table.source else "")
    return ModelFacts(**data)


def facts_table(facts: ModelFacts) -> dict[str, Any]:
    """``facts`` as a ``[meta.model_facts]`` table: required fields and those off their default."""
    data = asdict(facts)
    defaults = {k: f.default for k, f in ModelFactsTable.model_fields.items() if not f.is_required()}
    table = {k: data[k] for k in _TABLE_FIELDS if k not in defaults or data[k] != defaults[k]}
    ModelFactsTable.model_validate(table)  # the facts read must pass the checks a registry makes
    return table


def fit_layout_table(bundled: dict[str, Any]) -> dict[str, Any]:
    """A ``fit/layout.toml`` (as :func:`lair.fit.recipe_layout.bundled_layout` reads it: sizes in
    bytes) as a ``[meta.fit_layout]`` table (sizes in GiB / GB, as the file writes them)."""
    out = dict(bundled)
    for gb_key, (byte_key, unit) in _SIZES.items():
        if byte_key in out:
            out[gb_key] = round(out.pop(byte_key) / unit, 3)
    table = {k: out[k] for k in FitLayout.model_fields if k in out}
    FitLayout.model_validate(table)
    return table


def with_fit_layout(layout: Layout, recipe: Recipe) -> Layout:
    """``layout`` with the recipe's ``meta.fit_layout`` laid over it."""
    table = recipe.meta.fit_layout
    if table is None:
        return layout
    given = {k: v for k, v in table.model_dump().items() if v is not None}
    for gb_key, (byte_key, unit) in _SIZES.items():
        if gb_key in given:
            given[byte_key] = int(given.pop(gb_key) * unit)
    known = {f.name for f in fields(Layout)}
    return replace(layout, **{k: v for k, v in given.items() if k in known})


def local_facts(
    recipe: Recipe, recipe_dir: Path | None, model: str | None = None
) -> tuple[ModelFacts, dict[str, Any], str] | None:
    """What ``lair fit`` reads for ``recipe`` on this machine: (facts, the bundled ``fit/layout.toml``
    as Layout fields, where the facts came from), or None when it finds no model folder (``model``:
    a folder, GGUF or cache entry given by hand, as ``lair fit --model``)."""
    from lair.fit.model_files import read_model_facts
    from lair.fit.recipe_layout import bundled_layout, recipe_model_path, recipe_repo_ids

    where = model or recipe_model_path(recipe, recipe_dir)
    if where is None:
        return None
    facts = read_model_facts(where)
    bundled = recipe_dir is not None and Path(where).resolve() == (recipe_dir / "fit").resolve()
    label = "fit/config.json beside the recipe" if bundled else str(where)
    if bundled:
        facts = replace(facts, name=next(iter(recipe_repo_ids(recipe)), recipe.name or facts.name))
    facts = replace(facts, source=f"{facts.source}, {label}"[:200])
    return facts, bundled_layout(recipe_dir), facts.source


def with_fit_tables(text: str, facts: dict[str, Any], layout: dict[str, Any]) -> str:
    """A TOML recipe's text with ``[meta.model_facts]`` (and ``[meta.fit_layout]`` when ``layout``
    has keys) added, comments and layout of the rest kept."""
    import tomlkit

    doc = tomlkit.parse(text)
    if "meta" not in doc:
        doc.add(tomlkit.nl())
        doc["meta"] = tomlkit.table(is_super_table=True)
    meta: Any = doc["meta"]
    for key, values in (("model_facts", facts), ("fit_layout", layout)):
        if values:
            table = tomlkit.table()
            table.update(values)
            meta[key] = table
    return tomlkit.dumps(doc)
