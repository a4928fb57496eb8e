"""Keep secrets out of what the registry stores and serves: recipes, free text and run reports.

Known token formats, URL passwords and the values of secret-named flags (``--api-key V``) are found
by :mod:`lair.redaction`, the one scanner lair has: detect-secrets' regex plugins plus the formats
they lack (Hugging Face, Google ``AIza``, bare ``sk-`` keys, lair's API tokens...). The same
function redacts uploaded logs here and ``lair doctor --bundle``'s members. Keyword and entropy
plugins are left out of recipes: they hold digests and ``API_KEY = "{API_KEY}"`` placeholders that
those would flag.

Recipes (:func:`scan_recipe`) are scanned three ways, and refused (422 ``secret``) on any finding:

- the raw text, as written (``recipe.toml:LINE:COL``);
- every key and string value of the parsed tree, so a token hidden by a TOML escape
  (``"\\u0067hp_..."``) or split by a line continuation in a multi-line string is found as the
  canonical TOML, the page and the ``.toml`` export would show it (located by its field path and
  the line and column of its value);
- placeholder defaults: a placeholder with a plain default that stands for a secret (an env var
  named like one, or the value of a secret flag: ``--api-key``, ``--auth``, ``--key``...,
  :func:`lair.redaction.is_secret_flag`) is a secret in plain text, whatever its format.

Run reports (:func:`screen_report`) are screened before anything is stored, file by file:

- **engine logs (``logs/*.log``) are redacted in place**: each token becomes
  ``[REDACTED:<kind>]``. A log is megabytes of engine output the user did not write and cannot
  easily scrub, it is not covered by the timings digest, and with the token gone it is still useful;
  in logs lair also redacts ``Bearer <credential>`` and ``<NAME>_TOKEN=<value>``-style assignments
  of any format. Logs are redacted again when served (reports stored before a format was known).
- **every other file is refused** (results.json, requests.jsonl, fingerprint.json,
  eval_samples.jsonl, report.md, the recipe as run), naming the file, line, column and kind: the
  timings digest and the re-scored evaluation are computed over these files, so the registry may not
  edit them, and they are small documents the user can fix and upload again. JSON escapes are
  resolved as TOML escapes are.

A finding names the field, line, column and token kind, never the secret itself.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from lair.errors import Invalid, Issue, RecipeError
from lair.recipe import is_secret_name
from lair.recipe.placeholders import find_refs
from lair.recipe.source import Key, Locator, read_text
from lair.redaction import LOG_RULES, RULES, hits, is_secret_flag
from lair.redaction import redact as redact_with

__all__ = [
    "redact",
    "redact_log",
    "refuse_issues",
    "refuse_secrets",
    "scan",
    "scan_recipe",
    "screen_report",
]

HINT = 'use a secret placeholder: {API_KEY} with [placeholders.API_KEY] type = "secret"'


class _Lines:
    """Offsets -> 1-based (line, column), lines split on ``\\n`` as TOML and JSON Lines count them."""

    def __init__(self, text: str) -> None:
        self.starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def at(self, offset: int) -> tuple[int, int]:
        n = bisect.bisect_right(self.starts, offset) - 1
        return n + 1, offset - self.starts[n] + 1


def _issue(file: str, line: int, col: int, path: str, kind: str, how: str = "") -> Issue:
    return Issue(file, line, col, path, f"a {kind} is written here{how}", hint=HINT, code="secret")


def scan(text: str, field: str) -> list[Issue]:
    """Every known token format in the raw ``text``, located as ``field:line:col``."""
    found = hits(text)
    if not found:
        return []
    lines = _Lines(text)
    located = {(*lines.at(h.at), h.kind) for h in found}
    return [_issue(field, n, col, field, kind) for n, col, kind in sorted(located)]


def redact(text: str) -> str:
    """``text`` with every known token replaced, for a form shown again after a refusal."""
    return redact_with(text, RULES, lambda _: "[secret removed]")


def redact_log(data: bytes) -> bytes:
    """A log's bytes with every token (and log-only credential) replaced by ``[REDACTED:<kind>]``
    (:func:`lair.redaction.redact`, as ``lair doctor --bundle`` redacts); bytes that are not UTF-8
    pass through unchanged."""
    text = data.decode("utf-8", "surrogateescape")
    out = redact_with(text, LOG_RULES)
    return data if out is text else out.encode("utf-8", "surrogateescape")


# ---------------------------------------------------------------------------------------------
# parsed documents: every key and string value, as the reader sees it once escapes are resolved


def _strings(data: Any) -> Iterator[tuple[Key, bool, str]]:
    """(key path, is it the key itself, text) of every key and string in a parsed document,
    depth-first without recursion (a deeply nested document cannot overflow the stack)."""
    stack: list[tuple[Key, Any]] = [((), data)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, str):
            yield path, False, node
        elif isinstance(node, dict):
            for k, v in reversed(list(node.items())):
                yield (*path, str(k)), True, str(k)
                stack.append(((*path, str(k)), v))
        elif isinstance(node, list):
            stack += [((*path, i), v) for i, v in reversed(list(enumerate(node)))]


def dotted(path: Key) -> str:
    """``path`` as ``a.b[2].c``, any token in a key replaced (a key may be the secret itself)."""
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (("." if out else "") + redact(p))
    return out


def _escaped(
    data: Any, raw: str, where: Callable[[Key, bool], tuple[int, int]], name: str, fmt: str
) -> list[Issue]:
    """Tokens in the parsed tree that the raw text does not show as written (escapes, continuations)."""
    issues = []
    for path, is_key, s in _strings(data):
        for h in hits(s):
            if h.token in raw:  # written out: the raw scan located it
                continue
            line, col = where(path, is_key)
            how = f" once its {fmt} escapes and line continuations are read"
            issues.append(_issue(name, line, col, dotted(path), h.kind, how))
    return issues


def _locate(locator: Locator) -> Callable[[Key, bool], tuple[int, int]]:
    def where(path: Key, is_key: bool) -> tuple[int, int]:
        pos = locator.find(path, prefer_value=not is_key)
        return pos.line, pos.col

    return where


def _uses(data: dict[str, Any]) -> dict[str, str]:
    """Placeholder name -> the launch field where it stands for a secret."""
    out: dict[str, str] = {}
    env = data.get("env")
    for k, v in env.items() if isinstance(env, dict) else ():
        if is_secret_name(str(k)) and isinstance(v, str):
            for ref in find_refs(v):
                out.setdefault(ref, dotted(("env", str(k))))
    for name in ("args", "entrypoint"):
        items = data.get(name)
        items = [a for a in items if isinstance(a, str)] if isinstance(items, list) else []
        for i, a in enumerate(items):
            after = i > 0 and "=" not in items[i - 1] and is_secret_flag(items[i - 1])
            if after or (a.startswith("--") and "=" in a and is_secret_flag(a)):
                for ref in find_refs(a):
                    out.setdefault(ref, f"{name}[{i}]")
    return out


def _defaults(data: dict[str, Any], locator: Locator, name: str) -> list[Issue]:
    """A non-secret placeholder whose plain default is what a secret field receives."""
    declared = data.get("placeholders")
    if not isinstance(declared, dict):
        return []
    issues = []
    for ph, where in sorted(_uses(data).items()):
        decl = declared.get(ph)
        if not isinstance(decl, dict) or decl.get("default") in (None, "") or decl.get("type") == "secret":
            continue
        path: Key = ("placeholders", ph, "default")
        pos = locator.find(path, prefer_value=True)
        message = f"{where} is a secret, and this default fills it in plain text"
        hint = f'declare [{dotted(path[:2])}] type = "secret" with no default; its value comes from the rig'
        issues.append(Issue(name, pos.line, pos.col, dotted(path), message, hint=hint, code="secret"))
    return issues


def _parsed(text: str, name: str, fmt: str, taken: set[int]) -> list[Issue]:
    """What only the parsed recipe shows (escapes, continuations, placeholder defaults); a default
    on a line ``taken`` by a token finding is not named twice."""
    try:
        src = read_text(text, name, fmt)
    except RecipeError:  # not a recipe: the raw scan is all there is (the parser refuses it anyway)
        return []
    issues = _escaped(src.data, text, _locate(src.locator), name, fmt.upper())
    taken = taken | {i.line for i in issues}
    return issues + [i for i in _defaults(src.data, src.locator, name) if i.line not in taken]


def scan_recipe(text: str, name: str = "recipe.toml", fmt: str = "toml") -> list[Issue]:
    """Every token in a recipe: in its raw text, in its parsed keys and values (escapes and
    continuations resolved), and placeholder defaults that fill a secret field."""
    issues = scan(text, name)
    return issues + _parsed(text, name, fmt, {i.line for i in issues})


def _where(i: Issue) -> str:
    return f"{i.file}:{i.line}:{i.col}: " + (f"{i.path}: " if i.path != i.file else "") + i.message


def refuse_issues(issues: list[Issue], what: str = "a secret was found") -> None:
    """Raise 422 ``secret`` naming each field and line of ``issues`` (if any)."""
    if not issues:
        return
    where = "; ".join(_where(i) for i in issues)
    raise Invalid(f"{what}: {where}", code="secret", hint=HINT, errors=issues)


def refuse_secrets(**fields: str) -> None:
    """Raise 422 ``secret`` naming each field and line that holds a token."""
    refuse_issues([i for name, text in fields.items() for i in scan(text, name)])


# ---------------------------------------------------------------------------------------------
# run reports


def _at(line: int) -> Callable[[Key, bool], tuple[int, int]]:
    return lambda _path, _is_key: (line, 1)


def _json_lines(name: str, text: str) -> list[Issue]:
    issues = []
    for n, line in enumerate(text.split("\n"), 1):
        if "\\" not in line:  # no escape: the raw scan saw it all
            continue
        try:
            doc = json.loads(line)
        except (ValueError, RecursionError):  # the report checks refuse it
            continue
        issues += _escaped(doc, line, _at(n), name, "JSON")
    return issues


LOCATE_MAX = 256 << 10
"""Largest JSON document located key by key (PyYAML's marks); a larger one names the field path."""


def _json(name: str, text: str) -> list[Issue]:
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return []
    where = _at(1)
    if len(text) <= LOCATE_MAX and any(hits(s) for _, _, s in _strings(doc)):
        try:
            where = _locate(read_text(text, name, "json").locator)
        except (RecipeError, RecursionError):
            pass
    return _escaped(doc, text, where, name, "JSON")


def _document(name: str, data: bytes) -> list[Issue]:
    """The findings in one report file that is kept as it was uploaded."""
    text = data.decode("utf-8", "replace")
    issues = scan(text, name)
    if name.endswith(".toml"):
        issues += _parsed(text, name, "toml", {i.line for i in issues})
    elif "\\" in text and name.endswith(".jsonl"):
        issues += _json_lines(name, text)
    elif "\\" in text and name.endswith(".json"):
        issues += _json(name, text)
    return issues


def screen_report(files: Mapping[str, bytes]) -> dict[str, bytes]:
    """The report files to store: logs redacted; a token in any other file refuses the whole report
    (422 ``secret``, every file, line, column and kind in ``reasons``), before anything is stored."""
    out: dict[str, bytes] = {}
    issues: list[Issue] = []
    for name, data in files.items():
        if name.startswith("logs/"):
            out[name] = redact_log(data)
        else:
            issues += _document(name, data)
            out[name] = data
    if issues:
        reasons = [_where(i) for i in issues]
        hint = "remove it and upload again: the registry does not edit the files its checks cover"
        raise Invalid(
            "report refused: " + "; ".join(reasons), code="secret", hint=hint, errors=issues, reasons=reasons
        )
    return out
