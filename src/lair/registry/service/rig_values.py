"""Map the placeholders to your rig: a recipe rendered with the user's values.

Every typed placeholder but the secrets gets a field; a secret is always rendered as an environment
reference (``${API_KEY}``) and its value is never asked for, echoed or stored. The result is the
launch command and the whole recipe (TOML) with the values filled in, or the reasons a value is wrong.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lair.recipe import Recipe, export_text, to_data
from lair.recipe.placeholders import check_value, find_refs, render_data

__all__ = ["Field", "Rendered", "form_fields", "render_with"]

MAX_VALUE = 1000


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    description: str
    value: str
    secret: bool


@dataclass
class Rendered:
    fields: list[Field]
    errors: dict[str, str] = field(default_factory=dict)
    command: str = ""
    toml: str = ""

    @property
    def ok(self) -> bool:
        return not self.errors

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "values": {f.name: (f"${{{f.name}}}" if f.secret else f.value) for f in self.fields},
            "errors": self.errors,
            "command": self.command,
            "toml": self.toml,
        }


def form_fields(recipe: Recipe, given: Mapping[str, str]) -> list[Field]:
    out = []
    for name, ph in recipe.placeholders.items():
        secret = ph.type == "secret"
        default = "" if secret or ph.default is None else str(ph.default)
        value = "" if secret else (given.get(name) or default)[:MAX_VALUE]
        out.append(Field(name, ph.type, ph.description, value, secret))
    return out


def _command(r: Recipe, secrets: set[str]) -> str:
    """A shell line that starts what the recipe describes (env, then the process or container)."""
    env = [f"{k}={shlex.quote(v)}" if k not in secrets else f'{k}="${{{k}}}"' for k, v in r.env.items()]
    if r.runtime == "native":
        return " ".join([*env, *map(shlex.quote, [*r.entrypoint, *r.args])])
    parts = [r.runtime, "run", "--rm"]
    parts += [f"--shm-size={r.shm_size}"] if r.shm_size else []
    parts += [f"--gpus={r.gpus}"] if r.gpus else []
    parts += [x for k in r.env for x in ("-e", k)]
    parts += [
        x for m in r.extra_mounts for x in ("-v", f"{m.host}:{m.container}" + (":ro" if m.read_only else ""))
    ]
    parts += ["-p", f"{r.port}:{r.port}"]
    parts += [f"--entrypoint={r.entrypoint[0]}"] if r.entrypoint else []
    tail = [r.docker_image or "IMAGE", *r.entrypoint[1:], *r.args]
    return " ".join(env + [shlex.quote(p) for p in parts + tail])


def _secret_env(recipe: Recipe) -> set[str]:
    secret = {n for n, p in recipe.placeholders.items() if p.type == "secret"}
    return {k for k, v in recipe.env.items() if set(find_refs(v)) & secret}


def render_with(recipe: Recipe, given: Mapping[str, str]) -> Rendered:
    """The recipe with ``given`` placeholder values (secrets as ``${NAME}``); errors per field."""
    fields = form_fields(recipe, given)
    out = Rendered(fields)
    values: dict[str, str] = {}
    for f in fields:
        if f.secret:
            values[f.name] = f"${{{f.name}}}"
            continue
        why = check_value(f.type, f.value) if f.value else "a value is needed"
        if why:
            out.errors[f.name] = why
        values[f.name] = f.value
    if out.errors:
        return out
    data = render_data(to_data(recipe), values)
    rendered = Recipe.model_validate(data)
    out.command = _command(rendered, _secret_env(recipe))
    out.toml = export_text(rendered, "toml")
    return out
