"""The search space of a tune: engine flags, env values and recipe fields, each with its values.

    space = parse_params(["--parallel=1,2,4", "env.OMP_NUM_THREADS=1,2", "max_model_len=4096,8192"])
    space = load_space("space.toml")                 # the same, as a file (docs/tune.md)
    text = apply(recipe_text, space, {"--parallel": "4"})   # the candidate's recipe, comments kept

A knob's name says what it sets: ``--flag`` (an engine flag: its value in ``args`` or ``entrypoint`` is
replaced where the recipe writes it, in any spelling the engine reads, else it is added to ``args``;
``true``/``false`` switch a flag without a value), ``env.NAME`` (an environment value) or a recipe
field (``max_model_len``, ``tensor_parallel_size``, ``kv_cache_dtype``...). The starting recipe's own
value of every knob is always a choice (:data:`UNSET` where the recipe leaves it out), so that trial 0
measures the recipe as it is.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path
from typing import Any, Literal

from lair.errors import ConfigError

__all__ = [
    "OUTPUT_KNOBS",
    "UNSET",
    "Param",
    "Space",
    "apply",
    "current_value",
    "load_space",
    "parse_params",
]

UNSET = "(unset)"
"""The value of a knob the recipe leaves out (the engine's own default): applying it removes the knob."""

OUTPUT_KNOBS = re.compile(r"kv[-_]cache[-_]dtype|cache[-_]type|speculat|quantiz|draft|dtype", re.I)
"""Knobs that change what the model answers (not only how fast): a quality guard checks them."""

Kind = Literal["flag", "env", "field"]
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FLAG = re.compile(r"^--?[A-Za-z][A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class Param:
    """One knob and the values the search may give it (strings, as they go on a command line)."""

    name: str
    values: tuple[str, ...]
    changes_output: bool = False

    @property
    def kind(self) -> Kind:
        if self.name.startswith("-"):
            return "flag"
        return "env" if self.name.startswith("env.") else "field"

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "values": list(self.values),
            "changes_output": self.changes_output,
        }


@dataclass(frozen=True)
class Space:
    params: tuple[Param, ...]
    sampler: str = "tpe"
    seed: int | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    """What the space file sets besides its params (objective, constraints, guard, budget, trials)."""

    def names(self) -> list[str]:
        return [p.name for p in self.params]

    def size(self) -> int:
        n = 1
        for p in self.params:
            n *= len(p.values)
        return n

    def combos(self) -> list[dict[str, str]]:
        """Every candidate (the grid)."""
        return [dict(zip(self.names(), vs, strict=True)) for vs in product(*(p.values for p in self.params))]

    def with_baseline(self, baseline: Mapping[str, str]) -> Space:
        """The space with the starting recipe's value of each knob as a choice (first)."""
        params = []
        for p in self.params:
            v = baseline[p.name]
            params.append(Param(p.name, p.values if v in p.values else (v, *p.values), p.changes_output))
        return Space(tuple(params), self.sampler, self.seed, self.settings)

    def as_dict(self) -> dict[str, Any]:
        return {"params": [p.as_dict() for p in self.params], "sampler": self.sampler, "seed": self.seed}


def _value(v: object, where: str) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float | str):
        return str(v)
    raise ConfigError(f"{where}: a value is a string, number or boolean, not {type(v).__name__}")


def _param(name: str, values: Sequence[object], where: str, changes_output: bool | None = None) -> Param:
    name = name.strip()
    if not name:
        raise ConfigError(f"{where}: a knob needs a name", hint="e.g. --param --parallel=1,2,4")
    if name.startswith("-") and not _FLAG.match(name):
        raise ConfigError(f"{where}: {name!r} is not a flag name")
    if name.startswith("env.") and not _ENV_NAME.match(name[4:]):
        raise ConfigError(f"{where}: {name[4:]!r} is not an environment variable name")
    vals = tuple(dict.fromkeys(_value(v, where) for v in values))
    if not vals or any(v == "" for v in vals):
        raise ConfigError(f"{where}: {name} needs at least one non-empty value")
    out = bool(OUTPUT_KNOBS.search(name)) if changes_output is None else changes_output
    return Param(name, vals, out)


def parse_params(items: Sequence[str], sampler: str = "tpe", seed: int | None = None) -> Space:
    """``--param NAME=V1,V2,...`` (a flag's own ``=`` is the first one: ``--ctx=4096,8192``)."""
    params = []
    for item in items:
        name, sep, rest = item.partition("=")
        if not sep:
            raise ConfigError(
                f"--param {item!r}: expected NAME=V1,V2,...", hint="e.g. --param --parallel=1,2,4"
            )
        params.append(_param(name, [v.strip() for v in rest.split(",")], f"--param {item!r}"))
    return _space(params, sampler, seed)


def _space(
    params: list[Param], sampler: str, seed: int | None, settings: dict[str, Any] | None = None
) -> Space:
    names = [p.name for p in params]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"knob {dup[0]} is given twice", hint="give each knob once, with all its values")
    if not params:
        raise ConfigError("the space has no knobs", hint="--param NAME=V1,V2 or --space FILE")
    if sampler not in ("tpe", "grid", "random"):
        raise ConfigError(f"sampler {sampler!r}: expected tpe, grid or random")
    return Space(tuple(params), sampler, seed, settings or {})


_FILE_KEYS = {"param", "sampler", "seed", "objective", "constraint", "guard", "budget", "trials"}
_PARAM_KEYS = {"name", "values", "range", "changes_output"}


def _range(spec: object, where: str) -> list[object]:
    if not (isinstance(spec, list) and len(spec) in (2, 3) and all(isinstance(x, int) for x in spec)):
        raise ConfigError(f"{where}.range: expected [low, high] or [low, high, step] (integers)")
    lo, hi, step = (*spec, 1) if len(spec) == 2 else spec
    if step <= 0 or hi < lo or (hi - lo) // step >= 1024:
        raise ConfigError(f"{where}.range: low <= high, step > 0, at most 1024 values")
    return list(range(lo, hi + 1, step))


def _file_param(i: int, entry: object, file: str) -> Param:
    where = f"{file}: param[{i}]"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected a table ([[param]] with name and values)")
    unknown = sorted(set(entry) - _PARAM_KEYS)
    if unknown:
        raise ConfigError(
            f"{where}.{unknown[0]}: unknown key", hint=f"known: {', '.join(sorted(_PARAM_KEYS))}"
        )
    if not isinstance(entry.get("name"), str):
        raise ConfigError(f"{where}.name: a knob needs a name (a string)")
    if ("values" in entry) == ("range" in entry):
        raise ConfigError(f"{where}: give values = [...] or range = [low, high, step], one of them")
    values = entry["values"] if "values" in entry else _range(entry["range"], where)
    if not isinstance(values, list):
        raise ConfigError(f"{where}.values: expected a list")
    out = entry.get("changes_output")
    if out is not None and not isinstance(out, bool):
        raise ConfigError(f"{where}.changes_output: expected true or false")
    return _param(entry["name"], values, where, out)


def load_space(path: str | Path) -> Space:
    """A space file (TOML): ``[[param]]`` tables, and optionally the tune's other settings."""
    p = Path(path)
    try:
        doc = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read the space file: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: {exc}") from None
    unknown = sorted(set(doc) - _FILE_KEYS)
    if unknown:
        raise ConfigError(f"{p}: {unknown[0]}: unknown key", hint=f"known: {', '.join(sorted(_FILE_KEYS))}")
    entries = doc.get("param", [])
    if not isinstance(entries, list):
        raise ConfigError(f"{p}: param: expected [[param]] tables")
    params = [_file_param(i, e, str(p)) for i, e in enumerate(entries)]
    seed = doc.get("seed")
    if seed is not None and not isinstance(seed, int):
        raise ConfigError(f"{p}: seed: expected an integer")
    settings: dict[str, Any] = {
        k: doc[k] for k in ("objective", "constraint", "guard", "budget", "trials") if k in doc
    }
    return _space(params, str(doc.get("sampler", "tpe")), seed, settings)


# ---------------------------------------------------------------------------------------------
# reading and writing knobs in a recipe


def _norm(word: str) -> str:
    flag = word.split("=", 1)[0]
    return "--" + flag[2:].replace("_", "-") if flag.startswith("--") else flag


def _find_flag(argv: Sequence[str], name: str) -> tuple[int, bool] | None:
    """(index, written as ``--flag=value``) of the last spelling of ``name`` in argv."""
    found = None
    for i, a in enumerate(argv):
        if a.startswith("-") and _norm(a) == _norm(name):
            found = (i, "=" in a)
    return found


def _flag_value(argv: Sequence[str], name: str) -> str | None:
    hit = _find_flag(argv, name)
    if hit is None:
        return None
    i, inline = hit
    if inline:
        return argv[i].split("=", 1)[1]
    nxt = argv[i + 1] if i + 1 < len(argv) else None
    return nxt if nxt is not None and not nxt.startswith("-") else "true"


def current_value(doc: Mapping[str, Any], name: str) -> str:
    """The recipe's own value of a knob (:data:`UNSET` when it leaves it out)."""
    if name.startswith("-"):
        for key in ("args", "entrypoint"):
            got = _flag_value([str(a) for a in doc.get(key) or []], name)
            if got is not None:
                return got
        return UNSET
    node: Any = doc.get("env") or {} if name.startswith("env.") else doc
    for part in (name[4:] if name.startswith("env.") else name).split("."):
        if not isinstance(node, Mapping) or part not in node:
            return UNSET
        node = node[part]
    return _value(node, name) if not isinstance(node, Mapping) else UNSET


def _typed(raw: str) -> Any:
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def _set_flag(doc: Any, name: str, value: str) -> None:
    import tomlkit

    for key in ("args", "entrypoint"):
        argv = doc.get(key)
        hit = _find_flag([str(a) for a in argv or []], name)
        if hit is None:
            continue
        i, inline = hit
        has_value = inline or (i + 1 < len(argv) and not str(argv[i + 1]).startswith("-"))
        if value in (UNSET, "false"):
            del argv[i : i + (1 if inline or not has_value else 2)]
        elif value == "true":
            argv[i] = str(argv[i]).split("=", 1)[0]
            if has_value and not inline:
                del argv[i + 1]
        elif inline:
            argv[i] = f"{str(argv[i]).split('=', 1)[0]}={value}"
        elif has_value:
            argv[i + 1] = value
        else:
            argv.insert(i + 1, value)
        return
    if value in (UNSET, "false"):
        return
    if "args" not in doc:
        doc["args"] = tomlkit.array()
    doc["args"].extend([name] if value == "true" else [name, value])


def _set_key(doc: Any, parts: list[str], value: str) -> None:
    import tomlkit

    node = doc
    for part in parts[:-1]:
        if part not in node:
            node[part] = tomlkit.table()
        node = node[part]
    if value == UNSET:
        node.pop(parts[-1], None)
    else:
        node[parts[-1]] = value if parts[0] == "env" else _typed(value)


def apply(text: str, values: Mapping[str, str]) -> str:
    """The recipe text with each knob set to its value (comments and layout kept)."""
    import tomlkit

    doc = tomlkit.parse(text)
    for name, value in values.items():
        if name.startswith("-"):
            _set_flag(doc, name, value)
        elif name.startswith("env."):
            _set_key(doc, ["env", name[4:]], value)
        else:
            _set_key(doc, name.split("."), value)
    return tomlkit.dumps(doc)
