"""Who a request acts as (:class:`Actor`) and the scopes an API token can hold: the model that
:mod:`.accounts` (who signs in) and :mod:`.permissions` (what they may do) both use."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SCOPES", "Actor"]

SCOPES = ("read", "publish")


@dataclass(frozen=True)
class Actor:
    id: int
    name: str
    is_admin: bool = False
    scopes: tuple[str, ...] = SCOPES
    csrf: str = ""

    def can(self, scope: str) -> bool:
        return scope in self.scopes
