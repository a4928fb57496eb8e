"""Where untrusted recipes come from and what their users accepted.

A recipe is untrusted when it was given as an ``http(s)://`` URL, or when it is a local file that
carries a *provenance marker*: lair (``fetch``) and, later, ``lair pull`` write one with
:func:`mark_untrusted`:

- a sidecar ``<file>.lair-origin.json`` (``{"origin": ..., "sha256": ..., "marked_at": ...}``),
  which stays untrusted when the file is edited in place; and
- an entry in ``<state>/provenance.json`` keyed by the file's sha256 (content), so that a
  copy of the file elsewhere is untrusted too.

:func:`provenance` reads both. A URL is fetched into ``<state>/fetched/`` (with its marker).

``--accept`` (or "y" at the prompt) records an :class:`~lair.plan.Acceptance` of exactly what the
recipe asks for under ``<state>/trust/<fingerprint>.json``, and the source's latest acceptance under
``<state>/trust/sources/<sha256(source)>.json``: a changed recipe needs a new acceptance, and the
prompt shows what changed since the last one.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from lair.errors import ConfigError

if TYPE_CHECKING:
    from lair.plan import Acceptance
    from lair.recipe import Recipe

__all__ = [
    "acceptance_for",
    "fetch",
    "mark_untrusted",
    "previous_acceptance",
    "provenance",
    "trust_dir",
]

MAX_BYTES = 1 << 20
SIDECAR = ".lair-origin.json"


def trust_dir() -> Path:
    from lair import config

    return config.state_dir() / "trust"


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


def mark_untrusted(path: Path, origin: str) -> None:
    """Mark a recipe file as coming from ``origin`` (a URL, ``registry:ID``): lair treats it as untrusted."""
    digest = _sha256(path)
    marker = {"origin": origin, "sha256": digest, "marked_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    _write_json(path.with_name(path.name + SIDECAR), marker)
    index = _provenance_index()
    known = json.loads(index.read_text(encoding="utf-8")) if index.exists() else {}
    known[digest] = {"origin": origin, "path": str(path.resolve())}
    _write_json(index, known)


def provenance(path: Path) -> str | None:
    """The origin of a local recipe file that came from elsewhere, or None for the user's own file."""
    side = path.with_name(path.name + SIDECAR)
    if side.exists():
        return str(json.loads(side.read_text(encoding="utf-8"))["origin"])
    index = _provenance_index()
    if not index.exists() or not path.is_file():
        return None
    entry = json.loads(index.read_text(encoding="utf-8")).get(_sha256(path))
    return str(entry["origin"]) if entry else None


def fetch(url: str) -> Path:
    """Download a recipe (at most 1 MiB) under the state dir, named by its content, marked untrusted."""
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
    mark_untrusted(out, url)
    return out


def _source_file(source: str) -> Path:
    return trust_dir() / "sources" / f"{hashlib.sha256(source.encode()).hexdigest()[:32]}.json"


def previous_acceptance(source: str) -> Acceptance | None:
    """The latest acceptance of a recipe from ``source`` (whatever its fingerprint then)."""
    from lair.plan import Acceptance

    p = _source_file(source)
    return Acceptance.model_validate_json(p.read_text(encoding="utf-8")) if p.exists() else None


def acceptance_for(recipe: Recipe, source: str, *, accept: bool) -> Acceptance | None:
    """The stored acceptance of this recipe's requests, or a new one when ``accept``.

    ``recipe`` is the trust view (placeholders resolved, secrets as ``{NAME}``)."""
    from lair.plan import Acceptance, fingerprint, requests

    fp = fingerprint(recipe)
    p = trust_dir() / f"{fp}.json"
    if p.exists():
        return Acceptance.model_validate_json(p.read_text(encoding="utf-8"))
    if not accept:
        return None
    a = Acceptance(
        fingerprint=fp,
        source=source,
        requests=requests(recipe),
        accepted_at=time.strftime("%Y-%m-%dT%H:%M:%S"),
    )
    _write_json(p, a.model_dump())
    _write_json(_source_file(source), a.model_dump())
    return a
