"""Trust: a recipe from a registry or URL is untrusted until its user accepts what it asks for.

Local files are trusted (unless they carry a provenance stamp: :mod:`lair.launch.trust_store`). An
untrusted recipe runs nothing until an :class:`Acceptance` of exactly what it asks for, from the
same source, exists: same :attr:`Acceptance.source` (URL, or registry revision) and same
:func:`fingerprint`. What it asks for (:func:`requests`) covers every launch field, so any change
of what runs changes the fingerprint: the runtime, image (with its digest when pinned), model,
entrypoint and args, every env name and value, mounts, devices, GPUs, privileges, capabilities,
namespaces, ulimits, the full text of every hook, and every other launch option (ports, resources,
the nodes layout: ``options``). :func:`risks` says, line by line and with the value and the reason,
what of it reaches beyond the engine's own sandbox; the acceptance prompt shows every line and,
for a recipe that changed since its source was last accepted, the difference (:func:`diff_requests`).

Risky for an untrusted recipe (each is one line of :func:`risks`):

- the image itself (it runs with everything below), or a native process (runs as the node's user);
  an entrypoint that replaces the image's own command, shown as the command it runs; the model;
- any hook (``before_serve``/``after_stop`` run on the node itself, outside any container);
- any mount that is read-write, or of a system path (:data:`SYSTEM_PATHS`, read-only included; a
  few folders only as a whole: :data:`WHOLE_PATHS`), a socket, an ``.ssh`` folder or the
  Docker/Podman socket (paths normalised first: ``/tmp/../etc`` is ``/etc``); a manifest of mounts
  a hook writes;
- any device, privileged mode, added capabilities, the host's IPC or PID namespace;
- env that changes what gets loaded (:data:`LOADER_ENV`: ``LD_PRELOAD``, ``PYTHONWARNINGS``,
  ``GLIBC_TUNABLES``, ``OPENSSL_CONF``...) or where it connects and whom it trusts
  (:data:`NETWORK_ENV`: ``HF_ENDPOINT``, ``*_PROXY``, CA bundles...), with its value;
- engine flags that run code from the model repo or load plugins (:data:`CODE_FLAGS`:
  ``--trust-remote-code``...), with the model they apply to.

Secret values never enter the requests: secret placeholders stand as ``{NAME}`` (:func:`trust_view`),
and a value written in plain text under a secret-looking name stands as its short sha256.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from lair.errors import TrustError

if TYPE_CHECKING:
    from lair.recipe import Hook, Recipe

__all__ = [
    "CODE_FLAGS",
    "LOADER_ENV",
    "NETWORK_ENV",
    "SYSTEM_PATHS",
    "WHOLE_PATHS",
    "Acceptance",
    "check_trust",
    "diff_requests",
    "env_risk",
    "fingerprint",
    "requests",
    "risks",
    "risky_requests",
    "trust_view",
]

SYSTEM_PATHS = (
    "/",
    "/etc",
    "/var",
    "/run",
    "/proc",
    "/sys",
    "/dev",
    "/root",
    "/home",
    "/boot",
    "/efi",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/opt",
    "/srv",
    "/snap",
    "/nix",
    "/Users",
    "/Library",
    "/System",
    "/Applications",
    "/private",
)
"""A mount of one of these, or of anything under them, is risky, read-only too (``/`` only as a
whole): the host's configuration, state, software, services' data and its users' files."""

WHOLE_PATHS = {
    "/mnt": "every disk mounted on the host",
    "/media": "every disk mounted on the host",
    "/Volumes": "every disk mounted on the host",
    "/tmp": "shared by every process of the host: their sockets (ssh-agent, X11) stay reachable",
}
"""Folders risky only as a whole (a models folder under ``/mnt`` is what recipes mount), and why."""

_LOADED = "changes what gets loaded"
LOADER_ENV = frozenset(
    {
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "GLIBC_TUNABLES",
        "GCONV_PATH",
        "LOCPATH",
        "NLSPATH",
        "MALLOC_CONF",
        "OPENSSL_CONF",
        "OPENSSL_MODULES",
        "OPENSSL_ENGINES",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONSTARTUP",
        "PYTHONUSERBASE",
        "PYTHONWARNINGS",
        "PYTHONBREAKPOINT",
        "PYTHONINSPECT",
        "PYTHONEXECUTABLE",
        "PYTHONPLATLIBDIR",
        "PATH",
        "NODE_OPTIONS",
        "NODE_PATH",
        "PERL5LIB",
        "PERL5OPT",
        "PERLLIB",
        "RUBYOPT",
        "RUBYLIB",
        "BASH_ENV",
        "ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "PS4",
        "PROMPT_COMMAND",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "CLASSPATH",
        "GIT_SSH",
        "GIT_SSH_COMMAND",
        "GIT_ASKPASS",
        "SSH_ASKPASS",
        "GIT_EXEC_PATH",
        "GIT_CONFIG_GLOBAL",
        "GIT_CONFIG_SYSTEM",
        "GIT_CONFIG_PARAMETERS",
        "HF_HUB_ENABLE_HF_TRANSFER",
        "VLLM_PLUGINS",
        "VLLM_ALLOW_INSECURE_SERIALIZATION",
    }
)
"""Env names that change which code a process loads or runs (plus the prefixes ``LD_``, ``DYLD_``
and ``GIT_CONFIG_``)."""

_LOADER_PREFIXES = ("LD_", "DYLD_", "GIT_CONFIG_")
_LOADER_WHY = {
    "GLIBC_TUNABLES": "tunes the C library of every process; parsed by the loader",
    "OPENSSL_CONF": "an OpenSSL config loads engines and providers: native code",
    "PYTHONWARNINGS": "a warning category names a module: Python imports it at start",
    "PYTHONBREAKPOINT": "names a callable Python imports",
    "VLLM_ALLOW_INSECURE_SERIALIZATION": "lets vLLM unpickle data: code",
}

_CONNECTS = "changes where it downloads from"
_TLS = "changes which TLS certificates it trusts"
NETWORK_ENV: dict[str, str] = {
    "HF_ENDPOINT": "changes where model files and code are downloaded from",
    "HF_HUB_ENDPOINT": "changes where model files and code are downloaded from",
    "MODELSCOPE_DOMAIN": "changes where model files and code are downloaded from",
    "VLLM_USE_MODELSCOPE": "changes where model files and code are downloaded from",
    "PIP_INDEX_URL": "changes where Python packages are installed from",
    "PIP_EXTRA_INDEX_URL": "changes where Python packages are installed from",
    "PIP_TRUSTED_HOST": "lets pip install over plain HTTP",
    "UV_INDEX_URL": "changes where Python packages are installed from",
    "UV_EXTRA_INDEX_URL": "changes where Python packages are installed from",
    "UV_DEFAULT_INDEX": "changes where Python packages are installed from",
    "SSL_CERT_FILE": _TLS,
    "SSL_CERT_DIR": _TLS,
    "REQUESTS_CA_BUNDLE": _TLS,
    "CURL_CA_BUNDLE": _TLS,
    "NODE_EXTRA_CA_CERTS": _TLS,
    "GIT_SSL_CAINFO": _TLS,
    "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": _TLS,
    "GIT_SSL_NO_VERIFY": "turns off TLS certificate checks",
    "NODE_TLS_REJECT_UNAUTHORIZED": "turns off TLS certificate checks",
    "PYTHONHTTPSVERIFY": "turns off TLS certificate checks",
    "SSLKEYLOGFILE": "writes the TLS session keys to a file",
    "HOSTALIASES": "changes how host names resolve",
    "RES_OPTIONS": "changes how host names resolve",
    "LOCALDOMAIN": "changes how host names resolve",
}
"""Env names that change where a process connects or whom it trusts, and why (plus any name ending
in ``_PROXY``, any case, and ``_CA_BUNDLE`` / ``_CA_CERTS``)."""

CODE_FLAGS: dict[str, str] = {
    "--trust-remote-code": "runs Python code from the model repo",
    "--trust_remote_code": "runs Python code from the model repo",
    "--tool-parser-plugin": "imports a Python file as a tool parser",
    "--reasoning-parser-plugin": "imports a Python file as a reasoning parser",
    "--worker-extension-cls": "imports a class by name into every worker",
    "--worker-cls": "imports a class by name as the worker",
    "--logits-processors": "imports logits processors by name",
    "--enable-custom-logit-processor": "lets API clients send serialized (dill) logit processors: code",
    "--allowed-local-media-path": "lets API clients read files of the container",
}
"""Engine flags that run code beyond the engine's own (vLLM, SGLang, TensorRT-LLM spellings)."""

_SOCKET_NAMES = ("docker.sock", "podman.sock", "containerd.sock", "crio.sock")
_SECRET_ARGS = ("--api-key", "--hf-token", "--token")
_OWN_FIELDS = frozenset(
    {
        "engine",
        "runtime",
        "docker_image",
        "model",
        "entrypoint",
        "args",
        "env",
        "extra_mounts",
        "extra_mounts_manifest",
        "devices",
        "gpus",
        "privileged",
        "cap_add",
        "ipc",
        "pid",
        "ulimits",
        "before_serve",
        "after_stop",
    }
)
"""Launch fields with a request key of their own; every other launch field is under ``options``."""
_NOT_LAUNCH = frozenset({"meta", "placeholders", "schema_version"})


class Acceptance(BaseModel):
    """A user's acceptance of what an untrusted recipe from one source asks for."""

    model_config = ConfigDict(extra="forbid")

    fingerprint: str = Field(description="sha256 of the accepted requests")
    source: str = Field(description="where the recipe came from (URL, registry revision)")
    requests: dict[str, list[str]] = Field(description="what was accepted (requests()), for the diff")
    accepted_at: str = Field(description="local time of the acceptance")


def trust_view(recipe: Recipe, values: Mapping[str, str]) -> Recipe:
    """``recipe`` rendered with ``values``, secret placeholders left as ``{NAME}`` (never their values)."""
    from lair.recipe import render_recipe

    masked = {n: "{" + n + "}" for n, p in recipe.placeholders.items() if p.type == "secret"}
    return render_recipe(recipe, {**values, **masked}, secrets_from_env=False)


def _hook_text(h: Hook) -> str:
    text = f"script {h.script} {shlex.join(h.args)}".strip() if h.script else f"sh -c {h.run}"
    extra = [f"on_failure={h.on_failure}"] * (h.on_failure != "fail")
    extra += [f"timeout_s={h.timeout_s:g}"] * (h.timeout_s != 600.0)
    return text + (f" [{', '.join(extra)}]" if extra else "")


def _mount_text(host: str, container: str, read_only: bool) -> str:
    return f"{host}:{container}{':ro' if read_only else ''}"


def _masked(value: str) -> str:
    """A plain-text secret as its short sha256: the fingerprint sees a change, the store no value."""
    if re.fullmatch(r"\{\w+\}", value) or not value:
        return value
    return "sha256:" + hashlib.sha256(value.encode()).hexdigest()[:16]


def _env_text(k: str, v: str) -> str:
    from lair.recipe import is_secret_name

    return f"{k}={_masked(v) if is_secret_name(k) else v}"


def _arg_text(argv: list[str], i: int) -> str:
    a = argv[i]
    flag, eq, value = a.partition("=")
    if eq and flag in _SECRET_ARGS:
        return f"{flag}={_masked(value)}"
    return _masked(a) if i and argv[i - 1] in _SECRET_ARGS else a


def _argv_text(argv: list[str]) -> str:
    return shlex.join(_arg_text(argv, i) for i in range(len(argv)))


def _options(r: Recipe) -> list[str]:
    """``name=value`` of every other launch field the recipe sets to other than its default."""
    out: list[str] = []
    for name, info in type(r).model_fields.items():
        if name in _OWN_FIELDS or name in _NOT_LAUNCH:
            continue
        value: Any = getattr(r, name)
        if value != info.get_default(call_default_factory=True):
            out.append(f"{name}={json.dumps(value, sort_keys=True)}")
    return out


def requests(recipe: Recipe) -> dict[str, list[str]]:
    """Everything a recipe asks of the hosts, which its fingerprint binds (placeholders resolved)."""
    r = recipe
    container = r.runtime != "native"
    return {
        "engine": [r.engine],
        "runtime": [r.runtime],
        "image": [r.docker_image or ""] if container else [],
        "model": [r.model] if r.model else [],
        "entrypoint": [_argv_text(r.entrypoint)] if r.entrypoint else [],
        "args": [_argv_text(r.args)] if r.args else [],
        "env": sorted(_env_text(k, v) for k, v in r.env.items()),
        "mounts": [_mount_text(m.host, m.container, m.read_only) for m in r.extra_mounts],
        "manifest": [r.extra_mounts_manifest] if r.extra_mounts_manifest else [],
        "devices": list(r.devices),
        "gpus": [r.gpus] if r.gpus else [],
        "privileged": ["--privileged"] if r.privileged else [],
        "cap_add": list(r.cap_add),
        "namespaces": [f"ipc={r.ipc}"] * bool(r.ipc) + [f"pid={r.pid}"] * bool(r.pid),
        "ulimits": sorted(f"{k}={v}" for k, v in r.ulimits.items()),
        "before_serve": [_hook_text(h) for h in r.before_serve],
        "after_stop": [_hook_text(h) for h in r.after_stop],
        "options": _options(r),
    }


def _mount_risk(host: str, read_only: bool) -> str | None:
    """Why a bind mount of ``host`` is risky, or None."""
    path = posixpath.normpath("/" + host.lstrip("/")) if host.startswith("/") else host
    parts = [p for p in path.split("/") if p]
    why: list[str] = [f"it is {path}"] if path != host.rstrip("/") and host != "/" else []
    if not read_only:
        why.append("read-write")
    if path == "/":
        why.append("the host's whole filesystem")
    elif any(path == p or path.startswith(p + "/") for p in SYSTEM_PATHS if p != "/"):
        why.append("a system path")
    elif path in WHOLE_PATHS:
        why.append(WHOLE_PATHS[path])
    if ".ssh" in parts:
        why.append("SSH keys")
    if path.endswith(".sock") or any(p in _SOCKET_NAMES for p in parts):
        why.append("a socket (a container runtime's socket gives root on the host)")
    if host.startswith("~"):
        why.append("a user's home folder")
    elif not host.startswith("/"):
        why.append("not an absolute path")
    return ", ".join(why) or None


def env_risk(name: str) -> str | None:
    """Why env ``name`` is risky in an untrusted recipe, or None."""
    upper = name.upper()
    if name in LOADER_ENV or upper.startswith(_LOADER_PREFIXES):
        return _LOADER_WHY.get(name, _LOADED)
    if name in NETWORK_ENV:
        return NETWORK_ENV[name]
    if upper.endswith("_PROXY"):
        return "routes its network traffic through another host"
    if upper.endswith(("_CA_BUNDLE", "_CA_CERTS")):
        return _TLS
    return None


def _code_flags(r: Recipe) -> list[str]:
    """``flag (why, model)`` for every code-running engine flag in the entrypoint or args."""
    out: list[str] = []
    words = [w for a in [*r.entrypoint, *r.args] for w in a.split()]
    for flag, why in CODE_FLAGS.items():
        hits = [w for w in words if w == flag or w.startswith(flag + "=")]
        for w in dict.fromkeys(hits):
            model = f" {r.model}" if r.model and "model" in why else ""
            out.append(f"engine flag {w} ({why}{model})")
    return out


def _command_risks(r: Recipe) -> list[str]:
    if r.runtime == "native":
        argv = _argv_text(r.entrypoint + r.args) or f"the {r.engine} engine's default command"
        return [f"native process on the node, as its user: {argv}"]
    out = [f"image {r.docker_image}: its code runs with everything below"]
    if r.entrypoint:
        argv = _argv_text(r.entrypoint + r.args)
        out.append(f"entrypoint {argv} (replaces the image's own command: this runs in the container)")
    return out


def _model_risk(r: Recipe) -> list[str]:
    return [f"model {r.model} (the engine downloads and loads it)"] if r.model else []


def risks(recipe: Recipe) -> list[str]:
    """What an untrusted ``recipe`` may not do without acceptance, one line each with the reason."""
    r = recipe
    out = _command_risks(r) + _model_risk(r)
    for stage, hooks in (("before_serve", r.before_serve), ("after_stop", r.after_stop)):
        out += [f"hook {_hook_text(h)} ({stage}, runs on the node itself)" for h in hooks]
    for m in r.extra_mounts:
        why = _mount_risk(m.host, m.read_only)
        if why:
            out.append(f"mount {_mount_text(m.host, m.container, m.read_only)} ({why})")
    if r.extra_mounts_manifest:
        out.append(f"mounts listed in {r.extra_mounts_manifest} (written on the node)")
    out += [f"device {d} (host hardware in the container)" for d in r.devices]
    out += ["privileged mode (every device and capability of the host)"] if r.privileged else []
    out += [f"cap-add {c} (a kernel capability beyond the default set)" for c in r.cap_add]
    out += [f"ipc {r.ipc} (the host's IPC namespace)"] if r.ipc == "host" else []
    out += [f"pid {r.pid} (sees and signals every process of the host)"] if r.pid == "host" else []
    out += [f"env {_env_text(k, v)} ({why})" for k, v in r.env.items() if (why := env_risk(k))]
    return out + _code_flags(r)


def risky_requests(recipe: Recipe) -> list[str]:
    """Alias of :func:`risks` (the name earlier versions used)."""
    return risks(recipe)


def fingerprint(recipe: Recipe) -> str:
    """sha256 of what a recipe asks for (:func:`requests`), placeholders already resolved."""
    blob = json.dumps({"v": 2, "requests": requests(recipe)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def diff_requests(old: Mapping[str, list[str]], new: Mapping[str, list[str]]) -> list[str]:
    """``- key: value`` / ``+ key: value`` lines between two request sets (accepted -> now)."""
    out: list[str] = []
    for key in sorted(set(old) | set(new)):
        before, after = list(old.get(key, [])), list(new.get(key, []))
        out += [f"- {key}: {v}" for v in before if v not in after]
        out += [f"+ {key}: {v}" for v in after if v not in before]
    return out


def _accepted(recipe: Recipe, acceptance: Acceptance | None, source: str | None) -> bool:
    if acceptance is None or acceptance.fingerprint != fingerprint(recipe):
        return False
    return source is None or acceptance.source == source


def check_trust(
    recipe: Recipe,
    *,
    trusted: bool,
    acceptance: Acceptance | None = None,
    previous: Acceptance | None = None,
    source: str | None = None,
) -> None:
    """Raise TrustError unless ``recipe`` is trusted or ``acceptance`` is of exactly its requests,
    from ``source`` (when given: an acceptance of another source never counts).

    ``previous`` (the last acceptance of the same source) adds the changes to the message."""
    if trusted or _accepted(recipe, acceptance, source):
        return
    found = risks(recipe)
    changes = diff_requests(previous.requests, requests(recipe)) if previous else []
    origin = f" from {source}" if source else ""
    text = f"this recipe{origin} is not trusted (it came from a registry or URL) and asks for:\n"
    text += "\n".join(f"  {r}" for r in found)
    if previous and changes:
        text += f"\nchanged since you accepted it on {previous.accepted_at}"
        text += f" (from {previous.source})" if previous.source != source else ""
        text += ":\n" + "\n".join(f"  {c}" for c in changes)
    raise TrustError(
        text,
        hint="read what it runs, then accept it: lair plan|launch ... --accept",
        risks=found,
        diff=changes,
        fingerprint=fingerprint(recipe),
    )
