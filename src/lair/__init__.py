"""lair: Local AI Recipes.

One recipe file (TOML) holds the launch config and the publication metadata of a served model;
lair checks it, plans and launches it, benchmarks it and reports on it.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
