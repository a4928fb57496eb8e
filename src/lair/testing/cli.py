"""The real ``lair`` command in a child process, as a user runs it (the tests' one way to call it).

    res = lair("tune", "recipe.toml", "--param=--threads=1,2", "--json", timeout=600)
    assert res.returncode == 0, res.stderr

The child is this interpreter's ``python -m lair`` with this environment plus ``env``, stdin closed
(a prompt fails instead of waiting), stdout and stderr captured as text.
"""

from __future__ import annotations

import os
import subprocess
import sys

__all__ = ["lair"]


def lair(
    *args: str, timeout: float = 180, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``lair ARGS...``; raise :class:`subprocess.TimeoutExpired` after ``timeout`` seconds."""
    return subprocess.run(
        [sys.executable, "-m", "lair", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
