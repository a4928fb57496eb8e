"""Shared fixtures live in the package (``lair.testing.fixtures``) so users can load them too."""

pytest_plugins = ["lair.testing.fixtures"]
