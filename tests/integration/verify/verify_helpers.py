"""Helpers of the report-verification tests: the real ``lair`` command and a byte-for-byte copy of
the tiny-cpu example."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "examples" / "tiny-cpu" / "recipe.toml"
BENCH = ["--bench", "--bench-contexts", "256", "--bench-decode-tokens", "32", "--bench-repeat", "2"]


def lair(
    *args: str, timeout: float = 180, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "lair", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


def tiny_copy(where: Path) -> Path:
    """The example, byte for byte, in a folder of its own (its report goes beside it)."""
    recipe = where / "tiny-cpu" / "recipe.toml"
    recipe.parent.mkdir(parents=True)
    shutil.copyfile(TINY, recipe)
    return recipe
