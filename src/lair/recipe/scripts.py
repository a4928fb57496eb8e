"""The hook script library: named scripts a recipe's ``before_serve`` / ``after_stop`` can call.

Lookup order: the user's folder (``<config>/scripts``), then lair's built-in folder. A script is
found by name with or without its extension (``unlock_display_ram`` -> ``unlock_display_ram.sh``).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["builtin_dir", "find_script", "library_dirs", "list_scripts"]


def builtin_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "scripts"


def library_dirs() -> list[Path]:
    from lair import config

    return [config.user_scripts_dir(), builtin_dir()]


def find_script(name: str) -> Path | None:
    for d in library_dirs():
        for cand in (d / name, *sorted(d.glob(name + ".*"))):
            if cand.is_file() and cand.name != "README.md":
                return cand
    return None


def list_scripts() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for d in reversed(library_dirs()):
        if d.is_dir():
            for f in sorted(d.iterdir()):
                if f.is_file() and f.name != "README.md":
                    out[f.stem] = f
    return out
