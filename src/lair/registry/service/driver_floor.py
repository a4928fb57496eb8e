"""The NVIDIA driver floor of a recipe: computed in :mod:`lair.fit.driver` (the launcher's ``lair
doctor`` compares it with each node's driver, and the registry never imports the launcher); the
registry's pages and API read it from there."""

from __future__ import annotations

from lair.fit.driver import DATA, UNKNOWN, DriverFloor, cuda_from_tag, driver_floor

__all__ = ["DATA", "UNKNOWN", "DriverFloor", "cuda_from_tag", "driver_floor"]
