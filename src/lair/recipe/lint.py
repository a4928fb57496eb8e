"""Lint warnings of a schema-valid recipe (``lair check`` prints them; exit 1 only with ``--strict``):
unpinned images, plain-text secrets, control-host paths in env, memory fractions above 0.95.

Each check reports through ``ctx.add(path, message, hint, code=..., warn=True)``: the located issue
list of :mod:`lair.recipe.validate`, which this module does not import.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Protocol

from lair.recipe import placeholders as ph

if TYPE_CHECKING:
    from lair.recipe.model import Recipe
    from lair.recipe.source import Key

__all__ = ["FRACTION_ENV", "Adds", "is_secret_name", "lint"]

_SECRET_WORDS = {"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIALS", "PAT"}
FRACTION_ENV = re.compile(r"(GPU_MEMORY_UTILIZATION|MEM_FRACTION(_STATIC)?)$")
_FRACTION_ARGS = ("--gpu-memory-utilization", "--mem-fraction-static")
_SECRET_ARGS = ("--api-key", "--hf-token", "--token")
_HOST_PREFIXES = ("/home/", "/Users/", "/root/", "~/", "/mnt/c/")


class Adds(Protocol):
    """Where lint reports: the validator's located issue list."""

    def add(self, path: Key, msg: str, hint: str = "", *, code: str, warn: bool = False) -> Any: ...


def is_secret_name(name: str) -> bool:
    """Whether an env/arg name holds a secret: its last word is KEY, TOKEN, SECRET, PASSWORD..."""
    words = [w for w in re.split(r"[_\-]+", name.upper()) if w]
    return bool(words) and words[-1] in _SECRET_WORDS


def lint(ctx: Adds, r: Recipe) -> None:
    _lint_image(ctx, r)
    _lint_secrets(ctx, r)
    _lint_host_paths(ctx, r)
    _lint_fractions(ctx, r)


def _lint_image(ctx: Adds, r: Recipe) -> None:
    img = r.docker_image
    if not img or r.runtime == "native" or "@sha256:" in img:
        return
    last = img.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else ""
    if tag in ("", "latest"):
        ctx.add(
            ("docker_image",),
            f"image {img!r} is unpinned ({'no tag' if not tag else ':latest'})",
            "pin a version tag and a digest: repo/image:tag@sha256:...",
            code="image-unpinned",
            warn=True,
        )
    else:
        ctx.add(
            ("docker_image",),
            f"image tag {tag!r} is not pinned by digest",
            "tags can move; add @sha256:... to run exactly what was measured",
            code="image-unpinned",
            warn=True,
        )


def _lint_secrets(ctx: Adds, r: Recipe) -> None:
    for k, v in r.env.items():
        if is_secret_name(k) and v and not ph.find_refs(v):
            ctx.add(
                ("env", k),
                f"secret {k} is written in plain text",
                f'declare a secret placeholder: {k} = "{{{k}}}" and [placeholders.{k}] type = "secret"',
                code="secret-plaintext",
                warn=True,
            )
    for field_name in ("args", "entrypoint"):
        items = getattr(r, field_name)
        for i, a in enumerate(items[:-1]):
            if a in _SECRET_ARGS and not ph.find_refs(items[i + 1]):
                ctx.add(
                    (field_name, i + 1),
                    f"secret after {a} is written in plain text",
                    'use a secret placeholder: "{API_KEY}"',
                    code="secret-plaintext",
                    warn=True,
                )


def _lint_host_paths(ctx: Adds, r: Recipe) -> None:
    hosts = [m.host.rstrip("/") for m in r.extra_mounts]
    for k, v in r.env.items():
        under_mount = any(v == h or v.startswith(h + "/") for h in hosts)
        if v.startswith(_HOST_PREFIXES) or under_mount:
            ctx.add(
                ("env", k),
                f"{k} points at a control-host path {v!r}",
                "the engine sees container paths: mount it and use the container side",
                code="host-path",
                warn=True,
            )


def _lint_fractions(ctx: Adds, r: Recipe) -> None:
    if r.gpu_memory_utilization and r.gpu_memory_utilization > 0.95:
        _fraction_warn(ctx, ("gpu_memory_utilization",), r.gpu_memory_utilization)
    for k, v in r.env.items():
        if FRACTION_ENV.search(k):
            try:
                if float(v) > 0.95:
                    _fraction_warn(ctx, ("env", k), float(v))
            except ValueError:
                pass
    for i, a in enumerate(r.args[:-1]):
        if a in _FRACTION_ARGS:
            try:
                f = float(r.args[i + 1])
            except ValueError:
                continue
            if f > 0.95:
                _fraction_warn(ctx, ("args", i + 1), f)


def _fraction_warn(ctx: Adds, path: Key, f: float) -> None:
    ctx.add(
        path,
        f"memory fraction {f} leaves under 5% for the runtime, CUDA graphs and other processes",
        "0.90-0.95 is safe on a dedicated GPU",
        code="memory-fraction",
        warn=True,
    )
