"""What lair keeps beside a Hugging Face cache entry: the weight files' headers read over HTTP.

huggingface_hub caches whole files (``config.json``, the safetensors index) in
``models--ORG--NAME/snapshots/<commit>/``; the headers of the weight files are byte ranges, not files,
so lair keeps them beside, per commit, in a folder of its own inside the same entry::

    models--ORG--NAME/lair/<commit>/safetensors-headers.json   {file: {tensor: {dtype, data_offsets}}}
    models--ORG--NAME/lair/<commit>/<file>.gguf.header         the GGUF's first bytes: metadata + tensor infos
    models--ORG--NAME/lair/<commit>/<file>.gguf.json           {"size": bytes of the whole file}
    models--ORG--NAME/lair/refs/<revision>                     the commit a revision named when last read

Deleting the entry (``hf cache delete``) deletes them with it. Disk only: no network here.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = [
    "entry_of_snapshot",
    "load_gguf_header",
    "load_ref",
    "load_safetensors_headers",
    "repo_entry",
    "save_gguf_header",
    "save_ref",
    "save_safetensors_headers",
]

_FOLDER = "lair"
_ST_FILE = "safetensors-headers.json"


def repo_entry(hub_cache: Path, repo_id: str) -> Path:
    """``hub_cache/models--ORG--NAME``."""
    return hub_cache / ("models--" + repo_id.replace("/", "--"))


def entry_of_snapshot(folder: Path) -> tuple[Path, str] | None:
    """(cache entry, commit) of a ``models--ORG--NAME/snapshots/<commit>`` folder, else None."""
    if folder.parent.name != "snapshots" or not folder.parent.parent.name.startswith("models--"):
        return None
    return folder.parent.parent, folder.name


def _write(path: Path, data: bytes) -> None:
    """Write atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def save_safetensors_headers(entry: Path, commit: str, headers: dict[str, dict[str, Any]]) -> None:
    _write(entry / _FOLDER / commit / _ST_FILE, json.dumps(headers, separators=(",", ":")).encode())


def load_safetensors_headers(entry: Path, commit: str) -> dict[str, dict[str, Any]] | None:
    path = entry / _FOLDER / commit / _ST_FILE
    if not path.is_file():
        return None
    headers: dict[str, dict[str, Any]] = json.loads(path.read_text())
    return headers


def save_gguf_header(entry: Path, commit: str, filename: str, data: bytes, size: int) -> None:
    base = entry / _FOLDER / commit / filename
    _write(base.with_name(base.name + ".json"), json.dumps({"size": size}).encode())
    _write(base.with_name(base.name + ".header"), data)


def load_gguf_header(entry: Path, commit: str, filename: str) -> tuple[bytes, int] | None:
    """(the header bytes, the whole file's size), or None when not cached."""
    base = entry / _FOLDER / commit / filename
    meta, data = base.with_name(base.name + ".json"), base.with_name(base.name + ".header")
    if not (meta.is_file() and data.is_file()):
        return None
    return data.read_bytes(), int(json.loads(meta.read_text())["size"])


def save_ref(entry: Path, revision: str, commit: str) -> None:
    _write(entry / _FOLDER / "refs" / revision, commit.encode())


def load_ref(entry: Path, revision: str) -> str | None:
    """The commit ``revision`` named when lair last read it, else huggingface_hub's own ``refs/``."""
    for path in (entry / _FOLDER / "refs" / revision, entry / "refs" / revision):
        if path.is_file():
            return path.read_text().strip()
    return None
