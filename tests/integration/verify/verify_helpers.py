"""Helpers of the report-verification tests: the real ``lair`` command and a byte-for-byte copy of
the tiny-cpu example."""

from __future__ import annotations

import shutil
from pathlib import Path

from lair.testing.cli import lair

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "examples" / "tiny-cpu" / "recipe.toml"
BENCH = ["--bench", "--bench-contexts", "256", "--bench-decode-tokens", "128", "--bench-repeat", "2"]
__all__ = ["BENCH", "ROOT", "TINY", "lair", "tiny_copy"]


def tiny_copy(where: Path) -> Path:
    """The example, byte for byte, in a folder of its own (its report goes beside it)."""
    recipe = where / "tiny-cpu" / "recipe.toml"
    recipe.parent.mkdir(parents=True)
    shutil.copyfile(TINY, recipe)
    return recipe
