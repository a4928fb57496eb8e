"""Where lair keeps the user's files.

Configuration (rigs, clusters, the user script library) lives in the platform's user config dir;
state (run journals, leases, trust decisions, fetched recipes, lair's known_hosts) in the user
state dir (``XDG_STATE_HOME/lair``, or platformdirs' ``user_state_dir``). ``LAIR_HOME`` overrides
both with one folder (``LAIR_HOME/state``, ``LAIR_HOME/runs``); tests use it.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["clusters_file", "home", "rigs_dir", "runs_dir", "state_dir", "user_scripts_dir"]


def home() -> Path:
    """The config folder (rigs, clusters, scripts)."""
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
    """Leases, trust decisions, fetched recipes and other machine-local state."""
    env = os.environ.get("LAIR_HOME")
    if env:
        return Path(env) / "state"
    xdg = os.environ.get("XDG_STATE_HOME")
    if xdg:
        return Path(xdg) / "lair"
    from platformdirs import user_state_path

    return user_state_path("lair", appauthor=False)


def runs_dir() -> Path:
    """One journal folder per run (plan, status, pids, logs)."""
    env = os.environ.get("LAIR_HOME")
    return Path(env) / "runs" if env else state_dir() / "runs"
