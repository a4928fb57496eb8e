"""Where lair keeps the user's state: rigs, clusters, the user script library, run journals, leases.

``LAIR_HOME`` overrides the base folder (tests use it); otherwise the platform's user config dir.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["clusters_file", "home", "rigs_dir", "runs_dir", "state_dir", "user_scripts_dir"]


def home() -> Path:
    env = os.environ.get("LAIR_HOME")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CONFIG_HOME")
    if xdg:
        return Path(xdg) / "lair"
    from platformdirs import user_config_path

    return user_config_path("lair", appauthor=False)


def rigs_dir() -> Path:
    return home() / "rigs"


def clusters_file() -> Path:
    return home() / "clusters.toml"


def user_scripts_dir() -> Path:
    return home() / "scripts"


def state_dir() -> Path:
    """Leases and other machine-local state."""
    return home() / "state"


def runs_dir() -> Path:
    """One journal folder per run (plan, status, pids, logs)."""
    return home() / "runs"
