"""A hardware/software fingerprint of the machine a run happened on.

Every probe is best-effort: a missing tool or file gives ``None``, never an error. GPUs come from
``nvidia-smi`` when it is on PATH; the container image digest from ``docker image inspect`` when an
image is named.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["fingerprint", "sha256_file"]


def _run(argv: list[str], timeout: float = 10.0) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def _gpus() -> dict[str, Any] | None:
    csv = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
    if not csv:
        return None
    rows = [[c.strip() for c in line.split(",")] for line in csv.strip().splitlines() if line.strip()]
    head = _run(["nvidia-smi"]) or ""
    cuda = head.split("CUDA Version:", 1)[1].split()[0] if "CUDA Version:" in head else None
    return {
        "count": len(rows),
        "models": sorted({r[0] for r in rows}),
        "driver": rows[0][1] if rows and len(rows[0]) > 1 else None,
        "memory": [r[2] for r in rows if len(r) > 2],
        "cuda": cuda,
    }


def _cpu() -> dict[str, Any]:
    model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "model": model or platform.processor() or None,
        "count": os.cpu_count(),
        "arch": platform.machine(),
    }


def _ram_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def _os_name() -> str | None:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return None


def _image(image: str) -> dict[str, Any]:
    out = _run(["docker", "image", "inspect", image])
    if not out:
        return {"name": image, "id": None, "digests": []}
    info = json.loads(out)[0]
    return {"name": image, "id": info.get("Id"), "digests": info.get("RepoDigests") or []}


def sha256_file(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def fingerprint(
    where: Path,
    *,
    image: str | None = None,
    engine_version: str | None = None,
    engine: dict[str, Any] | None = None,
    recipe_sha256: str | None = None,
) -> dict[str, Any]:
    """The fingerprint; ``where`` is a folder on the disk whose size is recorded."""
    from lair import __version__

    disk = shutil.disk_usage(where)
    return {
        "gpus": _gpus(),
        "cpu": _cpu(),
        "ram_bytes": _ram_bytes(),
        "disk": {"total_bytes": disk.total, "free_bytes": disk.free},
        "kernel": platform.release(),
        "os": _os_name(),
        "python": platform.python_version(),
        "image": _image(image) if image else None,
        "engine_version": engine_version,
        "engine": engine or {},
        "lair_version": __version__,
        "recipe_sha256": recipe_sha256,
    }
