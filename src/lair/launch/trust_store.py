"""Where untrusted recipes come from and what their users accepted.

A recipe given as an ``http(s)://`` URL is fetched into ``<state>/fetched/`` and is untrusted.
``--accept`` records an :class:`~lair.plan.Acceptance` of exactly what it asks for (hooks, devices,
mounts, privileged) under ``<state>/trust/<fingerprint>.json``; a changed recipe needs a new one.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from lair.errors import ConfigError

if TYPE_CHECKING:
    from lair.plan import Acceptance
    from lair.recipe import Recipe

__all__ = ["acceptance_for", "fetch", "trust_dir"]

MAX_BYTES = 1 << 20


def trust_dir() -> Path:
    from lair import config

    return config.state_dir() / "trust"


def fetch(url: str) -> Path:
    """Download a recipe (at most 1 MiB) and keep it under the state dir, named by its content."""
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
    return out


def acceptance_for(recipe: Recipe, source: str, *, accept: bool) -> Acceptance | None:
    """The stored acceptance of this recipe's requests, or a new one when ``accept``."""
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
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(a.model_dump(), indent=2) + "\n", encoding="utf-8")
    return a
