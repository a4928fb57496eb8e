"""Reading recipe files: the data, and where each key sits in the text.

``read_source(path)`` returns a :class:`Source` with the parsed data (a plain dict) and a
:class:`Locator` that maps a dotted key path (``("extra_mounts", 2, "host")``) back to a
``line:col``. TOML positions come from a small scanner over the text (tomllib gives none); YAML and
JSON positions come from PyYAML's node marks (JSON is read as YAML 1.2-compatible flow text).
Broken syntax becomes a :class:`~lair.errors.RecipeError` at the parser's own position.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lair.errors import Issue, RecipeError

__all__ = ["FORMATS", "Key", "Locator", "Pos", "Source", "format_of", "read_source", "read_text"]

Key = tuple[str | int, ...]
FORMATS = ("toml", "yaml", "json")


@dataclass(frozen=True)
class Pos:
    line: int
    col: int


@dataclass
class Locator:
    """Key path -> position of the key (``keys``) and of its value (``values``)."""

    keys: dict[Key, Pos] = field(default_factory=dict)
    values: dict[Key, Pos] = field(default_factory=dict)

    def find(self, path: Key, *, prefer_value: bool = False) -> Pos:
        """The position of ``path``, or of its nearest located parent, or 1:1."""
        for n in range(len(path), 0, -1):
            p = path[:n]
            first, second = (
                (self.values, self.keys) if prefer_value and n == len(path) else (self.keys, self.values)
            )
            if p in first:
                return first[p]
            if p in second:
                return second[p]
        return Pos(1, 1)


@dataclass
class Source:
    path: str
    fmt: str
    text: str
    data: dict[str, Any]
    locator: Locator


def format_of(path: str | Path) -> str:
    suffix = Path(path).suffix.lower()
    if suffix in (".yaml", ".yml"):
        return "yaml"
    if suffix == ".json":
        return "json"
    return "toml"


def read_source(path: str | Path) -> Source:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RecipeError([Issue(str(p), 1, 1, "", "no such file", hint="check the path")]) from None
    except IsADirectoryError:
        hint = f"give its recipe file: {p / 'recipe.toml'}" if (p / "recipe.toml").is_file() else ""
        raise RecipeError([Issue(str(p), 1, 1, "", "a folder, not a recipe file", hint=hint)]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RecipeError([Issue(str(p), 1, 1, "", f"cannot read: {exc}")]) from None
    return read_text(text, str(p), format_of(p))


def read_text(text: str, name: str, fmt: str) -> Source:
    readers = {"toml": _read_toml, "yaml": _read_yaml, "json": _read_json}
    data, loc = readers[fmt](text, name)
    if not isinstance(data, dict):
        raise RecipeError(
            [Issue(name, 1, 1, "", "a recipe is a table of keys", hint='start with: engine = "vllm"')]
        )
    return Source(name, fmt, text, data, loc)


# ---------------------------------------------------------------------------------------------
# TOML


_TOML_ERR_POS = re.compile(r"\(at line (\d+), column (\d+)\)")
_TOML_ERR_EOF = re.compile(r"\(at end of document\)")


def _read_toml(text: str, name: str) -> tuple[Any, Locator]:
    import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = _TOML_ERR_POS.search(msg)
        line, col = (int(m.group(1)), int(m.group(2))) if m else (text.count("\n") + 1, 1)
        clean = _TOML_ERR_POS.sub("", _TOML_ERR_EOF.sub("", msg)).strip()
        raise RecipeError(
            [Issue(name, line, col, "", f"invalid TOML: {clean}", hint=_toml_hint(clean), code="syntax")]
        ) from None
    try:
        loc = TomlScanner(text).scan()
    except (IndexError, ValueError):  # tomllib accepted the text: locate by lines instead of 1:1
        loc = line_locator(text)
    return data, loc


_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?")
_KEYLINE = re.compile(r"^\s*([A-Za-z0-9_\-.\"' ]+?)\s*=")


def _dotted(raw: str) -> list[str]:
    return [part.strip().strip("\"'") for part in raw.split(".")]


def line_locator(text: str) -> Locator:
    """A coarse locator from table headers and ``key =`` lines (no inline tables or arrays inside a
    value): the fallback when the full scanner cannot follow the text, so errors still point at
    the key's line, or at its table's header, rather than at 1:1."""
    loc, seen = Locator(), dict[Key, int]()
    table: Key = ()
    for no, line in enumerate(text.splitlines(), start=1):
        if m := _HEADER.match(line):
            table = tuple(_dotted(m.group(2)))
            if m.group(1) == "[[":
                seen[table] = seen.get(table, -1) + 1
                loc.keys.setdefault(table, Pos(no, 1))
                table = (*table, seen[table])
            loc.keys.setdefault(table, Pos(no, 1))
        elif (m := _KEYLINE.match(line)) and not line.lstrip().startswith("#"):
            path = (*table, *_dotted(m.group(1)))
            loc.keys.setdefault(path, Pos(no, m.start(1) + 1))
            value_col = len(line) - len(line[m.end() :].lstrip()) + 1
            loc.values.setdefault(path, Pos(no, value_col))
    return loc


def _toml_hint(msg: str) -> str:
    low = msg.lower()
    if "duplicate" in low or "overwrite" in low or "cannot declare" in low:
        return "each key may appear once per table"
    if "invalid value" in low or "invalid statement" in low:
        return 'strings need quotes: key = "value"'
    if "unclosed" in low or "end of document" in low:
        return "close the string, array or table that starts here"
    return "see https://toml.io for the syntax"


_BARE = re.compile(r"[A-Za-z0-9_-]+")
_WS = " \t"


class TomlScanner:
    """Records the position of every key and value in a TOML text that tomllib accepted."""

    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.loc = Locator()
        self.aot: dict[Key, int] = {}  # arrays of tables -> current index
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def pos(self, i: int | None = None) -> Pos:
        import bisect

        i = self.i if i is None else i
        ln = bisect.bisect_right(self._line_starts, i) - 1
        return Pos(ln + 1, i - self._line_starts[ln] + 1)

    def scan(self) -> Locator:
        table: Key = ()
        n = len(self.s)
        while True:
            self._skip_ws_comments_newlines()
            if self.i >= n:
                return self.loc
            if self.s.startswith("[[", self.i):
                table = self._header(2)
            elif self.s[self.i] == "[":
                table = self._header(1)
            else:
                self._keyval(table)

    # -- lexing helpers ----------------------------------------------------------------------
    def _skip_ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i] in _WS:
            self.i += 1

    def _skip_comment(self) -> None:
        if self.i < len(self.s) and self.s[self.i] == "#":
            j = self.s.find("\n", self.i)
            self.i = len(self.s) if j < 0 else j

    def _skip_ws_comments_newlines(self) -> None:
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in " \t\r\n":
                self.i += 1
            elif c == "#":
                self._skip_comment()
            else:
                return

    def _key(self) -> tuple[list[str], list[Pos]]:
        parts: list[str] = []
        poss: list[Pos] = []
        while True:
            self._skip_ws()
            poss.append(self.pos())
            c = self.s[self.i]
            if c in "\"'":
                parts.append(self._string_value())
            else:
                m = _BARE.match(self.s, self.i)
                if not m:
                    raise ValueError("bad key")
                parts.append(m.group(0))
                self.i = m.end()
            self._skip_ws()
            if self.i < len(self.s) and self.s[self.i] == ".":
                self.i += 1
                continue
            return parts, poss

    def _resolve(self, parts: list[str]) -> Key:
        """Insert the current index of every array of tables along the path."""
        out: list[str | int] = []
        for p in parts:
            out.append(p)
            if tuple(out) in self.aot:
                out.append(self.aot[tuple(out)])
        return tuple(out)

    def _header(self, width: int) -> Key:
        start = self.pos()
        self.i += width
        parts, _ = self._key()
        self.i += width  # closing brackets
        if width == 2:
            base = (*self._resolve(parts[:-1]), parts[-1])
            self.aot[base] = self.aot.get(base, -1) + 1
            path: Key = (*base, self.aot[base])
            self.loc.keys.setdefault(base, start)
        else:
            path = self._resolve(parts)
        self.loc.keys[path] = start
        return path

    def _keyval(self, table: Key) -> None:
        parts, poss = self._key()
        for n in range(1, len(parts) + 1):
            self.loc.keys.setdefault(table + tuple(parts[:n]), poss[n - 1])
        self.i += 1  # '='
        self._skip_ws()
        self._value(table + tuple(parts))

    # -- values ------------------------------------------------------------------------------
    def _value(self, path: Key) -> None:
        self.loc.values[path] = self.pos()
        c = self.s[self.i]
        if c in "\"'":
            self._string_value()
        elif c == "[":
            self._array(path)
        elif c == "{":
            self._inline_table(path)
        else:
            m = re.compile(r"[^,\]\}\n#]*").match(self.s, self.i)
            self.i = m.end() if m else self.i + 1

    def _string_value(self) -> str:
        s, i = self.s, self.i
        for q in ('"""', "'''"):
            if s.startswith(q, i):
                j = i + 3
                while True:
                    k = s.find(q, j)
                    if q == '"""' and k > 0 and _escaped(s, k):
                        j = k + 1
                        continue
                    break
                while s.startswith(q[0], k + 3):  # up to two quotes may end the body
                    k += 1
                self.i = k + 3
                return s[i + 3 : k]
        q = s[i]
        j = i + 1
        while s[j] != q or (q == '"' and _escaped(s, j)):
            j += 1
        self.i = j + 1
        raw = s[i + 1 : j]
        if q == '"' and "\\" in raw:
            try:
                return str(json.loads('"' + raw + '"'))
            except ValueError:
                return raw
        return raw

    def _array(self, path: Key) -> None:
        self.i += 1
        idx = 0
        while True:
            self._skip_ws_comments_newlines()
            if self.s[self.i] == "]":
                self.i += 1
                return
            self._value((*path, idx))
            idx += 1
            self._skip_ws_comments_newlines()
            if self.s[self.i] == ",":
                self.i += 1

    def _inline_table(self, path: Key) -> None:
        self.i += 1
        while True:
            self._skip_ws()
            if self.s[self.i] == "}":
                self.i += 1
                return
            self._keyval(path)
            self._skip_ws()
            if self.s[self.i] == ",":
                self.i += 1


def _escaped(s: str, k: int) -> bool:
    n = 0
    while k - 1 - n >= 0 and s[k - 1 - n] == "\\":
        n += 1
    return n % 2 == 1


# ---------------------------------------------------------------------------------------------
# YAML and JSON


def _read_yaml(text: str, name: str) -> tuple[Any, Locator]:
    import yaml

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        raise RecipeError(
            [
                Issue(
                    name,
                    line,
                    col,
                    "",
                    f"invalid YAML: {exc.problem}",
                    hint="check indentation and quotes",
                    code="syntax",
                )
            ]
        ) from None
    except yaml.YAMLError as exc:
        raise RecipeError([Issue(name, 1, 1, "", f"invalid YAML: {exc}", code="syntax")]) from None
    loc = Locator()
    if node is not None:
        _walk_yaml(node, (), loc)
    return data if data is not None else {}, loc


def _walk_yaml(node: Any, path: Key, loc: Locator) -> None:
    import yaml

    loc.values[path] = Pos(node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            key: Key = (*path, str(k.value))
            loc.keys[key] = Pos(k.start_mark.line + 1, k.start_mark.column + 1)
            _walk_yaml(v, key, loc)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            loc.keys[(*path, i)] = Pos(v.start_mark.line + 1, v.start_mark.column + 1)
            _walk_yaml(v, (*path, i), loc)


def _read_json(text: str, name: str) -> tuple[Any, Locator]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecipeError(
            [
                Issue(
                    name,
                    exc.lineno,
                    exc.colno,
                    "",
                    f"invalid JSON: {exc.msg}",
                    hint="check commas and quotes",
                    code="syntax",
                )
            ]
        ) from None
    try:
        _, loc = _read_yaml(text, name)
    except RecipeError:  # valid JSON that YAML cannot read (rare): positions fall back to 1:1
        loc = Locator()
    return data, loc
