"""A hardware/software fingerprint of the machine a run happened on.

Every probe is best-effort: a missing tool or file gives ``None``, never an error. GPUs come from
``nvidia-smi`` when it is on PATH, else from ``amd-smi`` (``static --asic --vram --driver --json``,
the list of GPUs ROCm 6 prints or the ``{"gpu_data": [...]}`` of ROCm 7, and ``version --json``
for the ROCm version), in one shape: ``{"vendor", "count", "models", "driver", "memory", "cuda"}``,
plus ``"rocm"`` on AMD. Models are the names the tool prints (nvidia-smi's name, amd-smi's
``MARKET_NAME``), the names :func:`lair.fit.catalog.find_device_by_gpu_name` matches. The container
image digest comes from ``docker image inspect`` when an image is named.
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

MAX_TOOL_OUTPUT = 4 << 20
"""Most characters of a tool's output read (amd-smi's JSON for 8 GPUs is about 10 KB); more: no reading."""
MAX_GPUS = 4096
"""Most GPUs one fingerprint lists (the registry's limit)."""
MAX_NAME = 200
"""Longest name or version string kept (longer ones are cut)."""


def _run(argv: list[str], timeout: float = 10.0) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError, UnicodeDecodeError):
        return None
    if out.returncode != 0 or len(out.stdout) > MAX_TOOL_OUTPUT:
        return None
    return out.stdout


def _gpus() -> dict[str, Any] | None:
    return _nvidia_gpus() or _amd_gpus()


def _nvidia_gpus() -> dict[str, Any] | None:
    csv = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
    if not csv:
        return None
    rows = [[c.strip() for c in line.split(",")] for line in csv.strip().splitlines() if line.strip()]
    head = _run(["nvidia-smi"]) or ""
    cuda = head.split("CUDA Version:", 1)[1].split()[0] if "CUDA Version:" in head else None
    return {
        "vendor": "nvidia",
        "count": len(rows),
        "models": sorted({r[0] for r in rows}),
        "driver": rows[0][1] if rows and len(rows[0]) > 1 else None,
        "memory": [r[2] for r in rows if len(r) > 2],
        "cuda": cuda,
    }


def _json_in(text: str | None) -> Any:
    """The JSON document in a tool's output, from its first line that opens one (amd-smi may print a
    warning line first), else None."""
    decoder, at = json.JSONDecoder(), 0
    for line in (text or "").splitlines(keepends=True):
        body = line.lstrip()
        if body[:1] in ("[", "{"):
            try:
                return decoder.raw_decode(text or "", at + len(line) - len(body))[0]
            except ValueError:
                pass
        at += len(line)
    return None


def _text(v: Any) -> str | None:
    """A field amd-smi printed, or None where it printed none ("N/A", empty, not a scalar)."""
    if isinstance(v, bool) or not isinstance(v, str | int | float):
        return None
    t = str(v).strip()[:MAX_NAME]
    return None if not t or t.upper() == "N/A" else t


def _amd_entries(doc: Any) -> list[dict[str, Any]]:
    """The per-GPU objects of ``amd-smi static --json``: a list (ROCm 6) or ``{"gpu_data": [...]}``."""
    if isinstance(doc, dict):
        doc = doc.get("gpu_data")
    return [g for g in doc[:MAX_GPUS] if isinstance(g, dict)] if isinstance(doc, list) else []


def _field(g: dict[str, Any], section: str, key: str) -> Any:
    part = g.get(section)
    return part.get(key) if isinstance(part, dict) else None


def _vram(g: dict[str, Any]) -> str | None:
    """A GPU's VRAM as amd-smi gives it: ``{"value": 196592, "unit": "MB"}`` -> "196592 MB"."""
    size = _field(g, "vram", "size")
    if isinstance(size, dict):
        value, unit = _text(size.get("value")), _text(size.get("unit"))
        return f"{value} {unit}" if value and unit else value
    return _text(size)


def _rocm_version() -> str | None:
    doc = _json_in(_run(["amd-smi", "version", "--json"]))
    first = doc[0] if isinstance(doc, list) and doc else doc
    return _text(first.get("rocm_version")) if isinstance(first, dict) else None


def _amd_gpus() -> dict[str, Any] | None:
    static = _run(["amd-smi", "static", "--asic", "--vram", "--driver", "--json"], timeout=30.0)
    gpus = _amd_entries(_json_in(static))
    if not gpus:
        return None
    models = [m for g in gpus if (m := _text(_field(g, "asic", "market_name")))]
    drivers = [v for g in gpus if (v := _text(_field(g, "driver", "version")))]
    return {
        "vendor": "amd",
        "count": len(gpus),
        "models": sorted(set(models)),
        "driver": drivers[0] if drivers else None,
        "memory": [m for g in gpus if (m := _vram(g))],
        "cuda": None,
        "rocm": _rocm_version(),
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
