"""Paths the registry tests share."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
SEED_000 = EXAMPLES / "dsv41-1017-engram-ssd" / "recipe.toml"
SEED_003 = EXAMPLES / "dsv41-flash-exl3-2x" / "recipe.toml"
TINY = EXAMPLES / "tiny-cpu" / "recipe.toml"
LLAMA = ROOT / "tests" / "data" / "registry" / "llama31-8b.toml"
