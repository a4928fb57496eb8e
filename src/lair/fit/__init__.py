"""Fit check and roofline: will a model fit a rig, and how fast can it possibly go?

    catalog       hardware figures (memory, bandwidth, peaks, links), each with its source
    model_facts   parameters, shapes, attention and MoE facts (the model and the config arithmetic)
    model_files   those facts read offline from a model folder, a GGUF or an HF cache entry
    bundled_models  those facts for the models people run, bundled (models.toml), by name or alias
    kv            KV-cache bytes per token by attention type and cache dtype, split over GPUs
    fit           memory per GPU -> KV pool, max context, max concurrency, verdict
    roofline      decode and prefill ceilings
    rating        a measured row as % of its ceiling, flagged implausible above 100%
    recipe_layout a recipe's placement (TP/PP, memory fraction, KV dtype, limits)

Nothing here imports heavy packages at import time (GGUF reading imports ``gguf`` when used).
"""

from lair.fit.catalog import (
    Device,
    device_ids,
    find_device,
    find_device_by_gpu_name,
    find_device_by_smi_name,
    load_catalog,
)
from lair.fit.fit import FitResult, Hardware, Layout, Runtime, fit, runtime_overhead_bytes
from lair.fit.kv import KvLayout, kv_layer_bytes
from lair.fit.model_facts import ModelFacts, facts_from_config
from lair.fit.model_files import find_in_hf_cache, read_model_facts, resolve_model_path
from lair.fit.rating import Measured, RowRating, rate_row
from lair.fit.recipe_layout import layout_from_recipe
from lair.fit.roofline import DecodeBound, PrefillBound, decode_bound, matmul_params, prefill_bound

__all__ = [
    "DecodeBound",
    "Device",
    "FitResult",
    "Hardware",
    "KvLayout",
    "Layout",
    "Measured",
    "ModelFacts",
    "PrefillBound",
    "RowRating",
    "Runtime",
    "decode_bound",
    "device_ids",
    "facts_from_config",
    "find_device",
    "find_device_by_gpu_name",
    "find_device_by_smi_name",
    "find_in_hf_cache",
    "fit",
    "kv_layer_bytes",
    "layout_from_recipe",
    "load_catalog",
    "matmul_params",
    "prefill_bound",
    "rate_row",
    "read_model_facts",
    "resolve_model_path",
    "runtime_overhead_bytes",
]
