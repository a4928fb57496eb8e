"""What an import from a peer's recipe format gives: the lair recipe's data, the fields that have no
lair meaning (listed, never dropped silently), and the TOML that carries both.

Budgets on every peer file read here: :data:`MAX_FILE_BYTES` per file, :data:`MAX_FILES` per folder;
past them, or on YAML that does not parse to a mapping, an :class:`~lair.errors.InteropError` names
the file.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomlkit
import yaml

from lair.engines.rules import RULES
from lair.errors import InteropError
from lair.recipe import CheckResult, check_text

__all__ = [
    "MAX_FILES",
    "MAX_FILE_BYTES",
    "Imported",
    "Unmapped",
    "read_bytes",
    "read_yaml",
    "yaml_files",
]

MAX_FILE_BYTES = 1 << 20
"""Largest peer recipe file read (1 MiB; the largest published sparkrun or vLLM recipe is ~20 KiB)."""
MAX_FILES = 1000
"""Most recipe files one folder import reads."""


@dataclass(frozen=True)
class Unmapped:
    """A field of the peer's file with no lair meaning: its dotted path, its value, and why."""

    path: str
    value: Any
    why: str

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "value": self.value, "why": self.why}

    def comment(self) -> str:
        value = json.dumps(self.value, ensure_ascii=False, default=str)
        value = value if len(value) <= 120 else value[:117] + "..."
        return f"#   {self.path} = {value}  ({self.why})"


@dataclass
class Imported:
    """One lair recipe made from a peer's file: ``name`` (the file stem to write), ``data`` (the
    recipe's keys), ``unmapped`` (every peer field it does not carry)."""

    name: str
    data: dict[str, Any]
    source: str
    source_format: str
    sha256: str
    unmapped: list[Unmapped] = field(default_factory=list)

    def toml(self) -> str:
        """The recipe as TOML, headed by a comment block naming the source and each unmapped field."""
        head = [f"# imported from {self.source_format} recipe {self.source} (sha256 {self.sha256})"]
        if self.unmapped:
            head.append("# fields with no lair meaning (not imported):")
            head += [u.comment() for u in self.unmapped]
        else:
            head.append("# every field of the source has a lair meaning")
        return "\n".join(head) + "\n" + tomlkit.dumps(self.data)

    def check(self) -> CheckResult:
        """``lair check`` of the TOML this import writes."""
        return check_text(self.toml(), f"{self.name}.toml", "toml", RULES)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "format": self.source_format,
            "sha256": self.sha256,
            "unmapped": [u.as_dict() for u in self.unmapped],
        }


def read_bytes(path: Path) -> bytes:
    """The file's bytes, within :data:`MAX_FILE_BYTES`."""
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise InteropError(str(path), "", f"{size} bytes is over the {MAX_FILE_BYTES}-byte budget")
        return path.read_bytes()
    except OSError as exc:
        raise InteropError(str(path), "", f"cannot read: {exc.strerror or exc}") from exc


def read_yaml(path: Path) -> tuple[dict[str, Any], str]:
    """(the YAML mapping of ``path``, the sha256 of its bytes)."""
    raw = read_bytes(path)
    try:
        data = yaml.safe_load(raw.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise InteropError(str(path), "", f"not YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise InteropError(str(path), "", f"a recipe is a YAML mapping, not {type(data).__name__}")
    return data, hashlib.sha256(raw).hexdigest()


def yaml_files(path: Path) -> Iterator[Path]:
    """``path`` itself, or the ``*.yaml`` / ``*.yml`` files under the folder ``path`` (sorted), at
    most :data:`MAX_FILES`."""
    if not path.is_dir():
        yield path
        return
    files = sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())
    if len(files) > MAX_FILES:
        raise InteropError(str(path), "", f"{len(files)} YAML files is over the budget of {MAX_FILES}")
    yield from files
