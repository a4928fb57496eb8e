"""Secrets: values of secret placeholders and secret env never reach a command line, a plan, the
journal, a log or a report.

- A secret placeholder in ``args``/``entrypoint`` right after a flag the engine also reads from its
  environment (``--api-key`` -> ``VLLM_API_KEY`` for vLLM, ``LLAMA_API_KEY`` for llama.cpp) is moved
  there: the flag and its value leave the argv, the env gets the value (:func:`move_secret_args`).
  Anywhere else in a command line a secret is refused (it would show in ``ps`` and ``docker inspect``).
- A native process reads its env from the 0600 env-file (sourced by ``sh`` before ``exec``). A
  container gets its secret env from a second 0600 file mounted read-only at :data:`SECRETS_MOUNT`
  and sourced by ``sh`` inside the container before ``exec``: ``docker inspect`` shows neither the
  values nor the names' values (``--env-file`` content would show as ``Config.Env``).
- Every text lair keeps or prints from a run is passed through :func:`redactor` of every resolved
  secret value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from lair.errors import ConfigError

if TYPE_CHECKING:
    from lair.recipe import Recipe

__all__ = ["SECRETS_MOUNT", "SECRET_WRAP", "move_secret_args", "redactor", "secret_placeholders"]

SECRETS_MOUNT = "/run/lair/secrets"
SECRET_WRAP = f'set -a; . {SECRETS_MOUNT}; set +a; exec "$@"'
"""``sh -c`` text that loads the secrets file inside the container, then becomes the command."""
REDACTED = "***"


def secret_placeholders(recipe: Recipe) -> set[str]:
    return {n for n, p in recipe.placeholders.items() if p.type == "secret"}


def _secret_refs(text: str, names: set[str]) -> set[str]:
    from lair.recipe.placeholders import find_refs

    return set(find_refs(text)) & names


def _moves(raw: list[str], flags: Mapping[str, str], field: str, engine: str, names: set[str]) -> list[int]:
    """Indices of ``raw`` to drop (flag and value) for each secret that can move to an env name."""
    drop: list[int] = []
    for i, item in enumerate(raw):
        refs = _secret_refs(item, names)
        if not refs:
            continue
        flag = item.split("=", 1)[0] if item.startswith("--") and "=" in item else (raw[i - 1] if i else "")
        if flag not in flags:
            raise ConfigError(
                f"{field}[{i}]: secret placeholder {{{sorted(refs)[0]}}} would be on the command line "
                "(visible in ps and docker inspect)",
                hint=f"engine {engine} reads no env for {flag or 'this argument'}: give it as env "
                f'(env.NAME = "{{{sorted(refs)[0]}}}") and have the entrypoint read $NAME; '
                "lair moves --api-key for vllm and llama.cpp by itself",
            )
        drop += [i] if "=" in item and item.startswith("--") else [i - 1, i]
    return drop


def move_secret_args(recipe: Recipe, rendered: Recipe) -> tuple[Recipe, dict[str, str]]:
    """``rendered`` without the secret flags of its args/entrypoint, and the env that carries them.

    ``recipe`` is the unrendered recipe (where ``{NAME}`` references can still be seen); ``rendered``
    the same recipe with values substituted (same list lengths). Raises ConfigError for a secret
    the engine cannot read from its environment."""
    from lair.engines import get_engine

    names = secret_placeholders(recipe)
    spec = get_engine(recipe.engine)
    update: dict[str, object] = {}
    env: dict[str, str] = {}
    for field in ("entrypoint", "args"):
        raw, done = list(getattr(recipe, field)), list(getattr(rendered, field))
        drop = _moves(raw, spec.secret_flags, field, recipe.engine, names)
        for i in drop:
            if i in drop and not raw[i].startswith("--"):
                env[spec.secret_flags[raw[i - 1]]] = done[i]
            elif "=" in raw[i]:
                env[spec.secret_flags[raw[i].split("=", 1)[0]]] = done[i].split("=", 1)[1]
        if drop:
            update[field] = [a for i, a in enumerate(done) if i not in drop]
    return rendered.model_copy(update=update), env


def redactor(values: Iterable[str]) -> Callable[[str], str]:
    """A function that replaces each of ``values`` (longest first; values under 4 characters are
    left alone, they would blank out ordinary words) by ``***``."""
    secrets = sorted({v for v in values if len(v) >= 4}, key=len, reverse=True)

    def redact(text: str) -> str:
        for s in secrets:
            text = text.replace(s, REDACTED)
        return text

    return redact
