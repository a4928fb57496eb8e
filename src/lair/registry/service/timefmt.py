"""Times: UTC everywhere (SQLite hands back naive datetimes, PostgreSQL aware ones)."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime

__all__ = ["http_date", "iso", "utc"]


def utc(dt: datetime) -> datetime:
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def iso(dt: datetime) -> str:
    return utc(dt).isoformat(timespec="seconds")


def http_date(dt: datetime) -> str:
    return format_datetime(utc(dt).replace(microsecond=0), usegmt=True)
