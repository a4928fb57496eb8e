"""Import and export the peers' recipe formats and import their benchmark results.

    import_recipes("sparkrun", path)       -> [Imported]   sparkrun recipe_version 2 YAML
    import_recipes("vllm-recipes", path)   -> [Imported]   vllm-project/recipes model YAML
    export_recipe(recipe, "sparkrun")      -> (YAML, [Unmapped])
    export_recipe(recipe, "vllm-recipe")   -> (YAML, [Unmapped])

Every import lists the peer's fields that have no lair meaning (:class:`Unmapped`), in the written
TOML's comment block and in the command's output; every export lists the lair fields the peer's
format cannot say. docs/interop.md has the tables.
"""

from __future__ import annotations

from pathlib import Path

from lair.errors import ConfigError
from lair.interop.conversion import Imported, Unmapped, read_yaml, yaml_files
from lair.interop.sparkrun_yaml import from_sparkrun, to_sparkrun
from lair.interop.vllm_recipes import from_vllm_recipe, to_vllm_recipe
from lair.recipe import Recipe

__all__ = [
    "EXPORT_FORMATS",
    "IMPORT_FORMATS",
    "Imported",
    "Unmapped",
    "export_recipe",
    "import_recipes",
    "write_imported",
]

IMPORT_FORMATS = ("sparkrun", "vllm-recipes")
EXPORT_FORMATS = ("sparkrun", "vllm-recipe")


def import_recipes(fmt: str, path: str | Path) -> list[Imported]:
    """The lair recipes of a peer's recipe file, or of every YAML file under a folder."""
    out: list[Imported] = []
    for file in yaml_files(Path(path)):
        data, sha = read_yaml(file)
        if fmt == "sparkrun":
            out.append(from_sparkrun(data, str(file), sha))
        elif fmt == "vllm-recipes":
            out += from_vllm_recipe(data, str(file), sha)
        else:
            raise ValueError(f"unknown recipe format {fmt!r}")
    return out


def write_imported(imports: list[Imported], out_dir: str | Path, *, force: bool = False) -> list[Path]:
    """Write each import as ``<out_dir>/<name>/recipe.toml`` (a recipe's folder); an existing file
    is an error unless ``force``. Nothing is written when one would be refused."""
    paths = [Path(out_dir) / i.name / "recipe.toml" for i in imports]
    taken = [p for p in paths if p.exists()]
    if taken and not force:
        raise ConfigError(f"{taken[0]} exists", hint="use --force to overwrite")
    names = [p.parent.name for p in paths]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ConfigError(
            f"two imported recipes are both named {dup!r}", hint="import them one file at a time"
        )
    for imp, path in zip(imports, paths, strict=True):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(imp.toml(), encoding="utf-8")
    return paths


def export_recipe(recipe: Recipe, fmt: str) -> tuple[str, list[Unmapped]]:
    """(the peer's file, the lair fields it cannot say)."""
    if fmt == "sparkrun":
        return to_sparkrun(recipe)
    if fmt == "vllm-recipe":
        return to_vllm_recipe(recipe)
    raise ValueError(f"unknown export format {fmt!r}")
