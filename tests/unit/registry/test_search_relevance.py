"""Text search through the full-text index: ``sort=relevance`` ranks matches (bm25 / ts_rank), the
default stays votes, and a cursor pages through a ranked result without repeats (SQLite and
PostgreSQL)."""

from __future__ import annotations

import sqlalchemy as sa
from registry_paths import LLAMA
from sqlalchemy import Engine

from lair.registry.db.tables import RECIPES
from lair.registry.service.publish import publish
from lair.registry.service.search import parse_params, search

BASE = LLAMA.read_text()
TITLE = 'title = "Llama 3.1 8B Instruct on one RTX 4090 (SGLang)"'
SUMMARY = 'summary = "Meta\'s Llama 3.1 8B Instruct in bf16 on a single 24 GB card with SGLang, 32K context."'


def _recipe(slug: str, title: str, summary: str) -> str:
    text = BASE.replace('slug = "llama31-8b-rtx4090-sglang"', f'slug = "{slug}"')
    return text.replace(TITLE, f'title = "{title}"').replace(SUMMARY, f'summary = "{summary}"')


def _slugs(engine: Engine, **q: str) -> list[str]:
    with engine.connect() as conn:
        return [i["slug"] for i in search(conn, parse_params(q)).items]


def test_relevance_ranks_the_recipe_that_is_about_the_words_first(engine: Engine) -> None:
    with engine.begin() as conn:
        publish(conn, _recipe("once", "Zebrafish once", "A recipe."), owner="a")
        publish(
            conn, _recipe("often", "Zebrafish zebrafish", "Zebrafish, zebrafish and zebrafish."), owner="a"
        )
        publish(conn, _recipe("never", "Something else", "No such word."), owner="a")
        conn.execute(sa.update(RECIPES).where(RECIPES.c.slug == "once").values(votes=5))
    assert _slugs(engine, q="zebrafish", sort="relevance") == ["often", "once"]
    assert _slugs(engine, q="zebrafish") == ["once", "often"]  # the default: votes
    assert _slugs(engine, sort="relevance")[0] == "once"  # no words: by votes


def test_a_ranked_result_pages_with_its_cursor(engine: Engine) -> None:
    with engine.begin() as conn:
        for i in range(5):
            words = " ".join(["kingfisher"] * (i + 1))
            publish(conn, _recipe(f"k{i}", f"Kingfisher {i}", f"{words} and filler text"), owner="a")
    seen: list[str] = []
    q = {"q": "kingfisher", "sort": "relevance", "limit": "2"}
    with engine.connect() as conn:
        res = search(conn, parse_params(q))
        seen += [i["slug"] for i in res.items]
        while res.next_cursor:
            res = search(conn, parse_params(q | {"cursor": res.next_cursor}))
            seen += [i["slug"] for i in res.items]
    assert sorted(seen) == [f"k{i}" for i in range(5)] and len(seen) == 5
    assert seen[0] == "k4"  # the most mentions first
