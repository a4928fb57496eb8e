"""The registry's one settings table (datasette's ``SETTINGS``, dstack's ``settings.py``): every knob
has a name, an environment variable, a default and a help line here, and :meth:`Settings.from_env` is
the only place in the registry that reads them. ``lair serve`` turns its flags into the same
variables for its workers (granian starts each from the environment), and :func:`create_app` is given
a :class:`Settings` (explicit arguments override it), so nothing below the entry point reads
``os.environ``.

The sign-in providers' variables (``LAIR_OAUTH_*``) are many and per provider: they stay in
:mod:`lair.registry.oauth`, which is handed the same environment snapshot.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CHART_MODES", "SETTINGS", "Setting", "Settings", "default_db_url"]


@dataclass(frozen=True)
class Setting:
    name: str
    env: str
    default: str
    help: str


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "db",
        "LAIR_REGISTRY_DB",
        "",
        "database URL (SQLite path or postgresql://...); default under LAIR_HOME",
    ),
    Setting("public_url", "LAIR_REGISTRY_PUBLIC_URL", "", "the site's public https URL: every absolute link"),
    Setting("allowed_hosts", "LAIR_REGISTRY_ALLOWED_HOSTS", "", "comma-separated Host names answered"),
    Setting("blobs", "LAIR_REGISTRY_BLOBS", "", "report blob store: a folder, db, or s3://bucket/prefix"),
    Setting("cache_mb", "LAIR_REGISTRY_CACHE_MB", "64", "in-memory response cache per worker (0: off)"),
    Setting("redis", "LAIR_REGISTRY_REDIS", "", "Redis URL for the rate limits several processes share"),
    Setting("write_limit", "LAIR_REGISTRY_WRITE_LIMIT", "60/minute", "writes per account (limits syntax)"),
    Setting(
        "forwarded_allow_ips",
        "LAIR_REGISTRY_FORWARDED_ALLOW_IPS",
        "",
        "proxies (addresses, networks) whose X-Forwarded-For/-Proto name the client; empty: none",
    ),
    Setting(
        "charts",
        "LAIR_REGISTRY_CHARTS",
        "deferred",
        "speed charts drawn after the write by a drawer process (deferred) or inside it (inline)",
    ),
    Setting(
        "new_account_days",
        "LAIR_REGISTRY_NEW_ACCOUNT_DAYS",
        "7",
        "an account younger than this many days, or with nothing filed before, is shown as new",
    ),
)
"""Every setting, in the order ``lair serve --help`` and docs/registry.md describe them."""


def default_db_url(env: Mapping[str, str]) -> str:
    """``LAIR_REGISTRY_DB``, else a SQLite file under ``LAIR_HOME``, else in the user's data dir."""
    if env.get("LAIR_REGISTRY_DB"):
        return env["LAIR_REGISTRY_DB"]
    if env.get("LAIR_HOME"):
        folder = Path(env["LAIR_HOME"]) / "registry"
    else:
        from platformdirs import user_data_path

        folder = user_data_path("lair", appauthor=False)
    return f"sqlite:///{folder / 'registry.sqlite3'}"


CHART_MODES = ("deferred", "inline")


def _choice(raw: Mapping[str, str], name: str, allowed: tuple[str, ...]) -> str:
    from lair.errors import ConfigError

    if raw[name] not in allowed:
        env = next(s.env for s in SETTINGS if s.name == name)
        raise ConfigError(f"{env}: {raw[name]!r} is not one of {', '.join(allowed)}")
    return raw[name]


def _proxies(text: str) -> tuple[str, ...]:
    """The trusted proxies: each an IP address or network (``10.0.0.0/24``); ``*`` is refused
    (every client could then name any address and spread its attempts over as many limits)."""
    import ipaddress

    from lair.errors import ConfigError

    out = tuple(p.strip() for p in text.split(",") if p.strip())
    for p in out:
        try:
            ipaddress.ip_network(p, strict=False)
        except ValueError:
            raise ConfigError(
                f"LAIR_REGISTRY_FORWARDED_ALLOW_IPS: {p!r} is not an IP address or network",
                hint="the proxy's own address as the app host sees it, e.g. 127.0.0.1 or 10.0.0.5",
            ) from None
    return out


def _days(raw: Mapping[str, str]) -> float:
    from lair.errors import ConfigError

    try:
        days = float(raw["new_account_days"])
    except ValueError:
        days = -1.0
    if not 0 <= days < 1e6:
        raise ConfigError(
            f"LAIR_REGISTRY_NEW_ACCOUNT_DAYS: {raw['new_account_days']!r} is not a number of days",
            hint="0 or more, e.g. 7 (0: only an account with nothing filed before is new)",
        )
    return days


@dataclass(frozen=True)
class Settings:
    """The values of :data:`SETTINGS` (``environ``: the snapshot they were read from)."""

    db: str = ""
    public_url: str = ""
    allowed_hosts: tuple[str, ...] = ()
    blobs: str = ""
    cache_mb: int = 64
    redis: str = ""
    write_limit: str = "60/minute"
    charts: str = "deferred"
    new_account_days: float = 7.0
    forwarded_allow_ips: tuple[str, ...] = ()
    environ: Mapping[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = dict(os.environ if env is None else env)
        raw = {s.name: env.get(s.env) or s.default for s in SETTINGS}
        hosts = tuple(h.strip() for h in raw["allowed_hosts"].split(",") if h.strip())
        return cls(
            db=default_db_url(env),
            public_url=raw["public_url"].rstrip("/"),
            allowed_hosts=hosts,
            blobs=raw["blobs"],
            cache_mb=int(raw["cache_mb"]),
            redis=raw["redis"],
            write_limit=raw["write_limit"],
            charts=_choice(raw, "charts", CHART_MODES),
            new_account_days=_days(raw),
            forwarded_allow_ips=_proxies(raw["forwarded_allow_ips"]),
            environ=env,
        )
