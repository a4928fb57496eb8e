"""Database: models, engines and migrations."""

from lair.registry.db.engine import connect_url, default_url, make_engine, migrate
from lair.registry.db.schema import Base

__all__ = ["Base", "connect_url", "default_url", "make_engine", "migrate"]
