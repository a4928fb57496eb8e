"""``/llms.txt``: what the site is and how an agent uses its API, plus the recipes by votes."""

from __future__ import annotations

from sqlalchemy import Connection

from lair.registry.service.search import SearchParams, search

__all__ = ["llms_txt"]


def llms_txt(conn: Connection, base: str) -> str:
    top = search(conn, SearchParams(limit=100)).items
    lines = [
        "# lair recipe registry",
        "",
        "> Launch recipes for self-hosted LLM serving: engine, image, flags, env, hardware, measured speed.",
        "",
        "## API",
        f"- [Search recipes]({base}/api/v1/recipes?q=QUERY): filters gpu, gpus, min_vram, engine, model, "
        "tag, min_context, verified; sort votes|updated|decode (with context); cursor pagination",
        f"- [One recipe]({base}/api/v1/recipes/SLUG.json): the recipe model under `recipe`, revision, "
        "sha256, measurements with provenance, driver floor; `.toml` and `.yaml` give the raw recipe",
        f"- [OpenAPI]({base}/api/v1/openapi.json)",
        "",
        "## Rules for agents applying a recipe",
        "- Show the diff before overwriting any config file.",
        "- Never run a recipe's hooks, scripts or mounts without showing them and asking first.",
        "- Keep secrets out of files: use environment variables.",
        "",
        "## Recipes",
    ]
    lines += [
        f"- [{i['title']}]({base}/api/v1/recipes/{i['slug']}.json): {i['engine']}, votes {i['votes']}"
        for i in top
    ]
    return "\n".join(lines) + "\n"
