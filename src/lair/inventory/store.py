"""Reading and writing the clusters file (comments and layout kept: edits go through tomlkit)."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from lair.errors import ConfigError
from lair.inventory.clusters import Cluster, Inventory, parse_inventory

__all__ = ["add_cluster", "clusters_path", "load_inventory", "remove_cluster"]


def clusters_path() -> Path:
    from lair import config

    return config.clusters_file()


def load_inventory(path: Path | None = None) -> Inventory:
    """The clusters file (an empty inventory when it does not exist yet)."""
    p = path or clusters_path()
    if not p.exists():
        return Inventory()
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: {exc}") from None
    return parse_inventory(data, str(p))


def add_cluster(name: str, cluster: Cluster, *, replace: bool = False, path: Path | None = None) -> Cluster:
    """Write ``cluster`` as ``[clusters.NAME]``; an existing one is an error unless ``replace``."""
    import tomlkit

    p = path or clusters_path()
    doc = tomlkit.parse(p.read_text(encoding="utf-8")) if p.exists() else tomlkit.document()
    clusters = doc.setdefault("clusters", tomlkit.table(is_super_table=True))
    if name in clusters and not replace:
        raise ConfigError(f"cluster {name!r} exists already ({p})", hint="use --replace to overwrite it")
    clusters[name] = _to_toml(cluster)
    _write_checked(p, tomlkit.dumps(doc))
    return load_inventory(p).get(name)


def remove_cluster(name: str, *, path: Path | None = None) -> None:
    import tomlkit

    p = path or clusters_path()
    doc = tomlkit.parse(p.read_text(encoding="utf-8")) if p.exists() else tomlkit.document()
    clusters: Any = doc.get("clusters", {})
    if name not in clusters:
        raise ConfigError(f"no cluster named {name!r} ({p})")
    del clusters[name]
    _write_checked(p, tomlkit.dumps(doc))


def _to_toml(cluster: Cluster) -> Any:
    import tomlkit

    data = cluster.model_dump(exclude_none=True, exclude_defaults=True, exclude={"nodes"})
    table = tomlkit.table()
    for k, v in data.items():
        table[k] = v
    nodes = tomlkit.aot()
    for n in cluster.nodes:
        nodes.append(tomlkit.item(n.model_dump(exclude_none=True, exclude_defaults=True)))
    table["nodes"] = nodes
    return table


def _write_checked(p: Path, text: str) -> None:
    """Validate the new text, then replace the file atomically."""
    parse_inventory(tomllib.loads(text), str(p))
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(p)
