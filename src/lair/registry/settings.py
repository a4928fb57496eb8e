"""The registry's one settings table (datasette's ``SETTINGS``, dstack's ``settings.py``): every knob
is a field of :class:`Settings` (pydantic-settings: its variable is ``LAIR_REGISTRY_`` + its name, its
default and help line are the field's, its check a validator), and :meth:`Settings.from_env` is
the only place in the registry that reads them. ``lair serve`` turns its flags into the same
variables for its workers (granian starts each from the environment), and :func:`create_app` is given
a :class:`Settings` (explicit arguments override it), so nothing below the entry point reads
``os.environ``.

The sign-in providers' variables (``LAIR_OAUTH_*``) are many and per provider: they stay in
:mod:`lair.registry.oauth`, which is handed the same environment snapshot.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

from lair.errors import ConfigError

__all__ = ["CHART_MODES", "SETTINGS", "Setting", "Settings", "default_db_url"]

PREFIX = "LAIR_REGISTRY_"
CHART_MODES = ("deferred", "inline")


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


def _names(text: Any) -> Any:
    """A comma-separated variable as a tuple (empty parts dropped); a tuple given in code as is."""
    if isinstance(text, str):
        return tuple(p.strip() for p in text.split(",") if p.strip())
    return text


_SNAPSHOT: ContextVar[Mapping[str, str] | None] = ContextVar("lair_registry_settings_env", default=None)


class _Snapshot(PydanticBaseSettingsSource):
    """The ``LAIR_REGISTRY_*`` variables of the mapping :meth:`Settings.from_env` was given (a
    worker's environment snapshot), in place of ``os.environ``; an empty value is unset."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        super().__init__(settings_cls)
        self.env = env

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        key = PREFIX + field_name.upper()
        return self.env.get(key) or None, key, False

    def __call__(self) -> dict[str, Any]:
        got = {name: self.get_field_value(f, name)[0] for name, f in self.settings_cls.model_fields.items()}
        return {name: value for name, value in got.items() if value is not None}


class Settings(BaseSettings):
    """Every setting of the registry, in the order ``lair serve --help`` and docs/registry.md describe
    them (``environ``: the snapshot they were read from, for the sign-in providers)."""

    model_config = SettingsConfigDict(env_prefix=PREFIX, env_ignore_empty=True, extra="ignore", frozen=True)

    db: str = Field("", description="database URL (SQLite path or postgresql://...); default under LAIR_HOME")
    public_url: str = Field("", description="the site's public https URL: every absolute link")
    allowed_hosts: Annotated[tuple[str, ...], NoDecode] = Field(
        (), description="comma-separated Host names answered"
    )
    blobs: str = Field("", description="report blob store: a folder, db, or s3://bucket/prefix")
    cache_mb: int = Field(64, ge=0, description="in-memory response cache per worker (0: off)")
    redis: str = Field("", description="Redis URL for the rate limits several processes share")
    write_limit: str = Field("60/minute", description="writes per account (limits syntax)")
    forwarded_allow_ips: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        description="proxies (addresses, networks) whose X-Forwarded-For/-Proto name the client; empty: none",
    )
    charts: Literal["deferred", "inline"] = Field(
        "deferred",
        description="speed charts drawn after the write by a drawer process (deferred) or inside it (inline)",
    )
    new_account_days: float = Field(
        7.0,
        ge=0,
        lt=1e6,
        description="an account younger than this many days, or with nothing filed before, is shown as new",
    )
    environ: Mapping[str, str] = Field(default_factory=dict, repr=False, exclude=True)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        env = _SNAPSHOT.get()
        return (init_settings, env_settings if env is None else _Snapshot(settings_cls, env))

    _split_hosts = field_validator("allowed_hosts", mode="before")(_names)

    @field_validator("public_url")
    @classmethod
    def _no_trailing_slash(cls, value: str) -> str:
        return value.rstrip("/")

    @field_validator("forwarded_allow_ips", mode="before")
    @classmethod
    def _proxies(cls, value: Any) -> Any:
        """Each an IP address or network (``10.0.0.0/24``); ``*`` is refused (every client could then
        name any address and spread its attempts over as many limits)."""
        out = _names(value)
        for p in out:
            try:
                ipaddress.ip_network(p, strict=False)
            except ValueError:
                raise ValueError(f"{p!r} is not an IP address or network") from None
        return out

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """The settings of ``env`` (default: ``os.environ``); a bad value is a :class:`ConfigError`
        naming its variable. ``db`` falls back to :func:`default_db_url`."""
        import os

        snapshot = dict(os.environ if env is None else env)
        token = _SNAPSHOT.set(snapshot)
        try:
            conf = cls(environ=snapshot)
        except ValidationError as exc:
            raise _config_error(exc, snapshot) from None
        finally:
            _SNAPSHOT.reset(token)
        return conf if conf.db else conf.model_copy(update={"db": default_db_url(snapshot)})


_HINTS = {
    "forwarded_allow_ips": "the proxy's own address as the app host sees it, e.g. 127.0.0.1 or 10.0.0.5",
    "new_account_days": "0 or more, e.g. 7 (0: only an account with nothing filed before is new)",
}


def _config_error(exc: ValidationError, env: Mapping[str, str]) -> ConfigError:
    """The first problem of a validation, located at its variable (``LAIR_REGISTRY_CHARTS: 'later'
    is not one of deferred, inline``)."""
    first = exc.errors()[0]
    name = str(first["loc"][0]) if first["loc"] else ""
    var, given = PREFIX + name.upper(), env.get(PREFIX + name.upper(), "")
    if first["type"] == "literal_error" and name == "charts":
        why = f"{given!r} is not one of {', '.join(CHART_MODES)}"
    elif name == "new_account_days":
        why = f"{given!r} is not a number of days"
    elif first["type"] == "value_error":
        why = str(first["msg"]).removeprefix("Value error, ")
    else:
        why = f"{given!r}: {first['msg']}"
    return ConfigError(f"{var}: {why}", hint=_HINTS.get(name, ""))


@dataclass(frozen=True)
class Setting:
    name: str
    env: str
    default: str
    help: str


def _default(f: FieldInfo) -> str:
    value = f.get_default(call_default_factory=True)
    return ",".join(value) if isinstance(value, tuple) else str(value)


SETTINGS: tuple[Setting, ...] = tuple(
    Setting(name, PREFIX + name.upper(), _default(f), f.description or "")
    for name, f in Settings.model_fields.items()
    if name != "environ"
)
"""Every setting (name, variable, default, help), from :class:`Settings`' fields."""
