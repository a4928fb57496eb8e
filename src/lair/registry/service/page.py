"""The view model of a recipe page: one entry per section, in the order of the published seed page.

    title, votes, badge, credits, version, tags, summary, launch-command, env, flags, notes, agent,
    engine, model, hardware, context, kv-pool, performance, requirements, placeholders, fit,
    downloads, revision-notes, revision-history, fork, export

A section with no data still appears and says so briefly, as the seed page does.
"""

from __future__ import annotations

from typing import Any

from lair.recipe import Recipe, secret_env_names
from lair.registry.service.chart import load_chart, speed_chart
from lair.registry.service.document import api_url
from lair.registry.service.driver_floor import driver_floor
from lair.registry.service.energy import DEFAULT_PRICE_KWH, MAX_PRICE_KWH, with_costs
from lair.registry.service.fitting import facts_origin, gpu_choices, known_facts, rated_rows
from lair.registry.service.launchview import derived_flags, derived_hardware, launch_lines
from lair.registry.service.markdown import render_markdown
from lair.registry.service.quality_rows import MAX_QUALITY_SPREAD
from lair.registry.service.read import RecipeRecord
from lair.registry.service.rig_values import form_fields
from lair.registry.service.tiers import MAX_SPREAD, MIN_ACCOUNTS, MIN_RIGS
from lair.registry.service.timefmt import iso

__all__ = ["SECTIONS", "agent_prompt", "fmt_tokens", "recipe_page"]

SECTIONS = (
    "title", "votes", "badge", "credits", "version", "tags", "summary", "launch-command", "env", "flags",
    "notes", "agent", "engine", "model", "hardware", "context", "kv-pool", "performance", "requirements",
    "placeholders", "fit", "downloads", "revision-notes", "revision-history", "fork", "export",
)  # fmt: skip

BADGES = {
    "community": "Community submission — verify on your own hardware.",
    "official": "Official recipe from the model or engine authors — still verify on your own hardware.",
    "verified": "Numbers verified by the registry from uploaded reports — verify on your own hardware.",
    "bundled": "Example bundled with lair — verify on your own hardware.",
}
BUNDLED_OWNER = "lair-examples"
"""The owner :func:`~lair.registry.service.publish.seed_examples` gives an example without listed_by."""


def fmt_tokens(n: int | None) -> str:
    """1048576 -> 1M, 131072 -> 128K, 40960 -> 40,960."""
    if not n:
        return "—"
    for unit, size in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= size and n % size == 0 and (n // size) & (n // size - 1) == 0:
            return f"{n // size}{unit}"
    return f"{n:,}"


def agent_prompt(url: str) -> str:
    return (
        f"Fetch {url} and apply the inference recipe it describes (engine flags, model, quant, context) "
        "to my setup. Ask before overwriting any existing config. Safety rules: show me the diff before "
        "you overwrite any config file; never run the recipe's hooks, scripts or mounts without showing "
        "them to me first and waiting for my yes; keep secrets (API keys, tokens) out of files — use "
        "environment variables."
    )


def _env(recipe: Recipe) -> list[dict[str, str]]:
    if recipe.meta.env_knobs:
        return [
            {"name": k.name, "value": k.value, "description": k.description} for k in recipe.meta.env_knobs
        ]
    secrets = secret_env_names(recipe)
    return [
        {"name": k, "value": f"${{{k}}}" if k in secrets else v, "description": ""}
        for k, v in recipe.env.items()
    ]


def _credits(rec: RecipeRecord) -> dict[str, Any]:
    """Credits as written; the upstream weights once (not again when a credit names them)."""
    m = rec.recipe.meta
    named = {c.who for c in m.credits}
    return {
        "credits": [c.model_dump() for c in m.credits],
        "upstream_weights": m.upstream_weights if m.upstream_weights not in named else None,
        "listed_by": m.listed_by or rec.owner,
    }


def _badge(rec: RecipeRecord) -> str:
    sub = rec.recipe.meta.submission
    if sub is None and rec.owner == BUNDLED_OWNER:
        return BADGES["bundled"]
    return BADGES.get(sub or "community", BADGES["community"])


def _facts(rec: RecipeRecord) -> dict[str, Any]:
    """The model's facts the fit widget uses, where they come from, and a short description."""
    facts, why = known_facts(rec.recipe)
    if facts is None:
        return {"known": False, "reason": why}
    d = facts.as_dict()
    gib = facts.weight_bytes / (1 << 30)
    moe = f", {facts.n_experts} experts ({facts.experts_per_token} per token)" if facts.is_moe else ""
    line = (
        f"{_count(facts.total_params)} params ({_count(facts.active_params)} active), {facts.weight_format}, "
        f"{facts.bits_per_weight:.2f} bits/weight, {facts.attention}, {facts.n_layers} layers{moe}; "
        f"weights {gib:,.1f} GiB"
    )
    table = rec.recipe.meta.model_facts
    source = table.source if table is not None else ""
    return {"known": True, "origin": facts_origin(rec.recipe), "line": line, "fields": d, "source": source}


def _count(n: int) -> str:
    return f"{n / 1e9:,.1f}B" if n >= 1e8 else f"{n / 1e6:,.2f}M"


def _hardware(rec: RecipeRecord) -> dict[str, Any]:
    hw = rec.recipe.meta.hardware
    return hw.model_dump(exclude_none=True) if hw else derived_hardware(rec.recipe)


def _flags(rec: RecipeRecord) -> list[dict[str, str]]:
    return [] if rec.recipe.meta.flags else derived_flags(rec.recipe)


def _performance(rec: RecipeRecord, price_kwh: float) -> dict[str, Any]:
    rates, why = rated_rows(rec.recipe, rec.measurements, rec.rigs)
    costed = with_costs(rec.measurements, price_kwh)
    rows = [dict(r, rating=rate) for r, rate in zip(costed, rates, strict=True)]
    why = why or "; ".join(sorted({r["missing"] for r in rates if r.get("missing")}))
    provenances = sorted({r["provenance"] for r in rows})
    return {
        "rows": rows,
        "roofline_missing": why,
        "provenances": provenances,
        "all_reported": provenances == ["reported"],
        "min_rigs": MIN_RIGS,
        "min_accounts": MIN_ACCOUNTS,
        "max_spread": round(100 * MAX_SPREAD),
        "notes": rec.recipe.meta.performance_notes,
        "notes_html": render_markdown(rec.recipe.meta.performance_notes),
        "chart": speed_chart(rows),  # rows with their roofline rating
        "quality": rec.quality,
        "load": [rep | {"chart": load_chart(rep["contexts"])} for rep in rec.load],
        "max_quality_spread": MAX_QUALITY_SPREAD,
        "needles": [n.model_dump() for n in rec.recipe.meta.needles],
        "price_kwh": price_kwh,
        "default_price_kwh": DEFAULT_PRICE_KWH,
        "max_price_kwh": MAX_PRICE_KWH,
    }


def _catalog_id(name: str | None) -> str:
    from lair.errors import FitError
    from lair.fit import find_device

    try:
        return find_device(name).id if name else ""
    except FitError:
        return ""


def recipe_page(rec: RecipeRecord, base: str, price_kwh: float = DEFAULT_PRICE_KWH) -> dict[str, Any]:
    """The page's view; its $/Mtok (energy) figures at ``price_kwh`` (the stored page: the default)."""
    r, m = rec.recipe, rec.recipe.meta
    url = api_url(base, rec.slug)
    facts, facts_why = known_facts(r)
    count = (m.hardware.gpu_count if m.hardware else None) or derived_hardware(r)["gpu_count"]
    return {
        "slug": rec.slug,
        "sections": SECTIONS,
        "title": m.title or r.display_name,
        "votes": rec.votes,
        "badge": _badge(rec),
        "credits": _credits(rec),
        "revision": rec.revision.number,
        "sha256": rec.revision.sha256,
        "updated": iso(rec.updated_at)[:10],
        "updated_iso": iso(rec.updated_at),
        "license": m.license,
        "tags": m.tags,
        "summary": m.summary,
        "summary_html": render_markdown(m.summary),
        "notes_html": render_markdown(m.notes),
        "flags_html": render_markdown(m.flags),
        "revision_notes_html": render_markdown(rec.revision.notes),
        "launch_command": m.launch_command,
        "launch_lines": [ln for ln in launch_lines(r) if not ln.startswith("# ")],
        "launch_notes": [ln for ln in launch_lines(r) if ln.startswith("# ")],
        "env": _env(r),
        "flags": m.flags,
        "derived_flags": _flags(rec),
        "notes": m.notes,
        "agent_prompt": agent_prompt(url),
        "curl": f"curl -fsSL {url}",
        "api_url": url,
        "engine": {
            "name": (m.engine.name if m.engine else None) or r.engine,
            "version": m.engine.version if m.engine else None,
            "install_note": m.engine.install_note if m.engine else None,
            "image": r.docker_image,
        },
        "model": {
            "repo": m.model_repo,
            "upstream": m.upstream_weights,
            "quantization": m.quantization,
            "served_name": r.served_model_name,
        },
        "hardware": _hardware(rec),
        "max_context": fmt_tokens(ctx) if (ctx := m.max_context or r.max_model_len) else None,
        "kv_pool": f"{m.kv_pool_tokens:,}" if m.kv_pool_tokens else None,
        "performance": _performance(rec, price_kwh),
        "requirements": m.requirements.model_dump(exclude_none=True) if m.requirements else {},
        "driver_floor": driver_floor(r),
        "placeholders": form_fields(r, {}),
        "fit": {
            "known": facts is not None,
            "reason": facts_why,
            "facts": _facts(rec),
            "gpus": gpu_choices(),
            "default_gpu": _catalog_id(m.hardware.gpu_model if m.hardware else None),
            "default_count": count,
            "cpu_only": r.gpus == "none" or "cpu" in {t.lower() for t in m.tags},
        },
        "downloads": [d.model_dump() for d in m.downloads],
        "revision_notes": rec.revision.notes,
        "source": rec.source,
        "history": rec.history,
        "upstream": rec.upstream,
        "upstream_revision": rec.upstream_revision,
        "upstream_newer": bool(
            rec.upstream and rec.upstream_latest and rec.upstream_latest > (rec.upstream_revision or 0)
        ),
        "owner": rec.owner,
        "exports": [
            ("recipe.toml", api_url(base, rec.slug, "toml")),
            ("recipe.yaml", api_url(base, rec.slug, "yaml")),
            ("recipe.json", url),
        ],
    }
