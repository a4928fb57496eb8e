"""The reports this machine submitted, per registry: ``<state>/submitted.json``.

    record(url, report_id)        after a registry stored one of this machine's reports
    submitted(url) -> set[str]    the report ids this machine submitted to that registry

``lair rebench`` decides "this rig measured it" from this list, never from a row's public rig hash:
anyone can copy that hash into a forged report, which would then make a victim's rebench skip a
recipe ("measured here since") or pick the forger's report as "this rig's newest".
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from lair import config

__all__ = ["record", "submitted"]

_MAX_IDS = 10_000
"""Ids kept per registry (the oldest go first): rebench needs only the recent ones."""


def _path() -> Path:
    return config.state_dir() / "submitted.json"


def _load() -> dict[str, list[str]]:
    try:
        data = json.loads(_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return (
        {str(k): [str(i) for i in v] for k, v in data.items() if isinstance(v, list)}
        if isinstance(data, dict)
        else {}
    )


def record(url: str, report_id: str) -> None:
    """Add ``report_id`` to this machine's submissions to ``url`` (written whole, then renamed)."""
    data = _load()
    ids = [i for i in data.get(url.rstrip("/"), []) if i != report_id] + [report_id]
    data[url.rstrip("/")] = ids[-_MAX_IDS:]
    path = _path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)


def submitted(url: str) -> set[str]:
    """The report ids this machine submitted to ``url``."""
    return set(_load().get(url.rstrip("/"), []))
