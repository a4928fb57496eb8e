"""Engines and migrations.

SQLite is the default (a file in the user's data dir, WAL mode, foreign keys on); PostgreSQL is
used through psycopg 3 when the URL says ``postgresql://``. Migrations are Alembic scripts shipped in
this package (``migrations/versions/NNNN_*.py``), run on the engine's own connection.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event

__all__ = ["connect_url", "default_url", "dialect_of", "make_engine", "migrate", "sqlite_path"]

MIGRATIONS = Path(__file__).parent / "migrations"


def default_url() -> str:
    """The database of :class:`~lair.registry.settings.Settings` (``LAIR_REGISTRY_DB``, else a SQLite
    file under ``LAIR_HOME``, else in the user's data dir)."""
    from lair.registry.settings import Settings

    return connect_url(Settings.from_env().db)


def connect_url(url: str) -> str:
    """A SQLAlchemy URL from what a user types: a path, ``sqlite:///...`` or ``postgresql://...``."""
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    if "://" not in url:
        return f"sqlite:///{Path(url).expanduser().resolve()}"
    return url


def dialect_of(url: str) -> str:
    return "sqlite" if url.startswith("sqlite") else "postgresql"


def sqlite_path(url: str) -> str:
    return url.split(":///", 1)[1]


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.close()


def make_engine(url: str | None = None) -> Engine:
    url = connect_url(url or default_url())
    if dialect_of(url) == "sqlite":
        Path(sqlite_path(url)).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    # connect_timeout: a server that drops packets fails the connect (a 503) instead of hanging it
    return create_engine(
        url, pool_pre_ping=True, pool_size=4, max_overflow=4, connect_args={"connect_timeout": 5}
    )


def _alembic_config(connection: Any) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


def migrate(engine: Engine, target: str = "head") -> None:
    """Upgrade to ``target`` (``head``), or downgrade when it is ``base`` or a lower revision."""
    from alembic import command
    from alembic.runtime.migration import MigrationContext

    with engine.begin() as conn:
        cfg = _alembic_config(conn)
        current = MigrationContext.configure(conn).get_current_revision()
        if target == "base" or (target != "head" and current and target < current):
            command.downgrade(cfg, target)
        else:
            command.upgrade(cfg, target)


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


__all__ += ["current_revision"]
