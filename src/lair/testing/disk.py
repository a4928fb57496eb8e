"""A real full disk for tests: a tmpfs of a few KiB mounted on a folder, unmounted on exit.

    with tiny_tmpfs(tmp_path / "disk", "64k") as where:
        FileBlobStore(where).put("k", b"x" * 100_000)   # OSError ENOSPC, as on a full volume

Mounting needs root (``mount -t tmpfs``); anyone else gets a RuntimeError that says so.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["remount", "tiny_tmpfs"]


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")


@contextmanager
def tiny_tmpfs(where: Path, size: str = "64k") -> Iterator[Path]:
    """A tmpfs of ``size`` (``mount -o size=``) on ``where`` (created), unmounted afterwards."""
    if os.geteuid() != 0:
        raise RuntimeError("mounting a tmpfs needs root")
    where.mkdir(parents=True, exist_ok=True)
    _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where))
    try:
        yield where
    finally:
        _run("umount", "-l", str(where))


def remount(where: Path, size: str) -> None:
    """Give the tmpfs on ``where`` a new size (the space freed, or taken)."""
    _run("mount", "-o", f"remount,size={size}", str(where))
