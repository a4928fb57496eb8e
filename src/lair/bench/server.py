"""What the server says about itself: served model, engine and version, context limit.

Engines answer in different places; each probe tries the ones it knows and returns None when none
answers (nothing here raises for a missing endpoint):

- served model: ``/v1/models`` (``data[0].id``);
- engine and version: vLLM and SGLang ``/version`` (``{"version"}``), llama.cpp ``/props``
  (``build_info``; the ``b0-unknown`` of a build without git metadata is no version); the engine's
  name from ``/v1/models`` ``owned_by`` (``vllm``, ``sglang``, ``llamacpp``), or ``/props`` itself;
- context limit per request: vLLM/SGLang ``/v1/models`` ``max_model_len``, llama.cpp ``/props``
  ``default_generation_settings.n_ctx`` (the context of one slot: ``--ctx`` / ``--parallel``), else
  ``/v1/models`` ``meta.n_ctx``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from lair.bench.client import Endpoint, http_request, open_stream
from lair.errors import BenchError

__all__ = ["ServerInfo", "context_refusal", "server_info"]

_NO_VERSION = ("b0-unknown", "unknown", "")


@dataclass
class ServerInfo:
    """The answers; None where the server gave none."""

    model: str = ""
    engine: str | None = None
    version: str | None = None
    max_context: int | None = None
    max_context_source: str | None = None

    @property
    def label(self) -> str | None:
        """``engine version`` as far as known (``llama.cpp b6500``, ``vllm 0.11.0``)."""
        parts = [p for p in (self.engine, self.version) if p]
        return " ".join(parts) or None


async def _get(ep: Endpoint, path: str, api_key: str | None) -> Any:
    try:
        status, body = await http_request(ep, "GET", path, api_key=api_key, timeout_s=10)
        return json.loads(body) if status == 200 else None
    except (BenchError, ValueError):
        return None


def _first_model(models: Any) -> dict[str, Any]:
    data = models.get("data") if isinstance(models, dict) else None
    return data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _from_props(info: ServerInfo, props: Any) -> None:
    if not isinstance(props, dict):
        return
    info.engine = info.engine or "llama.cpp"
    build = props.get("build_info")
    if isinstance(build, str) and build not in _NO_VERSION:
        info.version = build
    settings = props.get("default_generation_settings")
    n_ctx = _int(settings.get("n_ctx")) if isinstance(settings, dict) else None
    if n_ctx:
        info.max_context, info.max_context_source = n_ctx, "/props n_ctx (per slot)"


def _from_models(info: ServerInfo, model: dict[str, Any]) -> None:
    if info.max_context is None and (n := _int(model.get("max_model_len"))):
        info.max_context, info.max_context_source = n, "/v1/models max_model_len"
    meta = model.get("meta")
    if info.max_context is None and isinstance(meta, dict) and (n := _int(meta.get("n_ctx"))):
        info.max_context, info.max_context_source = n, "/v1/models meta.n_ctx"
    owner = model.get("owned_by")
    if info.engine is None and isinstance(owner, str) and owner not in ("", "system", "organization"):
        info.engine = {"llamacpp": "llama.cpp"}.get(owner, owner)


async def server_info(ep: Endpoint, api_key: str | None) -> ServerInfo:
    """Ask the server (see the module docstring); a server that cannot be reached is an error."""
    (await open_stream(ep)).transport.close()  # type: ignore[union-attr]  # raises "cannot connect to ..."
    model = _first_model(await _get(ep, "/v1/models", api_key))
    info = ServerInfo(model=str(model.get("id") or ""))
    version = await _get(ep, "/version", api_key)
    if isinstance(version, dict) and isinstance(v := version.get("version"), str) and v:
        info.version = v  # vLLM and SGLang alike: the engine's name comes from owned_by
    else:
        _from_props(info, await _get(ep, "/props", api_key))
    _from_models(info, model)
    return info


def context_refusal(
    info: ServerInfo, contexts: list[int], decode_tokens: int, recipe_max: int | None = None
) -> BenchError | None:
    """The error for prompt sizes that cannot fit the server's context (prompt + output), or None.

    The server's own figure wins; the recipe's ``max_model_len`` is the fallback."""
    limit, source = info.max_context, info.max_context_source
    if limit is None and recipe_max:
        limit, source = recipe_max, "the recipe's max_model_len"
    if limit is None:
        return None
    over = [c for c in contexts if c + decode_tokens > limit]
    if not over:
        return None
    sizes = ", ".join(f"{c:,}" for c in over)
    return BenchError(
        f"context {sizes} + {decode_tokens} output tokens exceeds the server's maximum of "
        f"{limit:,} tokens ({source}); nothing was sent",
        hint=f"use --contexts up to {max(1, limit - decode_tokens):,}, or serve a longer context",
    )
