"""The NVIDIA driver floor of a recipe, from its image's CUDA version.

The CUDA version comes from, in order: the image tag (``cuda12.8.1``, ``cu128``, ``cuda-12.4``,
``12.8.1-devel``, ``12.4.1-cudnn-runtime``), the recipe's ``CUDA_VERSION`` env (what NVIDIA's base
images set as a label and env), the recipe's stated ``meta.requirements.cuda``. The floor is read from
the bundled table of NVIDIA's release notes (``cuda_drivers.toml`` beside this module, which names
its source and date); with no CUDA version it is "unknown - check the image tag", with the reason.

The registry shows the floor on a recipe's page; ``lair doctor`` compares it with each node's driver
(:func:`driver_meets`). It lives here, below both, because the registry never imports the launcher.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

from lair.recipe import Recipe

__all__ = ["UNKNOWN", "DriverFloor", "cuda_from_tag", "driver_floor", "driver_meets"]

DATA = Path(__file__).resolve().parent / "cuda_drivers.toml"
UNKNOWN = "unknown - check the image tag"
_PATTERNS = (
    re.compile(r"(?:^|[^a-z0-9])cuda[-_]?v?(\d{2})\.(\d)(?:\.(\d+))?", re.I),
    re.compile(r"(?:^|[^a-z0-9])cu(\d{2})(\d)(?![0-9])", re.I),
    re.compile(r"(?:^|[:\-_])(\d{2})\.(\d)(?:\.(\d+))?-(?:cudnn|devel|runtime|base)", re.I),
)


@dataclass(frozen=True)
class DriverFloor:
    driver: str | None
    cuda: str | None
    basis: str
    text: str
    reason: str
    minor_compat_driver: str | None
    source: str
    source_url: str
    source_date: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@cache
def _table() -> dict[str, Any]:
    return tomllib.loads(DATA.read_text(encoding="utf-8"))


def cuda_from_tag(image: str | None) -> str | None:
    """The CUDA version an image tag names, or None. Only the tag part is read (not the repo)."""
    if not image:
        return None
    tag = image.split("@", 1)[0]
    tag = tag.rsplit(":", 1)[1] if ":" in tag.rsplit("/", 1)[-1] else ""
    for pat in _PATTERNS:
        m = pat.search(tag)
        if m:
            return ".".join(g for g in m.groups() if g)
    return None


def _from_text(text: str | None) -> str | None:
    m = re.search(r"(\d{2})(?:\.(\d+))?(?:\.(\d+))?", text or "")
    return ".".join(g for g in m.groups() if g) if m else None


def _lookup(cuda: str) -> str | None:
    """The table's driver for ``cuda``: the exact release, else the newest same-or-lower one of that
    minor version (12.8.2 -> 12.8.1's), else its GA (12.8 -> 12.8)."""
    table = _table()["toolkit"]
    parts = cuda.split(".")
    if len(parts) == 1:
        parts.append("0")
    minor = ".".join(parts[:2])
    cands = [k for k in table if k == minor or k.startswith(minor + ".")]
    want = tuple(int(x) for x in parts) + (0,) * (3 - len(parts))

    def key(k: str) -> tuple[int, ...]:
        p = [int(x) for x in k.split(".")]
        return tuple(p + [0] * (3 - len(p)))

    ok = [k for k in cands if key(k) <= want]
    return table[max(ok, key=key)] if ok else None


def _cuda_of(recipe: Recipe) -> tuple[str | None, str]:
    tagged = cuda_from_tag(recipe.docker_image)
    if tagged:
        return tagged, "image tag"
    env = recipe.env.get("CUDA_VERSION")
    if env and _from_text(env):
        return _from_text(env), "CUDA_VERSION"
    stated = recipe.meta.requirements.cuda if recipe.meta.requirements else None
    if _from_text(stated):
        return _from_text(stated), "recipe's stated CUDA requirement"
    return None, ""


def driver_floor(recipe: Recipe) -> DriverFloor:
    t = _table()
    src = {"source": t["source"], "source_url": t["url"], "source_date": t["date"]}
    cuda, basis = _cuda_of(recipe)
    if recipe.runtime == "native" and not recipe.docker_image and not cuda:
        why = "a native recipe with no image names no CUDA version"
        return DriverFloor(None, None, "", UNKNOWN, why, None, **src)
    if cuda is None:
        why = (
            f"the image tag of {recipe.docker_image!r} names no CUDA version"
            if recipe.docker_image
            else "no image"
        )
        return DriverFloor(None, None, "", UNKNOWN, why, None, **src)
    driver = _lookup(cuda)
    compat = t["minor_compat"].get(cuda.split(".")[0])
    if driver is None:
        why = f"CUDA {cuda} (from the {basis}) is not in the bundled table"
        return DriverFloor(None, cuda, basis, UNKNOWN, why, compat, **src)
    text = f">= {driver} (CUDA {cuda}, from the {basis})"
    return DriverFloor(driver, cuda, basis, text, "", compat, **src)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text))


def driver_meets(driver: str, floor: str) -> bool:
    """Whether the installed ``driver`` (``570.124.06``) is at least ``floor``, part by part as numbers
    (``570.9`` < ``570.26``: not a string comparison)."""
    have, need = _version(driver), _version(floor)
    width = max(len(have), len(need))
    return have + (0,) * (width - len(have)) >= need + (0,) * (width - len(need))
