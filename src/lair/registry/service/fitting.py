"""lair.fit on the registry: the fit widget (a catalog GPU and a count) and % of roofline per row.

Model facts come from the recipe's own ``[meta.model_facts]`` (what ``lair push`` read where ``lair fit``
reads, bounded and checked by the recipe model), else from the table bundled with lair
(``lair/fit/models.toml``, :mod:`lair.fit.bundled_models`): a registry never reads model folders named by
a recipe (they would be paths on the server's own disk).
The recipe's facts (and its ``[meta.fit_layout]``) are its author's word: they size the fit widget and
rate reported rows, which are the author's word too; an uploaded report is checked only against the
bundled table (:func:`table_facts`, docs/registry-reports.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lair.errors import FitError, Invalid
from lair.fit import (
    Hardware,
    Layout,
    Measured,
    ModelFacts,
    facts_from_config,
    find_device,
    find_device_by_gpu_name,
    layout_from_recipe,
    rate_row,
)
from lair.fit.bundled_models import find_bundled
from lair.fit.recipe_facts import recipe_facts, with_fit_layout
from lair.fit.summary import fit_summary
from lair.recipe import Recipe

__all__ = [
    "facts_origin",
    "fingerprint_gpus",
    "fingerprint_hardware",
    "fit_for",
    "gpu_choices",
    "known_facts",
    "page_layout",
    "rated_rows",
    "roofline_hardware",
    "table_facts",
]

MAX_GPUS = 1024
"""Most GPUs one fingerprint may name (the fit widget's limit too)."""


def table_facts(recipe: Recipe) -> tuple[ModelFacts | None, str]:
    """The model's facts from the registry's own table (what uploaded reports are checked against),
    else None and why not. A recipe's ``meta.model_facts`` are never read here: its author typed them."""
    m = recipe.meta
    names = [m.model_repo, m.upstream_weights, recipe.model, recipe.served_model_name]
    for name in names:
        hit = find_bundled(name) if name else None
        if hit:
            return facts_from_config(hit.config, hit.repo), ""
    shown = next((n for n in names if n), "this model")
    why = f"model facts unknown: the registry has no config for {shown}"
    if m.model_facts is not None:
        why += " (the recipe's own meta.model_facts are its author's word: never used to verify a report)"
    return None, why


def known_facts(recipe: Recipe) -> tuple[ModelFacts | None, str]:
    """The model's facts for the fit widget and reported rows: the recipe's own, else the table's."""
    facts = recipe_facts(recipe)
    return (facts, "") if facts is not None else table_facts(recipe)


def facts_origin(recipe: Recipe) -> str:
    """Where :func:`known_facts` takes the facts from: ``recipe``, ``registry`` or ``""`` (none)."""
    if recipe.meta.model_facts is not None:
        return "recipe"
    return "registry" if table_facts(recipe)[0] is not None else ""


def page_layout(recipe: Recipe) -> Layout:
    """The placement of the fit widget and reported rows: the launch fields, then ``meta.fit_layout``."""
    return with_fit_layout(layout_from_recipe(recipe), recipe)


def gpu_choices() -> list[dict[str, Any]]:
    from lair.fit import load_catalog

    return [{"id": d.id, "name": d.name, "memory_gb": d.memory_gb} for d in load_catalog()]


def _hardware(name: str, count: int) -> Hardware:
    try:
        return Hardware(find_device(name), gpus=count)
    except FitError as exc:
        raise Invalid(exc.message, hint=exc.hint) from None


def fit_for(
    recipe: Recipe, gpu: str, count: int, context: int | None = None, efficiencies: Any = None
) -> dict[str, Any]:
    """The fit verdict, KV pool and max context of ``recipe`` on ``count`` x ``gpu``; with
    ``efficiencies`` (:class:`lair.fit.predict.EfficiencyRow`), the predicted speed of its engine."""
    facts, why = known_facts(recipe)
    hw = _hardware(gpu, count)
    if facts is None:
        return {"ok": False, "known": False, "reason": why, "gpu": hw.device.name, "gpus": count}
    layout = page_layout(recipe)
    out = fit_summary(facts, hw, layout, context=context, efficiencies=efficiencies, engine=recipe.engine)
    return {"known": True, "reason": "", "gpu": hw.device.name, "gpus": count} | out


def fingerprint_gpus(fp: Mapping[str, Any]) -> tuple[str, int] | None:
    """(GPU model, count) a run report's fingerprint names, or None (a CPU-only rig). With cards of
    several models, the one the catalog gives the most memory bandwidth (the highest ceiling: a mixed
    rig is never held to its slower card); an unknown name is kept, so that the rating says so."""
    found = fp.get("gpus")
    gpus: Mapping[str, Any] = found if isinstance(found, dict) else {}
    models = [m for m in gpus.get("models") or [] if isinstance(m, str)]
    if not models:
        return None
    count = gpus.get("count")
    n = count if isinstance(count, int) and not isinstance(count, bool) else len(models)
    unknown = [m for m in models if find_device_by_gpu_name(m) is None]
    pick = unknown[0] if unknown else max(models, key=_bandwidth)
    return pick, n


def _bandwidth(model: str) -> float:
    dev = find_device_by_gpu_name(model)
    return dev.memory_bandwidth_gbs if dev else 0.0


def fingerprint_hardware(fp: Mapping[str, Any]) -> tuple[Hardware | None, str]:
    """The catalog hardware a run report's fingerprint names (GPUs matched by the whole name
    nvidia-smi or amd-smi prints), else None and why it cannot be physically checked."""
    return roofline_hardware(fingerprint_gpus(fp), "fingerprint")


def roofline_hardware(spec: tuple[str, int] | None, whose: str) -> tuple[Hardware | None, str]:
    """The catalog hardware of (GPU model, count), else None and why not (``whose`` names the source).
    A fingerprint's GPU must be a name a driver tool prints for a catalog card, whole
    (:func:`~lair.fit.find_device_by_gpu_name`): a made-up, partial or hand-written name is never read
    as some known card; the recipe's own GPU may be written loosely."""
    if spec is None:
        return None, f"no roofline: the {whose} names no GPU"
    if not 1 <= spec[1] <= MAX_GPUS:
        return None, f"no roofline: the {whose} counts {spec[1]} GPUs (1 to {MAX_GPUS})"
    if whose == "fingerprint":
        dev = find_device_by_gpu_name(spec[0])
        if dev is None:
            return None, f"no roofline: no catalog GPU is called {spec[0][:100]!r} by nvidia-smi or amd-smi"
        return Hardware(dev, gpus=spec[1]), ""
    try:
        return Hardware(find_device(spec[0]), gpus=spec[1]), ""
    except FitError as exc:
        return None, f"no roofline: {exc.message}"


def _declared(recipe: Recipe) -> tuple[str, int] | None:
    hw = recipe.meta.hardware
    return (hw.gpu_model, hw.gpu_count or 1) if hw and hw.gpu_model else None


def rated_rows(
    recipe: Recipe, rows: list[dict[str, Any]], rigs: Mapping[str, tuple[str, int] | None] | None = None
) -> tuple[list[dict[str, Any]], str]:
    """Each measurement as % of its roofline, and the reason shared by every row when there is none
    (the model's facts unknown). A reported row is rated on the recipe's declared GPUs with the
    recipe's facts and placement (:func:`known_facts`, :func:`page_layout`: the author's word, as
    the row is); a verified or replicated row on the GPUs its report's fingerprint names (``rigs``:
    report id -> GPU model and count) with the facts and launch fields it was checked against
    (:func:`table_facts`). Each rating says its ``basis`` (recipe or fingerprint) and ``gpus``, or
    why it is ``missing``."""
    shown, checked = known_facts(recipe), table_facts(recipe)
    if shown[0] is None:
        return [{"missing": shown[1]} for _ in rows], shown[1]
    declared = _declared(recipe)
    layouts = {"recipe": page_layout(recipe), "fingerprint": layout_from_recipe(recipe)}
    out = []
    for r in rows:
        is_checked = r["provenance"] != "reported" and r.get("report_id")
        basis = "fingerprint" if is_checked else "recipe"
        facts, why = checked if is_checked else shown
        hw, missing = roofline_hardware((rigs or {}).get(r["report_id"]) if is_checked else declared, basis)
        rating: dict[str, Any] = {"basis": basis, "missing": missing if facts is not None else why}
        if hw is not None and facts is not None:
            rating["gpus"] = f"{hw.gpus}x {hw.device.name}"
            m = Measured(r["context"], r["concurrency"] or 1, r["prefill_tok_s"], r["decode_tok_s"])
            rating |= rate_row(facts, hw, layouts[basis], m).as_dict()
        out.append(rating)
    return out, ""
