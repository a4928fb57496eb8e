"""Recipes: load, check, render (placeholders), export and edit.

load_recipe(path) -> Recipe            raises RecipeError with every located problem
check_file(path) -> CheckResult        errors + lint warnings, never raises for a bad recipe
render_recipe(recipe, values) -> Recipe   placeholders substituted; PlaceholderError if unresolved
export_text(recipe, fmt) -> str         TOML / YAML / JSON of the same model
redacted_toml(path, values) -> str      the file as run: placeholders resolved, secrets "***"
edit_toml(path, {"a.b": value})         comment- and layout-preserving edit of a TOML recipe
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lair.errors import Issue, PlaceholderError, RecipeError
from lair.recipe.model import Hook, Meta, Mount, Placeholder, Recipe, parse_size
from lair.recipe.source import FORMATS, format_of, read_source, read_text
from lair.recipe.validate import CheckResult, Rule, check, is_secret_name

__all__ = [
    "FORMATS",
    "CheckResult",
    "Hook",
    "Meta",
    "Mount",
    "Placeholder",
    "Recipe",
    "Rule",
    "check_file",
    "check_text",
    "edit_toml",
    "export_text",
    "format_of",
    "is_secret_name",
    "load_recipe",
    "parse_size",
    "redacted_toml",
    "render_recipe",
    "secret_env_names",
    "to_data",
]

REDACTED = "***"


def check_text(text: str, name: str, fmt: str, rules: Sequence[Rule] = ()) -> CheckResult:
    try:
        return check(read_text(text, name, fmt), rules)
    except RecipeError as exc:
        return CheckResult(name, None, list(exc.issues), [])


def check_file(path: str | Path, rules: Sequence[Rule] = ()) -> CheckResult:
    """Errors and warnings of a recipe file; ``rules`` add checks from higher layers (engines)."""
    try:
        return check(read_source(path), rules)
    except RecipeError as exc:
        return CheckResult(str(path), None, list(exc.issues), [])


def load_recipe(path: str | Path, rules: Sequence[Rule] = ()) -> Recipe:
    result = check_file(path, rules)
    if result.recipe is None:
        raise RecipeError(result.errors)
    return result.recipe


def load_text(text: str, name: str = "<recipe>", fmt: str = "toml") -> Recipe:
    result = check_text(text, name, fmt)
    if result.recipe is None:
        raise RecipeError(result.errors)
    return result.recipe


__all__ += ["load_text"]


# ---------------------------------------------------------------------------------------------
# data and exports


def _compact_hooks(hooks: list[Any]) -> list[Any]:
    return [h["run"] if isinstance(h, dict) and set(h) == {"run"} else h for h in hooks]


def to_data(recipe: Recipe) -> dict[str, Any]:
    """The recipe as plain data: keys the author set (or that differ from defaults), hooks compacted."""
    data: dict[str, Any] = recipe.model_dump(mode="json", exclude_unset=True, exclude_none=True)
    for stage in ("before_serve", "after_stop"):
        if stage in data:
            data[stage] = _compact_hooks(data[stage])
    return data


def _toml_order(data: dict[str, Any]) -> dict[str, Any]:
    """Scalars and plain arrays first, then tables, then arrays of tables (what TOML requires)."""

    def rank(v: Any) -> int:
        if isinstance(v, dict):
            return 1
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            return 2
        return 0

    out = {k: data[k] for k in sorted(data, key=lambda k: rank(data[k]))}
    return {k: (_toml_order(v) if isinstance(v, dict) else v) for k, v in out.items()}


def export_text(recipe: Recipe, fmt: str) -> str:
    data = to_data(recipe)
    if fmt == "json":
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    if fmt == "yaml":
        import yaml

        return str(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100))
    if fmt == "toml":
        import tomlkit

        return tomlkit.dumps(_toml_order(data))
    raise ValueError(f"unknown format {fmt!r}")


# ---------------------------------------------------------------------------------------------
# placeholders and secrets


def secret_env_names(recipe: Recipe) -> set[str]:
    """Env names whose values are secrets: secret-looking names, or values from secret placeholders."""
    from lair.recipe.placeholders import find_refs

    secret_ph = {n for n, p in recipe.placeholders.items() if p.type == "secret"}
    return {k for k, v in recipe.env.items() if is_secret_name(k) or set(find_refs(v)) & secret_ph}


def render_recipe(
    recipe: Recipe,
    values: Mapping[str, str] | None = None,
    *,
    where: str = "",
    secrets_from_env: bool = True,
) -> Recipe:
    """Substitute every placeholder; values come from ``values`` (a rig), secrets from the environment
    (unless ``secrets_from_env`` is False), then declared defaults. Raises PlaceholderError for any
    reference left unresolved."""
    from lair.errors import ConfigError
    from lair.recipe.placeholders import check_value, render_data, resolve_values

    environ: dict[str, str] | None = None if secrets_from_env else {}
    resolved = resolve_values(recipe.placeholders, dict(values or {}), environ)
    for name, value in resolved.items():
        decl = recipe.placeholders.get(name)
        why = check_value(decl.type, value) if decl else None
        if why:
            raise ConfigError(f"placeholder {{{name}}}: {why}", hint=f"fix its value in the rig ({name}=...)")
    data = render_data(recipe.model_dump(mode="python", exclude_unset=True), resolved, where=where)
    return _validated(data, where)


def _validated(data: dict[str, Any], where: str) -> Recipe:
    """The rendered recipe; a placeholder value that makes a field invalid (``ulimits.nofile =
    "{N}"`` given ``1024 --privileged``) is a ConfigError naming the field, not a traceback."""
    from pydantic import ValidationError

    from lair.errors import ConfigError
    from lair.recipe.validate import dotted

    try:
        return Recipe.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        msg = str(first["msg"]).removeprefix("Value error, ")
        field = dotted(tuple(p for p in first["loc"] if p != "[key]"))
        raise ConfigError(
            f"{where or 'the recipe'}: {field}: {msg} (after placeholders were filled in)",
            hint="fix the placeholder's value in the rig or --set",
        ) from None


def redacted_toml(path: str | Path, values: Mapping[str, str] | None = None) -> str:
    """The recipe file as run: placeholders resolved, secret values replaced by ``***``.

    A TOML file keeps its comments and layout; other formats are re-emitted as TOML.
    """
    recipe = load_recipe(path)
    rendered = render_recipe(recipe, values)
    secrets = secret_env_names(recipe)
    if format_of(path) != "toml":
        for k in secrets:
            rendered.env[k] = REDACTED
        return export_text(rendered, "toml")
    import tomlkit

    doc = tomlkit.parse(Path(path).read_text(encoding="utf-8"))
    from lair.recipe.placeholders import LAUNCH_EXCLUDED, resolve_values, substitute

    resolved = resolve_values(recipe.placeholders, dict(values or {}))
    secret_values = {
        resolved[n] for n, p in recipe.placeholders.items() if p.type == "secret" and n in resolved
    }
    _redact_doc(doc, resolved, secret_values, LAUNCH_EXCLUDED, substitute)
    env = doc.get("env")
    if env is not None:
        for k in secrets:
            if k in env:
                env[k] = REDACTED
    return str(tomlkit.dumps(doc))


def _redact_doc(
    node: Any, values: Mapping[str, str], secrets: set[str], skip: frozenset[str], sub: Any
) -> None:
    items = list(node.items()) if hasattr(node, "items") else list(enumerate(node))
    for k, v in items:
        if skip and k in skip:
            continue
        if isinstance(v, str):
            new = sub(str(v), values)
            for s in secrets:
                new = new.replace(s, REDACTED) if s else new
            if new != str(v):
                node[k] = new
        elif hasattr(v, "items") or isinstance(v, list):
            _redact_doc(v, values, secrets, frozenset(), sub)


# ---------------------------------------------------------------------------------------------
# editing


def _parse_value(text: str) -> Any:
    import tomllib

    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def edit_toml(path: str | Path, assignments: Mapping[str, str]) -> CheckResult:
    """Set dotted keys in a TOML recipe, keeping comments and layout; the result must still check.

    Values are TOML literals (``8001``, ``true``, ``["a"]``) or else plain strings. The file is
    only written when the edited recipe has no errors.
    """
    import tomlkit

    p = Path(path)
    doc = tomlkit.parse(p.read_text(encoding="utf-8"))
    for key, raw in assignments.items():
        parts = key.split(".")
        node: Any = doc
        for part in parts[:-1]:
            if part not in node:
                node[part] = tomlkit.table()
            node = node[part]
        node[parts[-1]] = _parse_value(raw)
    text = tomlkit.dumps(doc)
    result = check_text(text, str(p), "toml")
    if result.ok:
        p.write_text(text, encoding="utf-8")
    return result


def issue_at(path: str, message: str, hint: str = "") -> Issue:
    return Issue(path, 1, 1, "", message, hint)


__all__ += ["PlaceholderError", "issue_at", "read_source"]
