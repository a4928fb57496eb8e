"""Read a recipe's placement (parallelism, memory fraction, KV format, limits) without importing the
recipe package: any object with the recipe's attribute names works (``lair.recipe.Recipe`` does).

Each value comes from the recipe's field when set, else from the engine arguments
(``--gpu-memory-utilization 0.92``, ``--kv-cache-dtype=fp8``, ``--max-model-len``, ``-tp 2`` ...), else
from an environment variable whose name ends in the knob's name (``DS41_GPU_MEMORY_UTILIZATION``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lair.fit.catalog import GIB
from lair.fit.fit import Layout

__all__ = [
    "BUNDLED_FIT_DIR",
    "arg_value",
    "bundled_layout",
    "layout_from_recipe",
    "recipe_model_path",
    "recipe_repo_ids",
]

BUNDLED_FIT_DIR = "fit"
"""A folder beside a recipe with what ``lair fit`` cannot read from the recipe itself:
``config.json`` (the model's config, for model facts without the weights) and ``layout.toml``
(placement its scripts set: KV dtype, memory fraction, expert offload...; :class:`Layout` field names)."""

_ARGS = {
    "tp": ("--tensor-parallel-size", "-tp", "--tp-size", "--tp"),
    "pp": ("--pipeline-parallel-size", "-pp", "--pp-size"),
    "dp": ("--data-parallel-size", "-dp", "--dp-size"),
    "dcp": ("--decode-context-parallel-size", "-dcp"),
    "util": ("--gpu-memory-utilization", "--mem-fraction-static"),
    "kv": ("--kv-cache-dtype", "--cache-type-k", "-ctk"),
    "len": ("--max-model-len", "--context-length", "--ctx-size", "-c"),
    "offload": ("--cpu-offload-gb",),
    "spec": ("--num-speculative-tokens",),
}
_ENV = {
    "tp": "TENSOR_PARALLEL_SIZE",
    "pp": "PIPELINE_PARALLEL_SIZE",
    "dp": "DATA_PARALLEL_SIZE",
    "util": "GPU_MEMORY_UTILIZATION",
    "kv": "KV_CACHE_DTYPE",
    "len": "MAX_MODEL_LEN",
    "spec": "NUM_SPECULATIVE_TOKENS",
}


def arg_value(args: Sequence[str], names: Sequence[str]) -> str | None:
    """The value of the last of ``names`` in an argv (``--flag V`` or ``--flag=V``)."""
    found = None
    for i, a in enumerate(args):
        flag, eq, val = a.partition("=")
        if flag in names:
            found = val if eq else (args[i + 1] if i + 1 < len(args) else None)
    return found


def _env_value(env: dict[str, str], suffix: str) -> str | None:
    hits = [v for k, v in env.items() if k.upper().endswith(suffix)]
    return hits[-1] if hits else None


def _num(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:  # a placeholder such as "{ctx}"
        return None


def _lookup(recipe: Any, key: str, field: str | None) -> str | None:
    value = getattr(recipe, field, None) if field else None
    if value not in (None, "", 1) or (value == 1 and key not in ("tp", "pp", "dp")):
        return str(value)
    argv = [*(getattr(recipe, "entrypoint", None) or []), *(getattr(recipe, "args", None) or [])]
    got = arg_value(argv, _ARGS[key])
    if got is None and key in _ENV:
        got = _env_value(dict(getattr(recipe, "env", None) or {}), _ENV[key])
    return got if got is not None else (str(value) if value is not None else None)


def _spec_tokens(recipe: Any) -> int:
    argv = [*(getattr(recipe, "entrypoint", None) or []), *(getattr(recipe, "args", None) or [])]
    cfg = arg_value(argv, ("--speculative-config", "--speculative_config"))
    if cfg:
        try:
            return int(json.loads(cfg).get("num_speculative_tokens") or 0)
        except (ValueError, AttributeError):
            return 0
    return int(_num(_lookup(recipe, "spec", None)) or 0)


def layout_from_recipe(recipe: Any) -> Layout:
    """The :class:`Layout` a recipe asks for."""
    util = _num(_lookup(recipe, "util", "gpu_memory_utilization"))
    length = _num(_lookup(recipe, "len", "max_model_len"))
    kv = _lookup(recipe, "kv", "kv_cache_dtype")
    return Layout(
        tp=int(_num(_lookup(recipe, "tp", "tensor_parallel_size")) or 1),
        pp=int(_num(_lookup(recipe, "pp", "pipeline_parallel_size")) or 1),
        dp=int(_num(_lookup(recipe, "dp", "data_parallel_size")) or 1),
        dcp=int(_num(_lookup(recipe, "dcp", None)) or 1),
        gpu_memory_utilization=util if util else 0.9,
        kv_cache_dtype=kv if kv and "{" not in kv else None,
        max_model_len=int(length) if length else None,
        cpu_offload_bytes=int((_num(_lookup(recipe, "offload", None)) or 0) * GIB),
        spec_tokens=_spec_tokens(recipe),
    )


def recipe_repo_ids(recipe: Any) -> list[str]:
    """Hugging Face repo ids a recipe names: its ``model``, then ``meta.model_repo`` (the weights
    served), then ``meta.upstream_weights``."""
    meta = getattr(recipe, "meta", None)
    names = [recipe.model, getattr(meta, "model_repo", None), getattr(meta, "upstream_weights", None)]
    return [str(n) for n in names if n and str(n).count("/") == 1 and "{" not in str(n)]


def recipe_model_path(recipe: Any, recipe_dir: Path | None = None) -> str | None:
    """Where the recipe's model facts are, in this order: its ``model`` as a local path
    (placeholders filled from their defaults); a repo id it names (:func:`recipe_repo_ids`) in the local
    Hugging Face cache; the ``fit/`` folder bundled beside it (``recipe_dir``). None otherwise."""
    from lair.fit.model_files import find_in_hf_cache

    text = str(recipe.model or "")
    for name, ph in (recipe.placeholders or {}).items():
        if ph.default is not None:
            text = text.replace("{" + name + "}", str(ph.default))
    if text and "{" not in text and Path(text).exists():
        return text
    for repo in recipe_repo_ids(recipe):
        if cached := find_in_hf_cache(repo):
            return str(cached)
    bundled = recipe_dir / BUNDLED_FIT_DIR if recipe_dir else None
    return str(bundled) if bundled and (bundled / "config.json").is_file() else None


def bundled_layout(recipe_dir: Path | None) -> dict[str, Any]:
    """The ``fit/layout.toml`` beside a recipe as :class:`Layout` fields (sizes become bytes:
    ``cpu_offload_gb`` in GiB as vLLM's flag, ``ssd_tables_gb`` in GB); empty when there is none."""
    import tomllib
    from dataclasses import fields

    from lair.errors import FitError

    path = recipe_dir / BUNDLED_FIT_DIR / "layout.toml" if recipe_dir else None
    if path is None or not path.is_file():
        return {}
    doc = tomllib.loads(path.read_text())
    out: dict[str, Any] = {}
    for key, gb_key, unit in (
        ("cpu_offload_bytes", "cpu_offload_gb", GIB),
        ("ssd_tables_bytes", "ssd_tables_gb", 1e9),
    ):
        if gb_key in doc:
            out[key] = int(float(doc.pop(gb_key)) * unit)
    known = {f.name for f in fields(Layout)}
    unknown = sorted(set(doc) - known)
    if unknown:
        raise FitError(
            f"{path}: unknown keys {', '.join(unknown)}", hint=f"known: {', '.join(sorted(known))}"
        )
    return {**doc, **out}
