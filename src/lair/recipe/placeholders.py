"""Placeholders: ``{NAME}`` in a launch field stands for a value from the user's rig.

Syntax: ``{NAME}`` where NAME is a declared placeholder (letters, digits, underscore). ``${NAME}``
is left alone (shell), ``{{`` and ``}}`` stand for literal braces. Placeholders are substituted in
launch fields only (never in ``meta`` or in the declarations themselves).
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Iterator, Mapping
from typing import Any

from lair.errors import PlaceholderError

__all__ = [
    "LAUNCH_EXCLUDED",
    "check_value",
    "find_refs",
    "iter_strings",
    "resolve_values",
    "substitute",
]

REF_RE = re.compile(r"(?<![{$])\{([A-Za-z_][A-Za-z0-9_]*)\}(?!\})")
LAUNCH_EXCLUDED = frozenset({"meta", "placeholders", "schema_version"})
_HOST_RE = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9-]{1,63})*$"
)


def find_refs(text: str) -> list[str]:
    return REF_RE.findall(text)


def iter_strings(data: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """Every string in the launch part of a recipe's raw data, with its key path."""
    if isinstance(data, str):
        yield path, data
    elif isinstance(data, dict):
        for k, v in data.items():
            if not path and k in LAUNCH_EXCLUDED:
                continue
            yield from iter_strings(v, (*path, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from iter_strings(v, (*path, i))


def substitute(text: str, values: Mapping[str, str]) -> str:
    out = REF_RE.sub(lambda m: values.get(m.group(1), m.group(0)), text)
    return out


def _sub_tree(data: Any, values: Mapping[str, str], top: bool = True) -> Any:
    if isinstance(data, str):
        return substitute(data, values)
    if isinstance(data, dict):
        return {
            k: (v if top and k in LAUNCH_EXCLUDED else _sub_tree(v, values, False)) for k, v in data.items()
        }
    if isinstance(data, list):
        return [_sub_tree(v, values, False) for v in data]
    return data


def check_value(kind: str, value: str) -> str | None:
    """None if ``value`` is a valid ``kind`` placeholder value, else the reason."""
    if kind == "int":
        return None if re.fullmatch(r"-?\d+", value) else f"expected an integer, got {value!r}"
    if kind == "path":
        return None if value.strip() else "a path may not be empty"
    if kind == "host":
        try:
            ipaddress.ip_address(value)
            return None
        except ValueError:
            return None if _HOST_RE.fullmatch(value) else f"not a host name or address: {value!r}"
    if kind == "secret":
        return None if value else "a secret may not be empty"
    return None


def resolve_values(
    declared: Mapping[str, Any], given: Mapping[str, str], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Values for every declared placeholder: rig value, then (secrets only) the environment, then default."""
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for name, ph in declared.items():
        if name in given:
            out[name] = str(given[name])
        elif ph.type == "secret" and env.get(name):
            out[name] = env[name]
        elif ph.default is not None and ph.type != "secret":
            out[name] = str(ph.default)
    for name, value in given.items():
        out.setdefault(name, str(value))
    return out


def render_data(data: dict[str, Any], values: Mapping[str, str], where: str = "") -> dict[str, Any]:
    """Substitute placeholders in the launch fields; raise if any reference stays unresolved."""
    missing = sorted({ref for _, s in iter_strings(data) for ref in find_refs(s) if ref not in values})
    if missing:
        declared = data.get("placeholders") or {}
        secrets = [n for n in missing if _type_of(declared.get(n)) == "secret"]
        raise PlaceholderError(missing, where=where, hint=missing_hint(missing, secrets))
    out: dict[str, Any] = _sub_tree(data, values)
    return out


def _type_of(decl: Any) -> str | None:
    return decl.get("type") if isinstance(decl, dict) else getattr(decl, "type", None)


def missing_hint(missing: list[str], secrets: list[str]) -> str:
    """How to give the unresolved ``missing`` placeholders: secrets (``secrets``, a subset) come from
    the environment only, the others from a rig or ``--set``."""
    lines = []
    if secrets:
        exports = " ".join(f"{n}=..." for n in secrets)
        lines.append(f"export {exports} in the environment (a secret is not given on the command line)")
    others = [n for n in missing if n not in secrets]
    if others:
        pairs = " ".join(f"{n}=VALUE" for n in others)
        lines.append(f"give values with `lair rig set RIG {pairs}` and --rig RIG, or --set NAME=VALUE")
    return "\n".join(lines)


__all__ += ["missing_hint", "render_data"]
