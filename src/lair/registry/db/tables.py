"""The tables' handles (SQLAlchemy ``Table`` objects of :mod:`lair.registry.db.schema`'s models) and the
one predicate every read and write shares (:func:`visible`): the database layer's, so that service
modules import them from here and never from each other's write code."""

from __future__ import annotations

from typing import cast

import sqlalchemy as sa

from lair.registry.db.schema import (
    GitSource,
    LoadMeasurement,
    Measurement,
    QualityMeasurement,
    RecipeTag,
    RegistryVersion,
    Report,
    Revision,
    User,
)
from lair.registry.db.schema import (
    Recipe as RecipeRow,
)

__all__ = [
    "GIT_SOURCES",
    "LOAD",
    "MEASUREMENTS",
    "QUALITY",
    "RECIPES",
    "REPORTS",
    "REVISIONS",
    "TAGS",
    "USERS",
    "VERSION",
    "visible",
]

USERS = cast(sa.Table, User.__table__)
RECIPES = cast(sa.Table, RecipeRow.__table__)
TAGS = cast(sa.Table, RecipeTag.__table__)
REVISIONS = cast(sa.Table, Revision.__table__)
MEASUREMENTS = cast(sa.Table, Measurement.__table__)
LOAD = cast(sa.Table, LoadMeasurement.__table__)
GIT_SOURCES = cast(sa.Table, GitSource.__table__)
QUALITY = cast(sa.Table, QualityMeasurement.__table__)
VERSION = cast(sa.Table, RegistryVersion.__table__)


def visible() -> sa.ColumnElement[bool]:
    """The recipes shown anywhere (search, pages, JSON, exports, writes): not hidden by an admin and
    not owned by a hidden user. Hiding either is undone by unhiding it; neither deletes anything."""
    hidden_owners = sa.select(USERS.c.id).where(USERS.c.hidden == sa.true())
    return sa.and_(RECIPES.c.hidden == sa.false(), RECIPES.c.owner_id.not_in(hidden_owners))


REPORTS = cast(sa.Table, Report.__table__)
