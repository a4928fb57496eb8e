"""vLLM Recipes (vllm-project/recipes: one YAML per Hugging Face model, ``models/<org>/<repo>.yaml``)
to lair recipes and back.

A vLLM Recipes file describes many deployments: each ``variants`` entry (a checkpoint), each serving
strategy of ``compatible_strategies`` and each hardware override. The site builds the ``vllm serve``
command of one choice in ``src/lib/command-synthesis.js`` (``resolveCommand``); the import makes
one lair recipe per (variant, single-node strategy, hardware override or none) with the arguments
in that function's order:

    model.base_args, variant.extra_args, strategy vllm_args, the parallel flag and size,
    strategy_overrides.<s>.extra_args / vllm_args, hardware override extra_args (the strategy's
    override replaces the recipe's and the variant's), each default-on feature's args (a feature
    with modes: its default mode's; a feature's hardware override replaces its args).

The parallel size is the node's GPU count unless the variant (``tp``) or
``strategy_overrides.single_node_tp.tp`` names one; where it does not, the recipe keeps the
placeholder ``{GPUS}`` (exact: the site fills in the user's GPU count the same way). Multi-node
and prefill/decode strategies (their sizes are the cluster's) and opt-in features are listed as
unmapped, as is every field with no lair meaning (dates, difficulty, hardware support marks,
install steps).
"""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path
from typing import Any

import yaml

from lair.errors import InteropError
from lair.interop.conversion import Imported, Unmapped
from lair.recipe import Recipe

__all__ = ["SINGLE_NODE", "from_vllm_recipe", "to_vllm_recipe"]

SINGLE_NODE: dict[str, tuple[str, list[str], str]] = {
    "single_node_tp": ("Tensor Parallel", [], "--tensor-parallel-size"),
    "single_node_tep": ("Tensor + Expert Parallel", ["--enable-expert-parallel"], "--tensor-parallel-size"),
    "single_node_dep": ("Data + Expert Parallel", ["--enable-expert-parallel"], "--data-parallel-size"),
}
"""The single-node strategies of vllm-project/recipes ``strategies/*.yaml``: display name,
``vllm_args``, ``parallel_flag``."""
DEFAULT_IMAGE = "vllm/vllm-openai:latest"
"""The site's image for an NVIDIA GPU when the recipe pins none (``computeDockerMeta``)."""
AMD_IMAGE = "vllm/vllm-openai-rocm:latest"
AMD_KEYS = ("amd", "mi300x", "mi325x", "mi350x", "mi355x", "cdna3", "cdna4")
GPUS = "GPUS"
META_UNMAPPED: tuple[str, ...] = ("provider", "date_added", "date_updated", "difficulty")
META_UNMAPPED += ("performance_headline", "related_recipes", "hardware")
MODEL_UNMAPPED = ("architecture", "parameter_count", "active_parameters", "nightly_required", "install")


def from_vllm_recipe(data: dict[str, Any], source: str, sha256: str) -> list[Imported]:
    """One lair recipe per variant x single-node strategy x (no hardware override, each override)."""
    model = _section(data, "model", source)
    if not isinstance(model.get("model_id"), str):
        raise InteropError(source, "model.model_id", "missing: the Hugging Face id of the model")
    variants = _section(data, "variants", source) or {"default": {}}
    lost = _file_unmapped(data)
    out = []
    for vkey, variant in variants.items():
        if not isinstance(variant, dict):
            raise InteropError(source, f"variants.{vkey}", "a mapping")
        for skey in _strategies(data):
            for hw in [None, *_hardware_keys(data, variant, skey)]:
                out.append(_one(data, str(vkey), variant, skey, hw, source, sha256, lost))
    return out


def _section(data: dict[str, Any], key: str, source: str) -> dict[str, Any]:
    value = data.get(key) or {}
    if not isinstance(value, dict):
        raise InteropError(source, key, f"a mapping, not {type(value).__name__}")
    return value


def _strategies(data: dict[str, Any]) -> list[str]:
    listed = data.get("compatible_strategies") or ["single_node_tp"]
    return [s for s in listed if s in SINGLE_NODE]


def _hardware_keys(data: dict[str, Any], variant: dict[str, Any], skey: str) -> list[str]:
    keys: dict[str, None] = {}
    so = (data.get("strategy_overrides") or {}).get(skey) or {}
    for block in (
        data.get("hardware_overrides"),
        variant.get("hardware_overrides"),
        so.get("hardware_overrides"),
    ):
        keys.update(dict.fromkeys(block or {}))
    return list(keys)


def _file_unmapped(data: dict[str, Any]) -> list[Unmapped]:
    """The fields of the file no lair recipe made from it carries."""
    meta, model = data.get("meta") or {}, data.get("model") or {}
    lost = [Unmapped(f"meta.{k}", meta[k], "no lair field") for k in META_UNMAPPED if k in meta]
    lost += [Unmapped(f"model.{k}", model[k], "no lair field") for k in MODEL_UNMAPPED if k in model]
    for i, dep in enumerate(data.get("dependencies") or []):
        lost.append(Unmapped(f"dependencies[{i}]", dep, "an install step: lair runs an image"))
    for name in data.get("opt_in_features") or []:
        feature = (data.get("features") or {}).get(name, {})
        lost.append(Unmapped(f"features.{name}", feature.get("args", feature), "opt-in: not enabled"))
    for s in data.get("compatible_strategies") or []:
        if s not in SINGLE_NODE:
            lost.append(
                Unmapped(f"compatible_strategies.{s}", s, "sized by the cluster: no fixed lair layout")
            )
    known = {"meta", "model", "dependencies", "features", "opt_in_features", "variants", "guide"}
    known |= {"compatible_strategies", "hardware_overrides", "strategy_overrides"}
    lost += [Unmapped(k, v, "no lair meaning") for k, v in data.items() if k not in known]
    return lost


def _keyed(value: Any, hw: str | None) -> Any:
    """A hardware-keyed value (``tp: {h200: 2, default: 4}``) for ``hw``."""
    if isinstance(value, dict):
        return value.get(hw) if hw in value else value.get("default")
    return value


def _tp(data: dict[str, Any], variant: dict[str, Any], skey: str, hw: str | None) -> int | None:
    if skey != "single_node_tp":
        return None
    for raw in (variant.get("tp"), ((data.get("strategy_overrides") or {}).get(skey) or {}).get("tp")):
        tp = _keyed(raw, hw)
        if isinstance(tp, int) and tp > 0:
            return tp
    return None


def _args(data: dict[str, Any], vkey: str, variant: dict[str, Any], skey: str, hw: str | None) -> list[str]:
    model = data.get("model") or {}
    so = (data.get("strategy_overrides") or {}).get(skey) or {}
    _, strategy_args, flag = SINGLE_NODE[skey]
    tp = _tp(data, variant, skey, hw)
    args = [*model.get("base_args", []), *variant.get("extra_args", [])]
    args += [*((variant.get("hardware_overrides") or {}).get(hw) or {}).get("extra_args", [])] if hw else []
    args += [*strategy_args, flag, str(tp) if tp else "{" + GPUS + "}"]
    args += [*so.get("extra_args", []), *so.get("vllm_args", [])]
    if hw:
        strategy_ho = (so.get("hardware_overrides") or {}).get(hw)
        blocks = [strategy_ho] if strategy_ho else [(data.get("hardware_overrides") or {}).get(hw)]
        args += [a for b in blocks if b for a in b.get("extra_args", [])]
    return args + _feature_args(data, skey, hw)


def _feature_args(data: dict[str, Any], skey: str, hw: str | None) -> list[str]:
    opt_in = set(data.get("opt_in_features") or [])
    args: list[str] = []
    for name, feature in (data.get("features") or {}).items():
        allowed = feature.get("strategies")
        if name in opt_in or (allowed and skey not in allowed):
            continue
        if isinstance(feature.get("modes"), dict):
            mode = feature["modes"].get(feature.get("default_mode") or next(iter(feature["modes"]), ""), {})
            args += (_keyed(mode.get("hardware_overrides"), hw) or {}).get("args", mode.get("args", []))
            continue
        ho = (feature.get("hardware_overrides") or {}).get(hw) if hw else None
        args += (ho or {}).get("args", feature.get("args", []))
    return [str(a) for a in args]


def _image(data: dict[str, Any], variant: dict[str, Any], hw: str | None) -> str:
    for block in (
        ((variant.get("hardware_overrides") or {}).get(hw) or {}) if hw else {},
        data.get("model") or {},
    ):
        image = block.get("docker_image")
        if isinstance(image, str):
            return image
        if isinstance(image, dict) and image:
            return str(image.get("cu129") or next(iter(image.values())))
    return AMD_IMAGE if hw in AMD_KEYS else DEFAULT_IMAGE


def _one(
    data: dict[str, Any],
    vkey: str,
    variant: dict[str, Any],
    skey: str,
    hw: str | None,
    source: str,
    sha256: str,
    lost: list[Unmapped],
) -> Imported:
    meta, model = data.get("meta") or {}, data.get("model") or {}
    args = _args(data, vkey, variant, skey, hw)
    tp = _tp(data, variant, skey, hw)
    if tp:
        flag = args.index("--tensor-parallel-size")
        del args[flag : flag + 2]
    title = str(meta.get("title") or model["model_id"])
    parts = [vkey, SINGLE_NODE[skey][0], *([hw] if hw else [])]
    slug_base = str(meta.get("slug") or Path(source).stem)
    slug = re.sub(r"[^a-z0-9]+", "-", "-".join([slug_base, vkey, skey, *([hw] if hw else [])]).lower()).strip(
        "-"
    )
    recipe: dict[str, Any] = {
        "engine": "vllm",
        "docker_image": _image(data, variant, hw),
        "model": str(variant.get("model_id") or model["model_id"]),
        "name": f"{title} ({', '.join(parts)})",
        "args": args,
    }
    if tp:
        recipe["tensor_parallel_size"] = tp
    env = {
        **(model.get("base_env") or {}),
        **((data.get("hardware_overrides") or {}).get(hw) or {}).get("env", {}),
    }
    if env:
        recipe["env"] = {str(k): str(v) for k, v in env.items()}
    if any("{" + GPUS + "}" in a for a in args):
        recipe["placeholders"] = {
            GPUS: {
                "type": "int",
                "description": "parallel size: the node's GPUs (the site: 1 if vram_minimum_gb fits one)",
            }
        }
    recipe["meta"] = _meta(data, variant, slug)
    own = [
        Unmapped(f"variants.{vkey}.{k}", variant[k], "no lair field")
        for k in ("vram_minimum_gb",)
        if k in variant
    ]
    return Imported(slug, recipe, source, "vllm-recipes", sha256, [*lost, *own])


def _meta(data: dict[str, Any], variant: dict[str, Any], slug: str) -> dict[str, Any]:
    meta, model = data.get("meta") or {}, data.get("model") or {}
    out: dict[str, Any] = {"slug": slug, "upstream_weights": model["model_id"]}
    if meta.get("title"):
        out["title"] = str(meta["title"])
    summary = " ".join(str(x) for x in (meta.get("description"), variant.get("description")) if x)
    if summary:
        out["summary"] = summary
    if meta.get("tasks"):
        out["tags"] = [str(t) for t in meta["tasks"]]
    if variant.get("model_id"):
        out["model_repo"] = str(variant["model_id"])
    if variant.get("precision"):
        out["quantization"] = str(variant["precision"])
    if isinstance(model.get("context_length"), int):
        out["max_context"] = model["context_length"]
    if model.get("min_vllm_version"):
        out["engine"] = {"name": "vllm", "version": str(model["min_vllm_version"])}
    if data.get("guide"):
        out["notes"] = str(data["guide"])
    return out


# ---------------------------------------------------------------------------------------------
# lair -> vLLM Recipes


def to_vllm_recipe(recipe: Recipe, today: date | None = None) -> tuple[str, list[Unmapped]]:
    """(the vLLM Recipes YAML of ``recipe``: one default variant, single- or multi-node TP, the lair
    fields it cannot say)."""
    lost = _export_lost(recipe)
    when = (today or date.today()).isoformat()
    title = recipe.meta.title or recipe.name or recipe.model
    model: dict[str, Any] = {"model_id": recipe.meta.upstream_weights or recipe.model}
    if recipe.meta.engine and recipe.meta.engine.version:
        model["min_vllm_version"] = recipe.meta.engine.version
    if recipe.meta.max_context:
        model["context_length"] = recipe.meta.max_context
    model["base_args"] = _export_args(recipe)
    model["base_env"] = dict(recipe.env)
    if recipe.docker_image:
        model["docker_image"] = recipe.docker_image
    variant: dict[str, Any] = {"precision": recipe.meta.quantization or "bf16"}
    if recipe.model != model["model_id"]:
        variant["model_id"] = recipe.model
    if recipe.required_nodes == 1:  # the site sizes TP by the GPU count unless the variant says
        variant["tp"] = recipe.tensor_parallel_size
    strategy = "multi_node_tp" if recipe.required_nodes > 1 else "single_node_tp"
    d = {
        "meta": {
            "title": title,
            "slug": recipe.meta.slug or re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-"),
            "provider": model["model_id"].split("/")[0] if "/" in model["model_id"] else "",
            "description": recipe.meta.summary or "",
            "date_added": when,
            "date_updated": when,
            "tasks": list(recipe.meta.tags) or ["text"],
            "hardware": {},
        },
        "model": model,
        "variants": {"default": variant},
        "compatible_strategies": [strategy],
        "hardware_overrides": {},
        "strategy_overrides": {},
    }
    if recipe.meta.notes:
        d["guide"] = recipe.meta.notes
    return yaml.safe_dump(d, sort_keys=False, allow_unicode=True, width=100), lost


def _export_args(recipe: Recipe) -> list[str]:
    """The recipe's args without the parallel flag the strategy writes."""
    args, out, skip = list(recipe.args), [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("--tensor-parallel-size", "-tp"):
            skip = True
            continue
        out.append(a)
    for flag, value in (
        ("--served-model-name", recipe.served_model_name),
        ("--gpu-memory-utilization", recipe.gpu_memory_utilization),
        ("--max-model-len", recipe.max_model_len),
        ("--kv-cache-dtype", recipe.kv_cache_dtype),
    ):
        if value is not None and flag not in out:
            out += [flag, str(value)]
    return out


_EXPORTED = {"schema_version", "engine", "docker_image", "model", "name", "args", "env", "meta"}
_EXPORTED |= {"tensor_parallel_size", "required_nodes", "served_model_name", "gpu_memory_utilization"}
_EXPORTED |= {"max_model_len", "kv_cache_dtype", "distributed_backend", "placeholders"}
_META_EXPORTED = {"title", "slug", "summary", "tags", "upstream_weights", "model_repo", "quantization"}
_META_EXPORTED |= {"max_context", "engine", "notes"}


def _export_lost(recipe: Recipe) -> list[Unmapped]:
    data = recipe.model_dump(mode="json", exclude_unset=True, exclude_none=True)
    lost = [Unmapped(k, v, "no vLLM Recipes field") for k, v in data.items() if k not in _EXPORTED]
    lost += [
        Unmapped(f"meta.{k}", v, "no vLLM Recipes field")
        for k, v in (data.get("meta") or {}).items()
        if k not in _META_EXPORTED
    ]
    if recipe.engine != "vllm":
        lost.append(Unmapped("engine", recipe.engine, "vLLM Recipes serve with vllm only"))
    if recipe.required_nodes > 1:
        lost.append(
            Unmapped("tensor_parallel_size", recipe.tensor_parallel_size, "multi_node_tp uses all GPUs")
        )
    return lost
