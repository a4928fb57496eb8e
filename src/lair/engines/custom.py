"""``custom`` and engines lair has no flag knowledge of: the recipe's entrypoint + args, verbatim."""

from __future__ import annotations

from lair.engines.base import EngineSpec

__all__ = ["Custom"]


class Custom(EngineSpec):
    name = "custom"
