"""``lair new``: a commented recipe per engine and runtime that passes ``lair check`` and ``lair plan``.

Each engine brings what differs (:data:`ENGINE_DEFAULTS`): its image, how it is started as a plain
process, the flags that set its context and memory share, the model form it loads (a folder, or a GGUF
file for llama.cpp). Each runtime brings what applies there: an image, shared memory and a read-only
mount of the model for containers; the command itself for ``native`` (nothing container-only, which the
plan would refuse). Options are checked before anything is written.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import PurePath

from lair.errors import ConfigError

__all__ = ["ENGINE_DEFAULTS", "RUNTIMES", "EngineDefaults", "ScaffoldOptions", "scaffold"]

RUNTIMES = ("docker", "podman", "native")


@dataclass(frozen=True)
class EngineDefaults:
    """What a scaffold needs to know about one engine."""

    label: str
    image: str
    native: tuple[str, ...]  # the plain-process command; {model} is the model path
    args: tuple[str, ...] = ()
    multinode: bool = False
    gguf: bool = False  # the engine loads one GGUF file (placeholder default ends in .gguf)
    container_entrypoint: tuple[str, ...] = ()  # written out for containers (else the image's own)
    notes: tuple[str, ...] = field(default_factory=tuple)


ENGINE_DEFAULTS: dict[str, EngineDefaults] = {
    "vllm": EngineDefaults(
        "vLLM",
        "vllm/vllm-openai:v0.11.0",
        ("vllm", "serve", "{model}"),
        ("--max-model-len", "32768", "--gpu-memory-utilization", "0.90"),
        multinode=True,
    ),
    "sglang": EngineDefaults(
        "SGLang",
        "lmsysorg/sglang:v0.5.3",
        ("python3", "-m", "sglang.launch_server", "--model-path", "{model}"),
        ("--context-length", "32768", "--mem-fraction-static", "0.88"),
        multinode=True,
    ),
    "llamacpp": EngineDefaults(
        "llama.cpp",
        "ghcr.io/ggml-org/llama.cpp:server",
        ("llama-server", "-m", "{model}"),
        ("--ctx-size", "8192", "--n-gpu-layers", "999"),
        gguf=True,
    ),
    "xllamacpp": EngineDefaults(
        "llama.cpp (xllamacpp)",
        "localhost/lair-xllamacpp:0.1",
        ("python3", "-m", "lair.engines.xllamacpp_server", "--model", "{model}"),
        ("--ctx", "8192"),
        gguf=True,
        container_entrypoint=("python3", "-m", "lair.engines.xllamacpp_server", "--model", "{model}"),
        notes=("containers: an image you build with lair[engines] installed (no public one)",),
    ),
    "custom": EngineDefaults(
        "a custom server",
        "ghcr.io/your-org/your-server:1.0",
        ("your-server", "--model", "{model}", "--host", "0.0.0.0", "--port", "8000"),
        notes=("replace the image and the command with your server's; it must speak the OpenAI API",),
    ),
}


@dataclass(frozen=True)
class ScaffoldOptions:
    """What ``lair new`` was asked for."""

    engine: str = "vllm"
    runtime: str = "docker"
    model: str | None = None  # a folder (or GGUF file) on the nodes; None: a MODEL_DIR placeholder
    image: str | None = None
    nodes: int = 1
    tp: int = 1
    title: str | None = None


def _validate(o: ScaffoldOptions) -> EngineDefaults:
    if o.engine not in ENGINE_DEFAULTS:
        raise ConfigError(
            f"lair new has no scaffold for engine {o.engine!r}",
            hint=f"choose one of {', '.join(ENGINE_DEFAULTS)} (custom fits any other server)",
        )
    if o.runtime not in RUNTIMES:
        raise ConfigError(f"unknown runtime {o.runtime!r}", hint=f"choose one of {', '.join(RUNTIMES)}")
    eng = ENGINE_DEFAULTS[o.engine]
    if o.nodes < 1 or o.tp < 1:
        raise ConfigError("--nodes and --tp must be at least 1")
    if o.nodes > 1 and not eng.multinode:
        raise ConfigError(
            f"{eng.label} does not split one model over nodes here",
            hint="use --nodes 1, or --engine vllm / sglang for a multi-node recipe",
        )
    if o.image and o.runtime == "native":
        raise ConfigError(
            "--image is for the docker and podman runtimes", hint="drop --image with --runtime native"
        )
    if o.model is not None and (not o.model.strip() or "{" in o.model or '"' in o.model):
        raise ConfigError(f"--model expects a path on the nodes, got {o.model!r}")
    return eng


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "model"


def _model_name(o: ScaffoldOptions) -> str:
    if o.model is None:
        return "my model"
    name = PurePath(o.model.rstrip("/")).name
    return name.removesuffix(".gguf") or "model"


def _title(o: ScaffoldOptions, eng: EngineDefaults) -> str:
    where = f"{o.nodes} nodes" if o.nodes > 1 else "1 node"
    tp = f", TP{o.tp}" if o.tp > 1 else ""
    return o.title or f"{_model_name(o)} on {eng.label} ({o.runtime}, {where}{tp})"


def _toml(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def _model_ref(o: ScaffoldOptions, eng: EngineDefaults) -> str:
    if o.model is not None:
        return o.model
    return "{MODEL_DIR}/model.gguf" if eng.gguf else "{MODEL_DIR}"


def _launch_lines(o: ScaffoldOptions, eng: EngineDefaults, model: str) -> list[str]:
    lines = [f"engine = {_toml(o.engine)}", f"runtime = {_toml(o.runtime)}"]
    if o.runtime != "native":
        lines.append(f"docker_image = {_toml(o.image or eng.image)}")
    lines += [
        f"model = {_toml(model)}",
        f"name = {_toml(_slug(_model_name(o)) + '-' + o.engine)}",
        f"required_nodes = {o.nodes}",
        f"tensor_parallel_size = {o.tp}",
    ]
    if o.nodes > 1:
        lines.append('distributed_backend = "mp"')
    lines.append("port = 8000")
    if o.runtime != "native":
        lines.append('shm_size = "16g"')
    command = eng.native if o.runtime == "native" else eng.container_entrypoint
    if command:
        lines.append(f"entrypoint = {_toml([c.replace('{model}', model) for c in command])}")
    if eng.args:
        lines.append(f"args = {_toml(list(eng.args))}")
    return lines


def _mount_lines(o: ScaffoldOptions, eng: EngineDefaults) -> list[str]:
    if o.runtime == "native":
        return []
    folder = "{MODEL_DIR}" if o.model is None else (str(PurePath(o.model).parent) if eng.gguf else o.model)
    return [
        "",
        "[[extra_mounts]]",
        f"host = {_toml(folder)}",
        f"container = {_toml(folder)}",
        "read_only = true",
    ]


def _placeholder_lines(o: ScaffoldOptions) -> list[str]:
    if o.model is not None:
        return []
    return [
        "",
        "[placeholders.MODEL_DIR]",
        'type = "path"',
        'description = "the weights on each node (per rig: lair rig set RIG MODEL_DIR=...)"',
        'default = "/models/my-model"',
    ]


def scaffold(o: ScaffoldOptions) -> str:
    """The recipe text; :class:`ConfigError` for options no recipe can be made of."""
    eng = _validate(o)
    model = _model_ref(o, eng)
    title = _title(o, eng)
    head = [
        f"# {title}",
        "# Launch config (top level) + publication metadata ([meta]). `lair check` validates it,",
        "# `lair plan` shows exactly what `lair launch` will run.",
        *(f"# {n}" for n in eng.notes),
    ]
    body = [*_launch_lines(o, eng, model), "", "[env]", 'HF_HUB_OFFLINE = "1"']
    body += _placeholder_lines(o) + _mount_lines(o, eng)
    meta = ["", "[meta]", f"title = {_toml(title)}", "tags = []", 'license = "MIT"']
    return "\n".join(head + body + meta) + "\n"
