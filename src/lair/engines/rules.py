"""Recipe checks that need the engines' flag tables (``lair check`` runs them, and so does the plan).

- ``kv_cache_dtype`` (and ``--kv-cache-dtype`` in ``args``) must be a name the engine accepts:
  vLLM takes ``fp8``, SGLang only ``fp8_e4m3`` / ``fp8_e5m2``;
- ``distributed_backend = "ray"`` only where lair wires Ray for the engine (vLLM): SGLang has no Ray
  launcher, so the key would silently do nothing.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from lair.engines import get_engine
from lair.engines.flags import spelled

if TYPE_CHECKING:
    from lair.recipe import Recipe

__all__ = ["RULES", "engine_issues"]

Found = tuple[tuple[str | int, ...], str, str, str]


def _dtype_hint(value: str, names: tuple[str, ...]) -> str:
    near = difflib.get_close_matches(value, names, n=2, cutoff=0.5)
    if value == "fp8" and "fp8_e4m3" in names:
        near = ["fp8_e4m3", "fp8_e5m2"]
    return (
        (f"did you mean {' or '.join(repr(n) for n in near)}? " if near else "")
        + "accepted: "
        + (", ".join(names))
    )


def _kv_dtypes(recipe: Recipe) -> Iterator[Found]:
    spec = get_engine(recipe.engine)
    names = spec.kv_cache_dtypes()
    if not names:
        return
    found: list[tuple[tuple[str | int, ...], str]] = []
    if recipe.kv_cache_dtype is not None:
        found.append((("kv_cache_dtype",), recipe.kv_cache_dtype))
    for i, a in enumerate(recipe.args):
        if spelled([a], ("--kv-cache-dtype",)):
            if "=" in a:
                found.append((("args", i), a.split("=", 1)[1]))
            elif i + 1 < len(recipe.args):
                found.append((("args", i + 1), recipe.args[i + 1]))
    for path, value in found:
        if value not in names and "{" not in value:
            msg = f"{spec.name} does not accept KV-cache dtype {value!r}"
            yield path, msg, _dtype_hint(value, names), "kv-cache-dtype"


def _ray(recipe: Recipe) -> Iterator[Found]:
    spec = get_engine(recipe.engine)
    if recipe.distributed_backend == "ray" and spec.name == "sglang":
        yield (
            ("distributed_backend",),
            f'{spec.name} has no Ray launcher: distributed_backend = "ray" would do nothing',
            'use distributed_backend = "mp" (SGLang spans nodes with --nnodes/--dist-init-addr)',
            "ray-unsupported",
        )


def engine_issues(recipe: Recipe) -> list[Found]:
    """Every engine-rule error of ``recipe`` as ``(key path, message, hint, code)``."""
    return [*_kv_dtypes(recipe), *_ray(recipe)]


RULES = (engine_issues,)
"""What ``lair check`` passes to :func:`lair.recipe.check_file`."""
