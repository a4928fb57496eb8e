"""What a write changed, by counter value: the recipes behind each bump of ``lists`` or ``votes``.

The lists' and searches' cache keys on ``registry_version.lists`` and ``votes``
(:mod:`lair.registry.web.cache`). A bump says that something changed, not what; a process that knows
which recipes each bump it sees was about can keep every cached list those recipes are neither on nor
enter (:mod:`lair.registry.web.lists`). The writes of this process tell it: inside :func:`recording`
(the web layer's write routes, through ``lair.registry.web.writes.committed``), :func:`record` notes the
counter value a write's bump returned and the recipes it changed, and the caller hands the notes on once
the transaction committed. A value nobody noted (a write of another process, or of the CLI) stays
unknown, and whoever reads it treats every list as changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Literal

__all__ = ["Counter", "Note", "record", "recording"]

Counter = Literal["lists", "votes"]
Note = tuple[Counter, int, frozenset[int]]
"""(counter, the value its bump returned, the recipes the write changed)."""

_NOTES: ContextVar[list[Note] | None] = ContextVar("lair_changes", default=None)


@contextmanager
def recording() -> Iterator[list[Note]]:
    """Collect the notes of the writes run inside the block (to be handed on after their commit)."""
    notes: list[Note] = []
    token = _NOTES.set(notes)
    try:
        yield notes
    finally:
        _NOTES.reset(token)


def record(counter: Counter, value: int, recipe_ids: Iterable[int]) -> None:
    """Note that the bump of ``counter`` to ``value`` was about ``recipe_ids`` (outside
    :func:`recording`: nothing)."""
    notes = _NOTES.get()
    if notes is not None:
        notes.append((counter, int(value), frozenset(recipe_ids)))
