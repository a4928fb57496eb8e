"""The line-based fallback locator (used when the full TOML scanner cannot follow a text) against the
full scanner on every bundled example: wherever both locate a key, they name the same line and the
same key column; and a recipe error found while the fallback is in force still points at its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from lair.errors import RecipeError
from lair.recipe import load_recipe, source
from lair.recipe.source import TomlScanner, line_locator

EXAMPLES = sorted((Path(__file__).parents[3] / "examples").glob("*/recipe.toml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.parent.name)
def test_line_locator_agrees_with_the_scanner(path: Path) -> None:
    text = path.read_text()
    full, coarse = TomlScanner(text).scan(), line_locator(text)
    shared = set(full.keys) & set(coarse.keys)
    assert len(shared) >= 5, shared  # the examples have many top-level keys and tables
    for key in shared:
        assert coarse.keys[key] == full.keys[key], key


def test_errors_keep_their_line_when_the_scanner_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: TomlScanner) -> source.Locator:
        raise ValueError("scanner cannot follow this text")

    monkeypatch.setattr(TomlScanner, "scan", broken)
    recipe = tmp_path / "recipe.toml"
    recipe.write_text('engine = "vllm"\ndocker_image = "x:1"\n\n[env]\nA = "1"\n\n[meta]\ntitle = 5\n')
    with pytest.raises(RecipeError) as err:
        load_recipe(recipe)
    issue = next(i for i in err.value.issues if i.path == "meta.title")
    assert (issue.line, issue.col) == (8, 9)  # `title = 5`: the value, counted by hand
