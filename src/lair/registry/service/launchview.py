"""What a recipe page derives from the launch fields when ``[meta]`` does not say it.

- flags: the engine arguments of ``entrypoint`` + ``args`` as ``--flag value`` pairs;
- launch command: a readable shell command built from the launch fields (the registry never imports
  the planner: ``lair plan FILE`` prints exactly what ``lair launch`` runs, with the engine's own
  serve command and the multi-node wiring added);
- hardware: nodes x GPUs from ``required_nodes`` and the parallel sizes, marked as derived;
- the card line: engine, model, hardware and best speed, for a recipe with no summary.
"""

from __future__ import annotations

import shlex
from typing import Any

from lair.recipe import Recipe, secret_env_names

__all__ = ["card_line", "derived_flags", "derived_hardware", "launch_lines", "model_name"]


def derived_flags(recipe: Recipe) -> list[dict[str, str]]:
    """Each ``-f``/``--flag`` of the entrypoint and args with the value that follows it (``""`` for
    a switch): the entrypoint's flags first, in order."""
    argv = [*recipe.entrypoint, *recipe.args]
    out: list[dict[str, str]] = []
    for i, a in enumerate(argv):
        if not a.startswith("-") or a == "-" or _is_number(a):
            continue
        flag, eq, value = a.partition("=")
        nxt = argv[i + 1] if i + 1 < len(argv) else ""
        if not eq and nxt and (not nxt.startswith("-") or _is_number(nxt)):
            value = nxt
        out.append(
            {"flag": flag, "value": value, "where": "args" if i >= len(recipe.entrypoint) else "entrypoint"}
        )
    return out


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _env_line(name: str, value: str, secret: bool) -> str:
    return f'{name}="${{{name}}}"' if secret else f"{name}={shlex.quote(value)}"


def _container_opts(r: Recipe, secrets: set[str]) -> list[str]:
    opts = [f"--shm-size={r.shm_size}"] if r.shm_size else []
    opts += [f"--gpus={r.gpus}"] if r.gpus else []
    opts += [f"--ipc={r.ipc}"] if r.ipc else []
    opts += ["--pid=host"] if r.pid else []
    opts += ["--privileged"] if r.privileged else []
    opts += [f"--cap-add={c}" for c in r.cap_add]
    opts += [f"--device={d}" for d in r.devices]
    opts += [f"--memory={r.memory_limit}", "--memory-swap=" + r.memory_limit] if r.memory_limit else []
    opts += [f"--cpus={r.cpus:g}"] if r.cpus else []
    opts += [f"--ulimit={k}={v}" for k, v in r.ulimits.items()]
    opts += ["-e " + _env_line(k, v, k in secrets) for k, v in r.env.items()]
    opts += [f"-v {m.host}:{m.container}" + (":ro" if m.read_only else "") for m in r.extra_mounts]
    opts += [f"-p {r.port}:{r.port}"]
    opts += [f"--entrypoint={shlex.quote(r.entrypoint[0])}"] if r.entrypoint else []
    return opts


def _argv_lines(argv: list[str]) -> list[str]:
    """An argv as lines: the words before the first flag, then each flag with what follows it."""
    lines: list[list[str]] = [[]]
    for a in argv:
        if a.startswith("-") and not _is_number(a) and lines[-1]:
            lines.append([])
        lines[-1].append(shlex.quote(a))
    return [" ".join(words) for words in lines if words]


def launch_lines(recipe: Recipe) -> list[str]:
    """The command, one option per line (join with `` \\`` continuations to run it). Placeholders stay
    as ``{NAME}``; secret values are ``${NAME}`` references."""
    r, secrets = recipe, secret_env_names(recipe)
    if r.runtime == "native":
        env = [_env_line(k, v, k in secrets) for k, v in r.env.items()]
        return [*env, *_argv_lines([*r.entrypoint, *r.args])] or [f"# {r.engine}: no entrypoint"]
    command = _argv_lines([*r.entrypoint[1:], *r.args])
    lines = [f"{r.runtime} run --rm", *_container_opts(r, secrets), r.docker_image or "IMAGE", *command]
    return lines + _notes(r)


def _notes(r: Recipe) -> list[str]:
    """What lair adds that the fields alone do not show, as comment lines after the command."""
    notes = []
    if r.extra_mounts_manifest:
        notes.append(f"# + a read-only bind mount per line of {r.extra_mounts_manifest}")
    if not r.entrypoint:
        notes.append(f"# + the {r.engine} serve command lair adds for the model (lair plan shows it)")
    return notes


def derived_hardware(recipe: Recipe) -> dict[str, Any]:
    """GPUs from the launch fields: nodes, GPUs per node (tensor x pipeline x data parallel spread
    over the nodes), the container's CPU and memory caps."""
    gpus = recipe.tensor_parallel_size * recipe.pipeline_parallel_size * recipe.data_parallel_size
    nodes = recipe.required_nodes
    tags = {t.lower() for t in recipe.meta.tags}
    out: dict[str, Any] = {
        "derived": True,
        "cpu_only": recipe.gpus == "none" or "cpu" in tags,
        "nodes": nodes,
        "gpu_count": gpus,
        "gpus_per_node": max(1, -(-gpus // nodes)),
        "parallel": ", ".join(
            f"{name}{n}"
            for name, n in (
                ("TP", recipe.tensor_parallel_size),
                ("PP", recipe.pipeline_parallel_size),
                ("DP", recipe.data_parallel_size),
            )
            if n > 1
        ),
    }
    if recipe.cluster:
        out["cluster"] = recipe.cluster
    if recipe.cpus:
        out["cpus"] = recipe.cpus
    if recipe.memory_limit:
        out["memory_limit"] = recipe.memory_limit
    return out


def model_name(recipe: Recipe) -> str | None:
    """The model the recipe serves, as a reader names it."""
    m = recipe.meta
    facts = m.model_facts.name if m.model_facts else None
    plain = recipe.model if recipe.model and "{" not in recipe.model else None
    return m.model_repo or m.upstream_weights or facts or plain or recipe.served_model_name


def card_line(recipe: Recipe, best_decode: float | None) -> str:
    """A one-line summary from what the recipe has: engine, model, hardware, best decode speed."""
    hw = recipe.meta.hardware
    if hw and hw.gpu_model:
        gpus = f"{hw.gpu_count or 1}x {hw.gpu_model}"
    elif derived_hardware(recipe)["cpu_only"]:
        gpus = "CPU"
    else:
        d = derived_hardware(recipe)
        nodes = (
            f"{d['nodes']} nodes x {d['gpus_per_node']} GPU" if d["nodes"] > 1 else f"{d['gpu_count']} GPU"
        )
        gpus = (
            nodes + ("s" if d["gpus_per_node"] > 1 else "") + (f" ({d['parallel']})" if d["parallel"] else "")
        )
    engine = recipe.meta.engine.name if recipe.meta.engine and recipe.meta.engine.name else recipe.engine
    parts = [engine, model_name(recipe), gpus]
    if best_decode:
        parts.append(f"best decode {best_decode:,.1f} tok/s")
    return " · ".join(p for p in parts if p)
