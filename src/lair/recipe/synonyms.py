"""Unknown recipe keys by meaning: the words people write for a key lair spells otherwise.

``lair check`` hints the nearest real key of an unknown one. Spelling alone (difflib) sends ``gpu``
under ``[meta.hardware]`` to ``cpu``; this table is checked first, and names the key that *means*
the same thing (``gpu_model``). Each word maps to candidates in order; the first one that exists in
the table being checked wins, so one word serves several tables (``gpu`` is ``gpu_model`` in
``[meta.hardware]`` and ``gpus`` at the top level). Keys are compared lower-cased, ``-`` as ``_``.
"""

from __future__ import annotations

__all__ = ["SYNONYMS", "by_meaning"]

SYNONYMS: dict[str, tuple[str, ...]] = {
    # hardware
    "gpu": ("gpu_model", "gpus"),
    "gpu_type": ("gpu_model",),
    "gpu_name": ("gpu_model",),
    "gpu_models": ("gpu_model",),
    "num_gpus": ("gpu_count", "gpus"),
    "n_gpus": ("gpu_count", "gpus"),
    "gpu_num": ("gpu_count", "gpus"),
    "gpus_per_node": ("gpu_count", "gpus"),
    "vram": ("vram_gb",),
    "gpu_memory": ("vram_gb", "gpu_memory_utilization"),
    "ram": ("host_ram_gb", "ram_gb"),
    "memory": ("host_ram_gb", "ram_gb", "memory_limit"),
    "disk": ("disk_gb",),
    "storage": ("disk_gb",),
    "network": ("interconnect",),
    # launch
    "image": ("docker_image", "image"),
    "container_image": ("docker_image",),
    "container": ("docker_image", "container"),
    "tp": ("tensor_parallel_size",),
    "tensor_parallel": ("tensor_parallel_size",),
    "pp": ("pipeline_parallel_size",),
    "pipeline_parallel": ("pipeline_parallel_size",),
    "dp": ("data_parallel_size",),
    "data_parallel": ("data_parallel_size",),
    "nodes": ("required_nodes",),
    "num_nodes": ("required_nodes",),
    "context": ("max_model_len", "max_context", "context"),
    "context_length": ("max_model_len", "max_context"),
    "max_context_length": ("max_model_len", "max_context"),
    "ctx": ("max_model_len", "max_context", "context"),
    "model_path": ("model",),
    "weights": ("model", "upstream_weights"),
    "command": ("entrypoint", "launch_command", "run"),
    "cmd": ("entrypoint", "launch_command", "run"),
    "flags": ("args", "flags"),
    "arguments": ("args",),
    "extra_args": ("args",),
    "environment": ("env",),
    "env_vars": ("env",),
    "mounts": ("extra_mounts",),
    "volumes": ("extra_mounts",),
    "timeout": ("ready_timeout_s", "timeout_s"),
    "health": ("health_path",),
    "healthcheck": ("health_path",),
    "shm": ("shm_size",),
    # publication metadata
    "description": ("summary", "description"),
    "author": ("listed_by", "who"),
    "quant": ("quantization",),
    "repo": ("model_repo",),
    "hf_repo": ("model_repo",),
}


def by_meaning(word: str, choices: list[str]) -> str | None:
    """The key among ``choices`` that ``word`` means, from :data:`SYNONYMS`; None when it has none."""
    return next((c for c in SYNONYMS.get(word.lower().replace("-", "_"), ()) if c in choices), None)
