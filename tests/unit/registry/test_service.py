"""The service layer on SQLite and PostgreSQL: publish, revisions, facets, search, filters, sorting,
cursors; expected values come from the recipe files themselves."""

from __future__ import annotations

import tomllib
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from registry_paths import LLAMA, SEED_000, SEED_003
from sqlalchemy import Engine

from lair.errors import RegistryError
from lair.registry.db.tables import RECIPES
from lair.registry.service import read, search
from lair.registry.service.publish import add_revision, publish, seed_examples


def _recipe(
    i: int,
    *,
    gpu: str = "H200",
    gpus: int = 1,
    engine: str = "vllm",
    ctx: int = 8192,
    tags: str = '"a"',
    vram: int = 141,
    decode: float | None = None,
    title: str = "",
) -> str:
    perf = f"\n[[meta.performance]]\ncontext = 2048\ndecode_tok_s = {decode}\n" if decode else ""
    return f"""engine = "{engine}"
docker_image = "img/x:1"
model = "org/model-{i % 3}"
[meta]
title = "{title or f"Recipe {i}"}"
slug = "r-{i}"
summary = "number {i} {"zebra" if i % 5 == 0 else "plain"}"
tags = [{tags}]
max_context = {ctx}
[meta.hardware]
gpu_model = "{gpu}"
gpu_count = {gpus}
vram_gb = {vram}
{perf}"""


def _search(eng: Engine, **kw: object) -> list[str]:
    with eng.connect() as conn:
        return [i["slug"] for i in search.search(conn, search.SearchParams(**kw)).items]  # type: ignore[arg-type]


def test_publish_stores_canonical_revision_and_facets(engine: Engine) -> None:
    text = SEED_000.read_text()
    with engine.begin() as conn:
        pub = publish(conn, text, owner="yoloyash")
    raw = tomllib.loads(text)
    assert pub.slug == raw["meta"]["slug"] and pub.revision == 1 and len(pub.sha256) == 64
    with engine.connect() as conn:
        rec = read.get_recipe(conn, pub.slug)
        row = conn.execute(sa.text("SELECT * FROM recipes WHERE slug = :s"), {"s": pub.slug}).mappings().one()
    assert rec.recipe.meta.title == raw["meta"]["title"]
    assert tomllib.loads(rec.revision.toml)["env"] == raw["env"]
    assert row["gpu_model"] == raw["meta"]["hardware"]["gpu_model"] and row["gpu_count"] == 2
    assert row["max_context"] == raw["meta"]["max_context"] and row["engine"] == "vllm"
    assert row["best_decode_tok_s"] == max(p.get("decode_tok_s", 0) for p in raw["meta"]["performance"])
    assert [(m["context"], m["concurrency"]) for m in rec.measurements] == sorted(
        (p["context"], p.get("concurrency", 1)) for p in raw["meta"]["performance"]
    )
    assert {m["provenance"] for m in rec.measurements} == {"reported"}


def test_same_model_same_hash_and_duplicate_slug_is_a_conflict(engine: Engine) -> None:
    text = LLAMA.read_text()
    with engine.begin() as conn:
        first = publish(conn, text, owner="a")
    reformatted = "# a comment\n" + text.replace('engine = "sglang"', 'engine    =    "sglang"')
    with engine.begin() as conn, pytest.raises(RegistryError) as exc:
        publish(conn, reformatted, owner="b")
    assert exc.value.status == 409
    with engine.begin() as conn:
        other = publish(conn, reformatted, owner="b", slug="copy")
    assert other.sha256 == first.sha256


def test_invalid_recipe_is_422_with_located_errors(engine: Engine) -> None:
    with engine.begin() as conn, pytest.raises(RegistryError) as exc:
        publish(conn, 'engine = "vllm"\nmodle = "x"\n', owner="a")
    assert exc.value.status == 422 and exc.value.errors
    # every problem in one run: the typo'd key, and the image a docker recipe (the default) lacks
    (typo,) = [i for i in exc.value.errors if "modle" in i.path + i.message]
    assert (typo.line, typo.col) == (2, 1)
    assert [(i.line, i.code) for i in exc.value.errors if i is not typo] == [(1, "runtime")]


def test_revisions_are_numbered_and_immutable(engine: Engine) -> None:
    with engine.begin() as conn:
        publish(conn, _recipe(1), owner="a")
    for n in (2, 3):
        with engine.begin() as conn:
            pub = add_revision(conn, "r-1", _recipe(1, ctx=1000 * n), author="a", notes=f"rev {n}")
        assert pub.revision == n
    with engine.connect() as conn:
        latest = read.get_recipe(conn, "r-1")
        first = read.get_revision(conn, "r-1", 1)
    assert latest.revision.number == 3 and latest.recipe.meta.max_context == 3000
    assert first.recipe.meta.max_context == 8192 and first.revision.notes == "Initial version."
    assert [h.number for h in latest.history] == [3, 2, 1]
    assert _search(engine, min_context=2500) == ["r-1"] and _search(engine, min_context=3001) == []


def test_writes_bump_the_version(engine: Engine) -> None:
    with engine.connect() as conn:
        v0 = read.version(conn)
    with engine.begin() as conn:
        publish(conn, _recipe(1), owner="a")
    with engine.connect() as conn:
        assert read.version(conn) == v0 + 1


def test_filters_each_narrow_to_exactly_the_matching_recipes(engine: Engine) -> None:
    specs = [
        dict(gpu="H200", gpus=1, engine="vllm", ctx=8192, tags='"a"', vram=141),
        dict(gpu="RTX PRO 6000", gpus=2, engine="sglang", ctx=1048576, tags='"a", "long"', vram=96),
        dict(gpu="RTX 4090", gpus=1, engine="llamacpp", ctx=32768, tags='"b"', vram=24),
        dict(gpu="RTX PRO 6000", gpus=4, engine="vllm", ctx=131072, tags='"long"', vram=96),
    ]
    with engine.begin() as conn:
        for i, s in enumerate(specs):
            publish(conn, _recipe(i, **s), owner="a")  # type: ignore[arg-type]

    def expect(pred: object) -> list[str]:
        return sorted(f"r-{i}" for i, s in enumerate(specs) if pred(s))  # type: ignore[operator]

    assert sorted(_search(engine, gpu="rtx pro 6000")) == expect(lambda s: s["gpu"] == "RTX PRO 6000")
    assert sorted(_search(engine, gpus=1)) == expect(lambda s: s["gpus"] == 1)
    assert sorted(_search(engine, min_vram=90)) == expect(lambda s: s["vram"] >= 90)
    assert sorted(_search(engine, engine="vllm")) == expect(lambda s: s["engine"] == "vllm")
    assert sorted(_search(engine, min_context=100000)) == expect(lambda s: s["ctx"] >= 100000)
    assert sorted(_search(engine, tags=("long",))) == expect(lambda s: "long" in s["tags"])
    assert sorted(_search(engine, tags=("a", "long"))) == ["r-1"]
    assert sorted(_search(engine, model="org/model-1")) == ["r-1"]
    assert _search(engine, gpu="rtx pro 6000", gpus=4, engine="vllm") == ["r-3"]
    assert _search(engine, verified=True) == []


def test_full_text_search_matches_words_and_prefixes(engine: Engine) -> None:
    with engine.begin() as conn:
        for i in range(10):
            publish(conn, _recipe(i), owner="a")
        publish(conn, SEED_000.read_text(), owner="yoloyash")
    zebra = sorted(f"r-{i}" for i in range(10) if i % 5 == 0)
    assert sorted(_search(engine, q="zebra")) == zebra
    assert sorted(_search(engine, q="zeb")) == zebra
    assert sorted(_search(engine, q="recipe zeb")) == zebra  # the last word, the one being typed
    assert _search(engine, q="zeb recipe") == []  # the words before it are whole words
    seed = tomllib.loads(SEED_000.read_text())["meta"]["slug"]
    assert _search(engine, q="engram") == [seed]  # summary
    assert _search(engine, q="bit deterministic") == [seed]  # notes
    assert _search(engine, q="diffbot") == [seed]  # model id
    assert _search(engine, q="nvme") == [seed]  # tags (engram-nvme)
    assert _search(engine, q="zebra engram") == []
    assert _search(engine, q="!!! ' \" *") == _search(engine)  # no words: no text filter, never an error


def test_sorting_and_cursor_pagination_visit_every_recipe_once(engine: Engine) -> None:
    with engine.begin() as conn:
        for i in range(23):
            publish(conn, _recipe(i, decode=float(100 + (i * 7) % 23)), owner="a")
        conn.execute(sa.text("UPDATE recipes SET votes = id % 4"))
    for sort in search.SORTS:
        seen: list[str] = []
        cursor = None
        with engine.connect() as conn:
            while True:
                page = search.search(conn, search.SearchParams(sort=sort, limit=5, cursor=cursor))
                seen += [i["slug"] for i in page.items]
                cursor = page.next_cursor
                if cursor is None:
                    break
        assert sorted(seen) == sorted(f"r-{i}" for i in range(23)) and len(seen) == 23, sort
    by_decode = _search(engine, sort="decode", context=2048, limit=3)
    best = sorted(range(23), key=lambda i: -((i * 7) % 23))[:3]
    assert by_decode == [f"r-{i}" for i in best]
    with engine.connect() as conn:
        votes = [i["votes"] for i in search.search(conn, search.SearchParams(limit=23)).items]
    assert votes == sorted(votes, reverse=True)


def test_updated_sort_is_newest_first_across_pages(engine: Engine) -> None:
    """Hand-set update times (one tie, broken by the newer recipe first); pages of 2 cross the tie."""
    times = {  # slug -> when it was last updated, set by hand
        "r-0": datetime(2025, 3, 1, 12, 0, tzinfo=UTC),
        "r-1": datetime(2025, 9, 15, 8, 30, tzinfo=UTC),
        "r-2": datetime(2024, 12, 31, 23, 59, tzinfo=UTC),
        "r-3": datetime(2025, 9, 15, 8, 30, tzinfo=UTC),  # ties with r-1; published after it
        "r-4": datetime(2026, 1, 2, 0, 0, tzinfo=UTC),
        "r-5": datetime(2025, 3, 1, 11, 59, 59, tzinfo=UTC),  # one second before r-0
    }
    with engine.begin() as conn:
        for i in range(6):
            publish(conn, _recipe(i), owner="a")
        for slug, t in times.items():
            conn.execute(sa.update(RECIPES).where(RECIPES.c.slug == slug).values(updated_at=t))
    expected = ["r-4", "r-3", "r-1", "r-0", "r-5", "r-2"]
    assert _search(engine, sort="updated") == expected
    seen: list[str] = []
    cursor = None
    with engine.connect() as conn:
        while True:
            page = search.search(conn, search.SearchParams(sort="updated", limit=2, cursor=cursor))
            seen += [i["slug"] for i in page.items]
            assert [i["updated_at"] for i in page.items] == [times[i["slug"]].isoformat() for i in page.items]
            if (cursor := page.next_cursor) is None:
                break
    assert seen == expected
    with engine.begin() as conn:  # a new revision makes the oldest the newest
        add_revision(conn, "r-2", _recipe(2, title="Recipe 2, revised"), author="a", notes="n")
    assert _search(engine, sort="updated") == ["r-2", *expected[:-1]]


def test_bad_parameters_and_cursors_are_422() -> None:
    for bad in (
        {"limit": "0"},
        {"limit": "x"},
        {"gpus": "-1"},
        {"sort": "nope"},
        {"verified": "maybe"},
        {"min_vram": "nan?"},
        {"cursor": "!!"},
    ):
        with pytest.raises(RegistryError) as exc:
            p = search.parse_params(bad)
            search._decode_cursor(p)
        assert exc.value.status == 422, bad


def test_seed_examples_is_idempotent(engine: Engine) -> None:
    with engine.begin() as conn:
        added = seed_examples(conn)
    assert len(added) >= 3
    with engine.begin() as conn:
        assert seed_examples(conn) == []
    with engine.connect() as conn:
        assert (
            read.get_recipe(conn, "dsv41-flash-exl3-2x").recipe.docker_image
            == tomllib.loads(SEED_003.read_text())["docker_image"]
        )
