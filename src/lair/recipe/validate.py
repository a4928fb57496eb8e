"""Validation of a recipe source: schema errors, cross-field rules and lint warnings, all located.

``check(source)`` never raises for a bad recipe: it returns every error and warning of the file at
once, each at ``file:line:col`` with the dotted key and a hint. ``rules`` adds checks that need
knowledge from a higher layer (the engines' flag tables): each yields ``(key path, message, hint,
code)`` errors for a schema-valid recipe, located like the others.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from lair.errors import Issue
from lair.recipe import placeholders as ph
from lair.recipe.lint import FRACTION_ENV, is_secret_name, lint
from lair.recipe.model import ENGINES, Recipe
from lair.recipe.runtime_rules import CONTAINER_ONLY
from lair.recipe.source import Key, Source
from lair.recipe.synonyms import by_meaning

__all__ = ["CheckResult", "Rule", "check", "dotted", "is_secret_name"]

Rule = Callable[[Recipe], Iterable[tuple[Key, str, str, str]]]
"""An extra check: a recipe -> ``(key path, message, hint, code)`` errors."""

_PLACEHOLDER_HINT = {
    "path": "/path/on/the/node",
    "secret": "",
    "int": "8",
    "host": "10.0.0.2",
    "string": "value",
}


def dotted(path: Key) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (("." if out else "") + p)
    return out


@dataclass
class CheckResult:
    file: str
    recipe: Recipe | None = None
    errors: list[Issue] = field(default_factory=list)
    warnings: list[Issue] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "file": self.file,
            "errors": [i.as_dict() for i in self.errors],
            "warnings": [i.as_dict() for i in self.warnings],
        }


class _Ctx:
    def __init__(self, src: Source) -> None:
        self.src = src
        self.errors: list[Issue] = []
        self.warnings: list[Issue] = []

    def add(
        self, path: Key, msg: str, hint: str = "", *, code: str, warn: bool = False, on_key: bool = False
    ) -> None:
        pos = self.src.locator.find(path, prefer_value=not on_key)
        issue = Issue(
            self.src.path, pos.line, pos.col, dotted(path), msg, hint, "warning" if warn else "error", code
        )
        (self.warnings if warn else self.errors).append(issue)


def check(src: Source, rules: Sequence[Rule] = ()) -> CheckResult:
    """Every problem of ``src`` in one pass: the schema's errors, then the cross-field checks and
    lint on what validates (on a schema-invalid file: the salvaged rest, each check that reads a
    dropped key skipped), then ``rules``."""
    from lair.recipe.salvage import salvage

    ctx = _Ctx(src)
    recipe: Recipe | None = None
    try:
        recipe = Recipe.model_validate(src.data)
    except ValidationError as exc:
        for err in exc.errors():
            _schema_issue(ctx, err)
    _check_raw(ctx, src.data)
    rest = salvage(src.data) if recipe is None else None
    checked, dropped = (recipe, frozenset[str]()) if rest is None else (rest.recipe, rest.dropped)
    if checked is not None:
        _check_all(ctx, checked, rules, dropped)
    ctx.errors = _unique(ctx.errors)
    ctx.errors.sort(key=lambda i: (i.line, i.col))
    ctx.warnings.sort(key=lambda i: (i.line, i.col))
    return CheckResult(src.path, recipe if not ctx.errors else None, ctx.errors, ctx.warnings)


def _check_all(ctx: _Ctx, r: Recipe, rules: Sequence[Rule], dropped: frozenset[str]) -> None:
    """The cross-field checks, lint and ``rules`` whose keys all hold the file's own values."""
    for fn, reads in _CHECKS:
        if not reads & dropped:
            fn(ctx, r)
    if not dropped:  # lint and the engines' rules read too much of the recipe to run on a salvage
        lint(ctx, r)
    if not dropped & _RULE_READS:
        for rule in rules:
            for path, msg, hint, code in rule(r):
                ctx.add(path, msg, hint, code=code)


def _unique(issues: list[Issue]) -> list[Issue]:
    """One of each issue (a raw check and a model check may both see an undeclared name)."""
    return list(dict.fromkeys(issues))


# ---------------------------------------------------------------------------------------------
# schema errors -> located issues


def _model_at(path: Key) -> type[BaseModel] | None:
    """The pydantic model that holds the last key of ``path`` (for "did you mean")."""
    model: Any = Recipe
    for p in path[:-1]:
        if isinstance(p, int) or model is None:
            continue
        info = model.model_fields.get(p)
        if info is None:
            if model is Recipe and path[0] == "placeholders":
                from lair.recipe.model import Placeholder

                model = Placeholder
                continue
            return None
        model = _inner_model(info.annotation)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _inner_model(ann: Any) -> Any:
    import typing

    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for arg in typing.get_args(ann):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


_TYPE_WORDS = {
    "int_type": "an integer",
    "float_type": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "list_type": "a list",
    "dict_type": "a table",
    "model_type": "a table",
}


def _got(value: Any) -> str:
    names = {str: "string", int: "integer", float: "number", bool: "boolean", list: "list", dict: "table"}
    kind = names.get(type(value), type(value).__name__)
    if isinstance(value, str | int | float | bool):
        return f"{kind} {value!r}"
    return kind


def _schema_issue(ctx: _Ctx, err: Any) -> None:
    loc: Key = tuple(err["loc"])
    kind: str = err["type"]
    value = err.get("input")
    if kind == "extra_forbidden":
        _unknown_key(ctx, loc)
    elif kind == "missing":
        ctx.add(
            loc, f"missing required key '{loc[-1]}'", f"add: {loc[-1]} = ...", code="missing", on_key=True
        )
    elif kind in _TYPE_WORDS:
        ctx.add(
            loc, f"expected {_TYPE_WORDS[kind]}, got {_got(value)}", _type_hint(loc, kind, value), code="type"
        )
    elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        ops = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}
        bound = next(iter(err["ctx"].values()))
        ctx.add(loc, f"must be {ops[kind]} {_num(bound)}, got {value!r}", _range_hint(loc), code="range")
    elif kind == "literal_error":
        allowed = re.findall(r"'([^']*)'", err["ctx"]["expected"])
        ctx.add(
            loc,
            f"must be one of {', '.join(allowed)}; got {value!r}",
            _did_you_mean(str(value), allowed),
            code="choice",
        )
    elif kind == "string_pattern_mismatch" and loc[-1] == "[key]" and loc[0] == "ulimits":
        _ulimit_name(ctx, loc[:-1], str(value))
    elif kind == "string_pattern_mismatch" and loc[-1] == "[key]":
        what = "environment variable" if loc[0] == "env" else "placeholder"
        ctx.add(
            loc[:-1],
            f"invalid {what} name {value!r}",
            "use letters, digits and _, not starting with a digit",
            code="name",
            on_key=True,
        )
    elif kind == "value_error":
        msg = str(err["msg"]).removeprefix("Value error, ")
        ctx.add(loc, msg, _value_hint(loc), code="value")
    else:
        ctx.add(loc, str(err["msg"]), code=kind)


def _ulimit_name(ctx: _Ctx, loc: Key, name: str) -> None:
    from lair.recipe.model import ULIMIT_NAMES

    hint = _did_you_mean(name, list(ULIMIT_NAMES)) or "ulimits: " + ", ".join(ULIMIT_NAMES)
    ctx.add(loc, f"unknown ulimit {name!r}", hint, code="ulimit", on_key=True)


def _num(v: Any) -> str:
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def _unknown_key(ctx: _Ctx, loc: Key) -> None:
    model = _model_at(loc)
    choices = list(model.model_fields) if model else []
    meant = by_meaning(str(loc[-1]), choices)  # by meaning first: `gpu` is gpu_model, not cpu
    hint = f"did you mean '{meant}'?" if meant else _did_you_mean(str(loc[-1]), choices)
    if not hint and model is Recipe:
        from lair.recipe.model import Meta

        if str(loc[-1]) in Meta.model_fields:
            hint = f"'{loc[-1]}' is publication metadata: put it under [meta]"
    ctx.add(
        loc,
        f"unknown key '{loc[-1]}'",
        hint or "see `lair schema` for the keys a recipe may have",
        code="unknown-key",
        on_key=True,
    )


def _did_you_mean(word: str, choices: list[str]) -> str:
    best = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if not best:
        lowered = {c.lower(): c for c in choices}
        best = [lowered[word.lower()]] if word.lower() in lowered else []
    return f"did you mean '{best[0]}'?" if best else ""


def _type_hint(loc: Key, kind: str, value: Any) -> str:
    key = loc[-1]
    if (
        isinstance(value, str)
        and kind in ("int_type", "float_type")
        and re.fullmatch(r"-?\d+(\.\d+)?", value)
    ):
        return f"write the number without quotes: {key} = {value}"
    if kind == "string_type" and isinstance(value, int | float | bool) and not isinstance(key, int):
        lit = str(value).lower() if isinstance(value, bool) else str(value)
        return f'quote it: {key} = "{lit}"'
    if kind == "string_type" and isinstance(value, int | float | bool):
        return "list items here are strings: quote them"
    if kind == "list_type":
        return f'use a list: {key} = ["..."]'
    if kind in ("dict_type", "model_type"):
        return 'use a table, e.g. { key = "value" }'
    return _range_hint(loc) or "`lair schema` shows the type of every key"


def _range_hint(loc: Key) -> str:
    hints = {
        "port": "ports are 1-65535",
        "gpu_memory_utilization": "a memory fraction is in (0, 1]; 0.90 is typical",
        "cpus": "cpus is a positive number of CPUs (fractions allowed)",
    }
    key = str(loc[-1])
    if key.endswith("parallel_size") or key == "required_nodes":
        return f"{key} is at least 1"
    return hints.get(key, "")


def _value_hint(loc: Key) -> str:
    if loc and loc[-1] in ("shm_size", "memory_limit"):
        return 'sizes look like "9g", "512m" or "1.5g"'
    if len(loc) == 2 and loc[0] == "ulimits":
        return 'e.g. nofile = "65536" or "1024:65536" (soft:hard), memlock = "-1"'
    if loc and loc[-1] == "slug":
        return "e.g. deepseek-v4-flash-2x-spark"
    return ""


# ---------------------------------------------------------------------------------------------
# checks on the raw data (run even when the schema failed)


def _check_raw(ctx: _Ctx, data: dict[str, Any]) -> None:
    raw_decl = data.get("placeholders")
    declared: dict[str, Any] = raw_decl if isinstance(raw_decl, dict) else {}
    used: set[str] = set()
    for path, text in ph.iter_strings(data):
        for ref in ph.find_refs(text):
            used.add(ref)
            if ref not in declared:
                ctx.add(
                    path,
                    f"placeholder {{{ref}}} is not declared",
                    f'declare it: [placeholders.{ref}] type = "path" (or {{{{{ref}}}}} for braces)',
                    code="placeholder-undeclared",
                )
    for name in declared:
        if name not in used:
            ctx.add(
                ("placeholders", name),
                f"placeholder '{name}' is declared but never used",
                "remove it, or write {" + name + "} where its value belongs",
                code="placeholder-unused",
                warn=True,
                on_key=True,
            )
    engine = data.get("engine")
    if isinstance(engine, str) and engine not in ENGINES:
        ctx.add(
            ("engine",),
            f"unknown engine {engine!r}",
            _did_you_mean(engine, list(ENGINES)) or f"known engines: {', '.join(ENGINES)}",
            code="engine",
        )


# ---------------------------------------------------------------------------------------------
# cross-field rules on a schema-valid recipe


_PARALLEL = {"tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "required_nodes"}
_RULE_READS = frozenset({"engine", "kv_cache_dtype", "args", "distributed_backend"})


def _check_parallel(ctx: _Ctx, r: Recipe) -> None:
    ws, n = r.world_size, r.required_nodes
    if n > ws * r.data_parallel_size:
        ctx.add(
            ("required_nodes",),
            f"{n} nodes but only {ws * r.data_parallel_size} model shard(s) "
            f"(tensor {r.tensor_parallel_size} x pipeline {r.pipeline_parallel_size})",
            "raise tensor_parallel_size / pipeline_parallel_size, or lower required_nodes",
            code="parallel",
        )
    elif (ws * r.data_parallel_size) % n:
        ctx.add(
            ("tensor_parallel_size",),
            f"tensor x pipeline = {ws} does not split evenly over {n} nodes",
            "every node must hold the same number of GPUs' shards",
            code="parallel",
        )
    if n > 1 and r.distributed_backend is None and r.engine in ("vllm", "sglang"):
        ctx.add(
            ("required_nodes",),
            f"{n} nodes but no distributed_backend",
            'set distributed_backend = "mp" (or "ray")',
            code="parallel",
        )
    hw = r.meta.hardware
    if hw and hw.gpu_count and ws * r.data_parallel_size > hw.gpu_count:
        ctx.add(
            ("tensor_parallel_size",),
            f"needs {ws * r.data_parallel_size} GPUs, meta.hardware has {hw.gpu_count}",
            "make meta.hardware.gpu_count the total GPUs of the rig",
            code="parallel",
        )


def _check_runtime(ctx: _Ctx, r: Recipe) -> None:
    if r.runtime in ("docker", "podman") and not r.docker_image:
        ctx.add(
            ("docker_image",) if "docker_image" in ctx.src.data else ("engine",),
            f"runtime {r.runtime!r} needs docker_image",
            'add docker_image = "repo/image:tag", '
            'or runtime = "native" to run the entrypoint as a plain process',
            code="runtime",
        )
    img = r.docker_image or ""
    if img.startswith("-") or any(c.isspace() for c in img):
        ctx.add(
            ("docker_image",),
            f"not an image reference: {img!r}",
            "an image is repo/name:tag (it may not start with '-' or hold spaces)",
            code="runtime",
        )
    for i, cap in enumerate(r.cap_add):
        if not re.fullmatch(r"[A-Za-z_]+|\{\w+\}", cap):
            ctx.add(("cap_add", i), f"not a capability name: {cap!r}", 'e.g. "SYS_NICE"', code="runtime")
    if r.runtime == "native" and not r.entrypoint:
        ctx.add(
            ("runtime",),
            "runtime 'native' needs an entrypoint",
            'add entrypoint = ["python3", "-m", "..."]',
            code="runtime",
        )


def _check_native_settings(ctx: _Ctx, r: Recipe) -> None:
    """The rule ``lair plan`` refuses with (lair.recipe.runtime_rules), reported where it is set: a
    warning, since the recipe still loads and ``--drop-unsupported`` plans without it (``--strict``
    fails on it)."""
    from lair.recipe.runtime_rules import NATIVE_REASON, native_unsupported

    for key, flag in native_unsupported(r):
        ctx.add(
            (key,),
            f"{flag}: {NATIVE_REASON}; lair plan refuses it",
            'remove it, run in a container (runtime = "docker"), or plan with --drop-unsupported',
            code="runtime",
            warn=True,
            on_key=True,
        )


def _check_hooks(ctx: _Ctx, r: Recipe) -> None:
    from lair.recipe.scripts import find_script, list_scripts

    for stage in ("before_serve", "after_stop"):
        for i, hook in enumerate(getattr(r, stage)):
            path: Key = (stage, i)
            if (hook.script is None) == (hook.run is None):
                ctx.add(
                    path,
                    "a hook has either script or run",
                    'e.g. { script = "name" } or "shell command"',
                    code="hook",
                )
            elif hook.script is not None and find_script(hook.script) is None:
                names = list(list_scripts())
                ctx.add(
                    (*path, "script"),
                    f"no hook script named {hook.script!r}",
                    _did_you_mean(hook.script, names)
                    or "scripts: "
                    + ", ".join(names)
                    + "; add your own to the user script folder (`lair scripts`)",
                    code="hook-script",
                )


def _is_abs_or_ref(p: str) -> bool:
    return p.startswith("/") or p.startswith("{")


def _check_mounts(ctx: _Ctx, r: Recipe) -> None:
    for i, m in enumerate(r.extra_mounts):
        if not _is_abs_or_ref(m.container):
            ctx.add(
                ("extra_mounts", i, "container"),
                f"container path {m.container!r} is not absolute",
                "container paths start with /",
                code="mount",
            )
        if not (_is_abs_or_ref(m.host) or m.host.startswith("~")):
            ctx.add(
                ("extra_mounts", i, "host"),
                f"host path {m.host!r} is not absolute",
                "bind mounts need an absolute path on the node",
                code="mount",
            )
    for i, d in enumerate(r.devices):
        if not (d.startswith("/dev/") or re.fullmatch(r"[\w.-]+/[\w.-]+=[\w.,-]+", d) or d.startswith("{")):
            ctx.add(
                ("devices", i),
                f"not a device path or CDI name: {d!r}",
                'e.g. "/dev/dri/card0" or "nvidia.com/gpu=all"',
                code="device",
            )


def _check_placeholder_decls(ctx: _Ctx, r: Recipe) -> None:
    for name, decl in r.placeholders.items():
        if decl.default is None:
            continue
        if decl.type == "secret":
            ctx.add(
                ("placeholders", name, "default"),
                "a secret placeholder may not have a default",
                f"give it in the environment ({name}=...) or the rig",
                code="placeholder-default",
            )
            continue
        why = ph.check_value(decl.type, str(decl.default))
        if why:
            ctx.add(
                ("placeholders", name, "default"),
                why,
                f"example: {_PLACEHOLDER_HINT[decl.type]}",
                code="placeholder-default",
            )


def _check_env_fractions(ctx: _Ctx, r: Recipe) -> None:
    for k, v in r.env.items():
        if FRACTION_ENV.search(k) and not ph.find_refs(v):
            try:
                f = float(v)
            except ValueError:
                ctx.add(("env", k), f"memory fraction is not a number: {v!r}", 'e.g. "0.90"', code="range")
                continue
            if not 0 < f <= 1:
                ctx.add(
                    ("env", k), f"memory fraction must be in (0, 1], got {v}", "0.90 is typical", code="range"
                )


_CHECKS: tuple[tuple[Callable[[_Ctx, Recipe], None], frozenset[str]], ...] = (
    (_check_parallel, frozenset({*_PARALLEL, "distributed_backend", "engine", "meta"})),
    (_check_runtime, frozenset({"runtime", "docker_image", "cap_add", "entrypoint"})),
    (_check_native_settings, frozenset({"runtime", *(f for f, _ in CONTAINER_ONLY)})),
    (_check_hooks, frozenset({"before_serve", "after_stop"})),
    (_check_mounts, frozenset({"extra_mounts", "devices"})),
    (_check_placeholder_decls, frozenset({"placeholders"})),
    (_check_env_fractions, frozenset({"env"})),
)
"""Each cross-field check and the top-level keys it reads (skipped when one was dropped)."""
