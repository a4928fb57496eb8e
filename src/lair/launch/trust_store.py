"""Where untrusted recipes come from and what their users accepted.

A recipe is untrusted when it was given as an ``http(s)://`` URL, or when it is a local file that
came from elsewhere. Provenance travels three ways, each enough on its own (:func:`provenance`):

- in the file: a ``[meta.source]`` stamp (:class:`~lair.recipe.model.SourceStamp`: the URL, or
  the registry, slug and revision, and the sha256 of the recipe as pulled), written by ``lair pull``
  and into fetched URLs (:func:`stamp_source`). It stays through copies and edits; only deleting it,
  the user's own deliberate act on a local file, makes the file the user's own (docs/launch.md);
- a sidecar ``<file>.lair-origin.json`` (``{"origin": ..., "sha256": ..., "marked_at": ...}``),
  which stays when the file is edited in place; and
- ``<state>/provenance.json``, keyed by the file's sha256 (content), so that a byte-for-byte copy
  elsewhere is untrusted too (:func:`mark_untrusted`).

A URL is fetched into ``<state>/fetched/`` (with its marker and, for TOML, its stamp).

``--accept`` (or "y" at the prompt) records an :class:`~lair.plan.Acceptance` of exactly what the
recipe asks for, from exactly that source, under
``<state>/trust/by-source/<sha256(source)>/<fingerprint>.json``: an acceptance of one source never
satisfies another. The latest acceptance of a source's line (the source, a registry revision
without its ``@N``) is kept under ``<state>/trust/sources/``: a changed recipe (or a new revision)
asks again, and the prompt shows what changed since then.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lair.errors import ConfigError, RecipeError

if TYPE_CHECKING:
    from lair.plan import Acceptance
    from lair.recipe import Recipe
    from lair.recipe.model import SourceStamp

__all__ = [
    "acceptance_for",
    "fetch",
    "lineage",
    "mark_untrusted",
    "previous_acceptance",
    "provenance",
    "read_stamp",
    "stamp_pulled",
    "stamp_source",
    "trust_dir",
]

MAX_BYTES = 1 << 20
SIDECAR = ".lair-origin.json"
_STAMP_INVALID = "an unreadable [meta.source] stamp"


def trust_dir() -> Path:
    from lair import config

    return config.state_dir() / "trust"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")


def _write_json(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def _provenance_index() -> Path:
    from lair import config

    return config.state_dir() / "provenance.json"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _model_digest(path: Path) -> str | None:
    """sha256 of the file's canonical model (its stamp left out), or None when it does not load."""
    from lair.recipe import load_recipe
    from lair.recipe.digest import model_sha256

    try:
        return model_sha256(load_recipe(path))
    except RecipeError:
        return None


# ---------------------------------------------------------------------------------------------
# the [meta.source] stamp


def read_stamp(path: Path) -> SourceStamp | str | None:
    """The file's ``[meta.source]`` stamp; a string when it has one that does not validate (still
    untrusted: the recipe's own check then reports where); None when it has none."""
    from pydantic import ValidationError

    from lair.recipe.model import SourceStamp
    from lair.recipe.source import read_source

    try:
        data = read_source(path).data
    except RecipeError:
        return None  # no recipe to run: loading it reports why
    meta = data.get("meta")
    if not isinstance(meta, dict) or "source" not in meta:
        return None
    try:
        return SourceStamp.model_validate(meta["source"])
    except ValidationError:
        return _STAMP_INVALID


def _stamp_toml(text: str, fields: dict[str, Any]) -> str:
    import tomlkit
    from tomlkit.items import InlineTable

    doc = tomlkit.parse(text)
    if "meta" not in doc:
        doc["meta"] = tomlkit.table(is_super_table=True)
    meta: Any = doc["meta"]
    if "source" in meta:
        del meta["source"]
    table = tomlkit.inline_table() if isinstance(meta, InlineTable) else tomlkit.table()
    table.update(fields)
    meta["source"] = table
    return tomlkit.dumps(doc)


def stamp_source(path: Path, stamp: SourceStamp) -> None:
    """Write (or replace) the ``[meta.source]`` stamp of a recipe file (TOML keeps its layout)."""
    from lair.recipe.source import format_of, read_source

    fields = stamp.model_dump(exclude_none=True)
    fmt = format_of(path)
    if fmt == "toml":
        text = _stamp_toml(path.read_text(encoding="utf-8"), fields)
    else:
        data = read_source(path).data
        meta = data.setdefault("meta", {})
        meta["source"] = fields
        if fmt == "json":
            text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
        else:
            import yaml

            text = str(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


# ---------------------------------------------------------------------------------------------
# markers and provenance


def mark_untrusted(path: Path, origin: str) -> None:
    """Mark a recipe file as coming from ``origin`` (a URL, a registry revision): lair treats it as
    untrusted, edited in place (sidecar) or copied (by content)."""
    digest = _sha256(path)
    marker = {"origin": origin, "sha256": digest, "marked_at": _now()}
    _write_json(path.with_name(path.name + SIDECAR), marker)
    index = _provenance_index()
    known = json.loads(index.read_text(encoding="utf-8")) if index.exists() else {}
    known[digest] = {"origin": origin, "path": str(path.resolve())}
    _write_json(index, known)


def _indexed(path: Path) -> str | None:
    index = _provenance_index()
    if not index.exists():
        return None
    entry = json.loads(index.read_text(encoding="utf-8")).get(_sha256(path))
    return str(entry["origin"]) if entry else None


def provenance(path: Path) -> str | None:
    """The origin of a local recipe file that came from elsewhere, or None for the user's own file:
    its ``[meta.source]`` stamp first, then its sidecar, then the content index."""
    if not path.is_file():
        return None
    stamp = read_stamp(path)
    if stamp is not None:
        return stamp if isinstance(stamp, str) else stamp.origin
    side = path.with_name(path.name + SIDECAR)
    if side.exists():
        return str(json.loads(side.read_text(encoding="utf-8"))["origin"])
    return _indexed(path)


def stamp_pulled(path: Path, *, registry: str, slug: str, revision: int, sha256: str) -> str:
    """``lair pull``'s provenance: the file's ``[meta.source]`` stamp and its markers; returns the
    source its acceptances are bound to (the revision's address on the registry)."""
    from lair.recipe.model import SourceStamp

    stamp = SourceStamp(
        registry=registry.rstrip("/"), slug=slug, revision=revision, sha256=sha256, pulled_at=_now()
    )
    stamp_source(path, stamp)
    mark_untrusted(path, stamp.origin)
    return stamp.origin


def fetch(url: str) -> Path:
    """Download a recipe (at most 1 MiB) under the state dir, named by its content, marked untrusted
    (a TOML recipe also gets the URL's ``[meta.source]`` stamp, over any stamp the file brought)."""
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=30) as resp:  # http(s) only, checked by the caller
            data = resp.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot fetch {url}: {exc}") from None
    if len(data) > MAX_BYTES:
        raise ConfigError(f"{url}: a recipe is at most 1 MiB")
    from lair import config

    suffix = Path(url.split("?", 1)[0]).suffix or ".toml"
    out = config.state_dir() / "fetched" / f"{hashlib.sha256(data).hexdigest()[:16]}{suffix}"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    _stamp_fetched(out, url)
    mark_untrusted(out, url)
    return out


def _stamp_fetched(path: Path, url: str) -> None:
    from lair.recipe.model import SourceStamp
    from lair.recipe.source import format_of

    model = _model_digest(path)
    if model is None or format_of(path) != "toml":
        return  # a recipe that does not load runs nothing; YAML and JSON keep the sidecar and index
    try:
        stamp_source(path, SourceStamp(url=url, sha256=model, pulled_at=_now()))
    except (ValueError, RecipeError):  # a stamp that cannot be written: the markers still hold
        return


# ---------------------------------------------------------------------------------------------
# acceptances


def lineage(source: str) -> str:
    """The line of revisions ``source`` belongs to: a registry revision (``.../recipes/SLUG@N``)
    without its ``@N``; any other source is its own line."""
    return re.sub(r"(/recipes/[^/@]+)@\d+$", r"\1", source)


def _key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _source_file(source: str) -> Path:
    return trust_dir() / "sources" / f"{_key(lineage(source))}.json"


def _acceptance_file(source: str, fp: str) -> Path:
    return trust_dir() / "by-source" / _key(source) / f"{fp}.json"


def previous_acceptance(source: str) -> Acceptance | None:
    """The latest acceptance of a recipe from ``source``'s line (whatever its fingerprint then)."""
    from lair.plan import Acceptance

    p = _source_file(source)
    return Acceptance.model_validate_json(p.read_text(encoding="utf-8")) if p.exists() else None


def acceptance_for(recipe: Recipe, source: str, *, accept: bool) -> Acceptance | None:
    """The stored acceptance of this recipe's requests from this source, or a new one when ``accept``.

    ``recipe`` is the trust view (placeholders resolved, secrets as ``{NAME}``)."""
    from lair.plan import Acceptance, fingerprint, requests

    fp = fingerprint(recipe)
    p = _acceptance_file(source, fp)
    if p.exists():
        found = Acceptance.model_validate_json(p.read_text(encoding="utf-8"))
        if found.source == source and found.fingerprint == fp:
            return found
    if not accept:
        return None
    a = Acceptance(fingerprint=fp, source=source, requests=requests(recipe), accepted_at=_now())
    _write_json(p, a.model_dump())
    _write_json(_source_file(source), a.model_dump())
    return a
