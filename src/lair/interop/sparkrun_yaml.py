"""sparkrun recipes (YAML, ``recipe_version: "2"``; sparkrun 0.4.2's ``sparkrun.core.recipe``) to
lair recipes and back.

    sparkrun                               lair
    file stem                              meta.slug (sparkrun rejects a name: key)
    description / metadata.description     name
    model                                  model
    runtime vllm | vllm-distributed        engine vllm (distributed_backend mp on 2+ nodes)
    runtime vllm-ray                       engine vllm, distributed_backend ray
    runtime sglang / llama-cpp / trtllm    engine sglang / llamacpp / trtllm
    runtime_version                        meta.engine.version
    container                              docker_image
    executor local                         runtime native
    min_nodes (mode, solo_only, ...)       required_nodes
    defaults.tensor_parallel ...           tensor_parallel_size, pipeline_parallel_size, data_parallel_size,
                                           served_model_name, gpu_memory_utilization, max_model_len,
                                           kv_cache_dtype, port, host
    other defaults (no command)            engine flags --key-with-hyphens VALUE in args (vllm, sglang)
    command                                entrypoint (its {key} templates filled from defaults and
                                           model; any other {key} becomes a lair placeholder)
    pre_exec (in the container, before     entrypoint ["sh", "-c", "set -e; pre...; exec command \\"$@\\"",
      the serve command)                   "sh"]: the same commands in the same container, in order
    env                                    env
    executor_config.shm_size, memory_limit, devices, volumes, privileged, cap_add, ipc, gpus, ulimit
                                           the lair keys of the same names (volumes -> extra_mounts)
    executor_config.entrypoint ""          (lair always sets the container's entrypoint)
    metadata.maintainer                    meta.credits (role maintainer)
    metadata.quantization                  meta.quantization

Everything else (post_exec, post_commands, mods, builder, benchmark, overrides, readiness, ...) is
listed as unmapped. The reverse writes the mapped fields back and lists each lair field sparkrun
has no key for (``after_stop``, host-side ``before_serve`` hooks, ``cpus``, ``meta`` beyond the
description, ...).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from lair.errors import InteropError
from lair.interop.conversion import Imported, Unmapped
from lair.recipe import Recipe

__all__ = ["from_sparkrun", "to_sparkrun"]

RUNTIMES: dict[str, tuple[str, str | None]] = {
    "vllm": ("vllm", None),
    "vllm-distributed": ("vllm", "mp"),
    "vllm-ray": ("vllm", "ray"),
    "sglang": ("sglang", None),
    "llama-cpp": ("llamacpp", None),
    "trtllm": ("trtllm", None),
}
"""sparkrun runtime -> (lair engine, distributed backend on 2+ nodes)."""
DEFAULTS = {
    "tensor_parallel": "tensor_parallel_size",
    "pipeline_parallel": "pipeline_parallel_size",
    "data_parallel": "data_parallel_size",
    "served_model_name": "served_model_name",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "max_model_len": "max_model_len",
    "kv_cache_dtype": "kv_cache_dtype",
    "port": "port",
    "host": "host",
}
"""sparkrun ``defaults`` keys with a lair field of the same meaning."""
EXECUTOR = ("shm_size", "memory_limit", "devices", "privileged", "cap_add", "ipc", "gpus")
"""``executor_config`` keys with a lair key of the same name and meaning."""
CONSUMED = {"recipe_version", "mode", "min_nodes", "max_nodes", "solo_only", "cluster_only"}
CONSUMED |= {"description", "model", "runtime", "runtime_version", "container", "defaults", "env"}
CONSUMED |= {"command", "pre_exec", "executor", "executor_config", "metadata"}
TEMPLATE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
WRAP_HEAD = "set -e\n"
WRAP_TAIL = ' "$@"'
FLAG_ENGINES = ("vllm", "sglang")
"""Engines whose serve flags are ``--`` + the argument name with hyphens (argparse)."""


def from_sparkrun(data: dict[str, Any], source: str, sha256: str) -> Imported:
    """The lair recipe of one sparkrun recipe (``source``: its path; the name is the file stem)."""
    stem = Path(source).stem
    out: dict[str, Any] = {}
    lost: list[Unmapped] = []
    _identity(data, out, lost, source)
    defaults = _mapping(data, "defaults", source)
    values = {k: v for k, v in defaults.items() if isinstance(k, str)}
    values.setdefault("model", data.get("model", ""))
    values.setdefault("resolved_model_path", data.get("model", ""))
    for key, field in DEFAULTS.items():
        if key in defaults:
            out[field] = _typed(field, defaults[key], f"defaults.{key}", source)
    _command(data, out, lost, values, source)
    _executor(_mapping(data, "executor_config", source), out, lost, source)
    if data.get("env"):
        out["env"] = {str(k): str(v) for k, v in _mapping(data, "env", source).items()}
    _metadata(_mapping(data, "metadata", source), out, lost)
    lost += _unused_defaults(data, defaults, out["engine"])
    for key, value in data.items():
        if key not in CONSUMED:
            lost.append(Unmapped(str(key), value, "no lair meaning"))
    slug = re.sub(r"[^a-z0-9]+", "-", stem.lower()).strip("-")
    out.setdefault("meta", {})["slug"] = slug or "imported"
    return Imported(stem, out, source, "sparkrun", sha256, lost)


def _unused_defaults(data: dict[str, Any], defaults: dict[str, Any], engine: str) -> list[Unmapped]:
    """defaults keys with no lair field that neither the command uses nor become engine flags."""
    if not data.get("command") and engine in FLAG_ENGINES:
        return []  # each became a serve flag (:func:`_flags`)
    used = set(TEMPLATE.findall(str(data.get("command") or "")))
    return [
        Unmapped(f"defaults.{k}", v, "not used by the command, no lair field")
        for k, v in defaults.items()
        if k not in DEFAULTS and k not in used
    ]


def _mapping(data: dict[str, Any], key: str, source: str) -> dict[str, Any]:
    value = data.get(key) or {}
    if not isinstance(value, dict):
        raise InteropError(source, key, f"a mapping, not {type(value).__name__}")
    return value


def _typed(field: str, value: Any, where: str, source: str) -> Any:
    """A defaults value as the lair field's type (sparkrun's chain stores YAML scalars)."""
    try:
        if field in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "port"):
            return int(value)
        if field == "max_model_len":
            return int(value)
        if field == "gpu_memory_utilization":
            return float(value)
        return str(value)
    except (TypeError, ValueError) as exc:
        raise InteropError(source, where, f"{value!r} is not a {field}") from exc


def _identity(data: dict[str, Any], out: dict[str, Any], lost: list[Unmapped], source: str) -> None:
    runtime = str(data.get("runtime") or "vllm")
    nodes = _nodes(data)
    engine, backend = RUNTIMES.get(runtime, ("custom", None))
    if engine == "custom":
        lost.append(Unmapped("runtime", runtime, "no lair engine: imported as engine custom"))
    out["engine"] = engine
    if data.get("executor") == "local":
        out["runtime"] = "native"
    elif data.get("executor"):
        lost.append(Unmapped("executor", data["executor"], "lair runs docker, podman or native"))
    if data.get("container"):
        out["docker_image"] = str(data["container"])
    out["model"] = str(data.get("model") or "")
    description = data.get("description") or (data.get("metadata") or {}).get("description")
    if description:
        out["name"] = str(description)
    if nodes > 1:
        out["required_nodes"] = nodes
        out["distributed_backend"] = backend or "mp"
    elif backend == "ray":
        out["distributed_backend"] = "ray"
    max_nodes = data.get("max_nodes")
    if max_nodes is not None and int(max_nodes) != nodes:
        lost.append(Unmapped("max_nodes", max_nodes, f"lair runs on exactly required_nodes = {nodes}"))
    if data.get("runtime_version"):
        out.setdefault("meta", {})["engine"] = {"name": engine, "version": str(data["runtime_version"])}


def _nodes(data: dict[str, Any]) -> int:
    """sparkrun's own rule (``Recipe.__init__``): solo is one node, cluster_only at least two."""
    if data.get("mode") == "solo" or data.get("solo_only"):
        return 1
    nodes = int(data.get("min_nodes", 1))
    return max(nodes, 2) if data.get("cluster_only") else nodes


def _render(command: str, values: dict[str, Any], placeholders: dict[str, Any]) -> str:
    """``command`` with its ``{key}`` templates filled; a key the recipe does not give becomes a
    lair placeholder of the same name (sparkrun fills it from ``-o`` or the cluster's config)."""

    def one(m: re.Match[str]) -> str:
        key = m.group(1)
        if key in values:
            value = values[key]
            return json.dumps(value) if isinstance(value, dict | list) else str(value)
        placeholders[key] = {"description": "sparkrun took this from its config chain (-o, cluster)"}
        return m.group(0)

    return TEMPLATE.sub(one, command)


def _command(
    data: dict[str, Any], out: dict[str, Any], lost: list[Unmapped], values: dict[str, Any], source: str
) -> None:
    placeholders: dict[str, Any] = {}
    command = data.get("command")
    hooks = _listed(data.get("pre_exec")) if command else []
    pre = [p for p in (_hook(h, i, lost, source) for i, h in enumerate(hooks)) if p is not None]
    if command:
        text = _render(str(command).replace("\\\n", " "), values, placeholders)
        if pre:
            out["entrypoint"] = ["sh", "-c", WRAP_HEAD + "\n".join(pre) + "\nexec " + text + WRAP_TAIL, "sh"]
        else:
            out["entrypoint"] = shlex.split(text)
    else:
        if out["engine"] in FLAG_ENGINES:
            out["args"] = _flags({k: v for k, v in values.items() if k in _own(data)})
        if data.get("pre_exec"):
            lost.append(
                Unmapped("pre_exec", data["pre_exec"], "no command to wrap: sparkrun's own runs them")
            )
    if placeholders:
        out["placeholders"] = placeholders


def _own(data: dict[str, Any]) -> set[str]:
    return {k for k in (data.get("defaults") or {}) if k not in DEFAULTS}


def _flags(values: dict[str, Any]) -> list[str]:
    """The serve flags of ``defaults`` keys lair has no field for: ``--key-with-hyphens VALUE``
    (True: the bare flag, False: ``--no-`` form, a mapping: its JSON)."""
    argv: list[str] = []
    for key, value in values.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is False:
            argv.append("--no-" + flag[2:])
        elif value is not None:
            argv += [flag, json.dumps(value) if isinstance(value, dict | list) else str(value)]
    return argv


def _listed(value: Any) -> list[Any]:
    return [] if value is None else value if isinstance(value, list) else [value]


def _hook(entry: Any, i: int, lost: list[Unmapped], source: str) -> str | None:
    """A pre_exec entry's shell command (a string or ``{command, timeout}``); ``copy`` entries have
    no lair meaning."""
    if isinstance(entry, str):
        return entry
    if isinstance(entry, dict) and isinstance(entry.get("command"), str):
        if "timeout" in entry:
            lost.append(Unmapped(f"pre_exec[{i}].timeout", entry["timeout"], "no per-command timeout"))
        return str(entry["command"])
    if isinstance(entry, dict) and "copy" in entry:
        lost.append(Unmapped(f"pre_exec[{i}]", entry, "a file copy into the container: no lair meaning"))
        return None
    raise InteropError(source, f"pre_exec[{i}]", "a command string or {command, timeout}")


def _executor(cfg: dict[str, Any], out: dict[str, Any], lost: list[Unmapped], source: str) -> None:
    for key, value in cfg.items():
        if key in EXECUTOR:
            out[key] = [str(v) for v in _listed(value)] if key in ("devices", "cap_add") else value
            if key in ("shm_size", "memory_limit", "gpus", "ipc"):
                out[key] = str(value)
        elif key == "volumes":
            out["extra_mounts"] = [_mount(str(v), i, source) for i, v in enumerate(_listed(value))]
        elif key == "ulimit":
            out["ulimits"] = dict(_ulimit(str(v)) for v in _listed(value))
        elif key == "entrypoint" and value == "":
            continue  # lair always sets the container's entrypoint
        else:
            lost.append(Unmapped(f"executor_config.{key}", value, "no lair container key"))


def _mount(text: str, i: int, source: str) -> dict[str, Any]:
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise InteropError(source, f"executor_config.volumes[{i}]", f"{text!r} is not host:container[:ro]")
    mount: dict[str, Any] = {"host": parts[0], "container": parts[1]}
    if len(parts) == 3 and "ro" in parts[2].split(","):
        mount["read_only"] = True
    return mount


def _ulimit(text: str) -> tuple[str, str]:
    name, _, value = text.partition("=")
    return name, value


def _metadata(meta: dict[str, Any], out: dict[str, Any], lost: list[Unmapped]) -> None:
    for key, value in meta.items():
        if key == "description":
            continue  # read with the top-level description
        if key == "maintainer":
            out.setdefault("meta", {})["credits"] = [{"who": str(value), "role": "maintainer"}]
        elif key == "quantization":
            out.setdefault("meta", {})["quantization"] = str(value)
        else:
            lost.append(Unmapped(f"metadata.{key}", value, "no lair field"))


# ---------------------------------------------------------------------------------------------
# lair -> sparkrun


def to_sparkrun(recipe: Recipe) -> tuple[str, list[Unmapped]]:
    """(the sparkrun YAML of ``recipe``, the lair fields sparkrun has no key for)."""
    lost: list[Unmapped] = []
    d: dict[str, Any] = {"recipe_version": "2"}
    description = recipe.name or recipe.meta.title
    if description:
        d["description"] = description
    d["model"] = recipe.model
    d["runtime"] = _runtime(recipe, lost)
    if recipe.meta.engine and recipe.meta.engine.version:
        d["runtime_version"] = recipe.meta.engine.version
    if recipe.docker_image:
        d["container"] = recipe.docker_image
    if recipe.runtime == "native":
        d["executor"] = "local"
    if recipe.required_nodes > 1:
        d["min_nodes"] = d["max_nodes"] = recipe.required_nodes
    d["defaults"] = _defaults(recipe)
    _export_command(recipe, d)
    ec = _executor_config(recipe)
    if ec:
        d["executor_config"] = ec
    if recipe.env:
        d["env"] = dict(recipe.env)
    meta = _export_meta(recipe)
    if meta:
        d["metadata"] = meta
    lost += _not_exported(recipe)
    return yaml.safe_dump(d, sort_keys=False, allow_unicode=True, width=100), lost


def _runtime(recipe: Recipe, lost: list[Unmapped]) -> str:
    if recipe.engine == "vllm":
        return "vllm-ray" if recipe.distributed_backend == "ray" else "vllm-distributed"
    back = {engine: name for name, (engine, _) in RUNTIMES.items() if name != "vllm-ray"}
    if recipe.engine not in back:
        lost.append(Unmapped("engine", recipe.engine, "no sparkrun runtime: written as vllm"))
        return "vllm"
    return back[recipe.engine]


def _defaults(recipe: Recipe) -> dict[str, Any]:
    d: dict[str, Any] = {}
    for key, field in DEFAULTS.items():
        value = getattr(recipe, field)
        default = Recipe.model_fields[field].default
        explicit = field in recipe.model_fields_set or field == "tensor_parallel_size"
        if value is not None and (value != default or explicit):
            d[key] = value
    return d


def _export_command(recipe: Recipe, d: dict[str, Any]) -> None:
    argv = [*recipe.entrypoint, *recipe.args]
    if not recipe.entrypoint:
        flags = _unflags(recipe.args)
        if flags is not None:  # sparkrun builds the engine's command from defaults, as lair does
            d["defaults"].update(flags)
        elif recipe.args:
            d["command"] = shlex.join(["vllm", "serve", recipe.model or "{model}", *recipe.args])
        return
    script = _unwrap(recipe.entrypoint)
    if script is not None and not recipe.args:
        d["pre_exec"], d["command"] = script
    else:
        d["command"] = shlex.join(argv)


def _unflags(args: list[str]) -> dict[str, Any] | None:
    """The defaults :func:`_flags` made ``args`` from, or None when they are not all such flags."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(args):
        if not args[i].startswith("--"):
            return None
        key = args[i][2:].replace("-", "_")
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[key] = yaml.safe_load(args[i + 1])
            i += 2
            continue
        out[key[3:] if key.startswith("no_") else key] = not key.startswith("no_")
        i += 1
    return out


def _unwrap(entrypoint: list[str]) -> tuple[list[str], str] | None:
    """(pre_exec, command) of an entrypoint :func:`from_sparkrun` wrapped, else None."""
    if len(entrypoint) != 4 or entrypoint[:2] != ["sh", "-c"] or entrypoint[3] != "sh":
        return None
    script = entrypoint[2]
    lines = script.split("\n")
    if (
        not script.startswith(WRAP_HEAD)
        or not lines[-1].startswith("exec ")
        or not script.endswith(WRAP_TAIL)
    ):
        return None
    return lines[1:-1], lines[-1][len("exec ") : -len(WRAP_TAIL)]


def _executor_config(recipe: Recipe) -> dict[str, Any]:
    ec: dict[str, Any] = {}
    if recipe.entrypoint:
        ec["entrypoint"] = ""
    for key in EXECUTOR:
        value = getattr(recipe, key)
        if value not in (None, [], False):
            ec[key] = value
    if recipe.extra_mounts:
        ec["volumes"] = [
            f"{m.host}:{m.container}" + (":ro" if m.read_only else "") for m in recipe.extra_mounts
        ]
    if recipe.ulimits:
        ec["ulimit"] = [f"{k}={v}" for k, v in recipe.ulimits.items()]
    return ec


def _export_meta(recipe: Recipe) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    maintainers = [c.who for c in recipe.meta.credits if c.role == "maintainer"]
    if maintainers:
        meta["maintainer"] = maintainers[0]
    if recipe.meta.quantization:
        meta["quantization"] = recipe.meta.quantization
    return meta


_EXPORTED = {"schema_version", "engine", "runtime", "docker_image", "model", "name", "required_nodes"}
_EXPORTED |= {"distributed_backend", "entrypoint", "args", "env", "extra_mounts", "ulimits", "meta"}
_EXPORTED |= {*DEFAULTS.values(), *EXECUTOR}
_META_EXPORTED = {"title", "slug", "credits", "quantization", "engine"}


def _not_exported(recipe: Recipe) -> list[Unmapped]:
    """The lair fields the recipe sets that sparkrun has no key for."""
    data = recipe.model_dump(mode="json", exclude_unset=True, exclude_none=True)
    lost = [Unmapped(k, v, _why(k)) for k, v in data.items() if k not in _EXPORTED]
    lost += [
        Unmapped(f"meta.{k}", v, "no sparkrun key")
        for k, v in (data.get("meta") or {}).items()
        if k not in _META_EXPORTED
    ]
    if recipe.meta.title and recipe.name:
        lost.append(Unmapped("meta.title", recipe.meta.title, "the description holds the name"))
    return lost


_WHY: dict[str, str] = {
    "before_serve": "runs on the node before the container: sparkrun's pre_exec runs inside it",
    "after_stop": "sparkrun has no stop hook",
    "cpus": "no executor_config key for a CPU quota",
    "placeholders": "the {NAME} templates stay in the command; sparkrun takes their values from -o",
}


def _why(key: str) -> str:
    return _WHY.get(key, "no sparkrun key")
