"""Property tests: generated recipes round-trip through every format; arbitrary input only ever
raises lair's own error type."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lair.errors import RecipeError
from lair.recipe import check_text, export_text, load_text
from lair.recipe.model import ENGINES, Recipe

SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
text_st = st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="{}"), max_size=30)
name_st = st.from_regex(r"[A-Z_][A-Z0-9_]{0,12}", fullmatch=True)
abs_path = st.from_regex(r"/[a-z0-9_.-]{1,12}(/[a-z0-9_.-]{1,12}){0,3}", fullmatch=True)


@st.composite
def recipes(draw: st.DrawFn) -> dict[str, Any]:
    tp = draw(st.integers(1, 8))
    data: dict[str, Any] = {
        "engine": draw(st.sampled_from(ENGINES)),
        "docker_image": draw(st.from_regex(r"[a-z]{1,8}/[a-z]{1,8}:[0-9][a-z0-9.]{0,6}", fullmatch=True)),
        "model": draw(text_st),
        "tensor_parallel_size": tp,
        "port": draw(st.integers(1, 65535)),
        "args": draw(st.lists(text_st, max_size=4)),
        "env": draw(st.dictionaries(name_st, text_st, max_size=5)),
        "before_serve": draw(
            st.lists(st.one_of(text_st.filter(bool), st.just({"script": "make_tiny_model"})), max_size=3)
        ),
        "extra_mounts": [
            {"host": h, "container": c, "read_only": ro}
            for h, c, ro in draw(st.lists(st.tuples(abs_path, abs_path, st.booleans()), max_size=3))
        ],
        "meta": {
            "title": draw(text_st),
            "tags": draw(st.lists(text_st, max_size=4)),
            "performance": [
                {"context": c, "concurrency": n, "decode_tok_s": d}
                for c, n, d in draw(
                    st.lists(
                        st.tuples(
                            st.integers(1, 2**21), st.integers(1, 256), st.floats(0.5, 1e5, allow_nan=False)
                        ),
                        max_size=3,
                    )
                )
            ],
        },
    }
    if draw(st.booleans()):
        data["cpus"] = draw(st.floats(0.1, 512, allow_nan=False))
    if draw(st.booleans()):
        data["shm_size"] = f"{draw(st.integers(1, 64))}{draw(st.sampled_from('kmg'))}"
    return data


@SETTINGS
@given(recipes(), st.sampled_from(["toml", "yaml", "json"]))
def test_generated_recipes_round_trip(data: dict[str, Any], fmt: str) -> None:
    recipe = Recipe.model_validate(data)
    text = export_text(recipe, fmt)
    assert load_text(text, f"gen.{fmt}", fmt) == recipe
    back = load_text(export_text(recipe, "yaml"), "gen.yaml", "yaml")
    assert load_text(export_text(back, "toml"), "gen.toml", "toml") == recipe


@SETTINGS
@given(st.text(max_size=300), st.sampled_from(["toml", "yaml", "json"]))
def test_arbitrary_text_only_raises_recipe_error(text: str, fmt: str) -> None:
    result = check_text(text, f"x.{fmt}", fmt)
    assert result.ok == (result.recipe is not None)
    try:
        load_text(text, f"x.{fmt}", fmt)
    except RecipeError as exc:
        assert exc.issues and all(i.line >= 1 and i.col >= 1 for i in exc.issues)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=20,
)
keys = st.sampled_from(
    ["engine", "port", "env", "meta", "extra_mounts", "before_serve", "cpus", "placeholders", "x"]
)


@SETTINGS
@given(st.dictionaries(keys, json_values, max_size=6))
def test_arbitrary_structures_only_raise_recipe_error(data: dict[str, Any]) -> None:
    text = json.dumps(data)
    try:
        load_text(text, "x.json", "json")
    except RecipeError as exc:
        assert all(i.path is not None and i.message for i in exc.issues)


@pytest.mark.parametrize("fmt", ["toml", "yaml", "json"])
def test_toml_like_garbage_is_located(fmt: str) -> None:
    result = check_text("[[a]]\nb = [1, {c = 2}\n", f"g.{fmt}", fmt)
    assert not result.ok and result.errors[0].line >= 1
