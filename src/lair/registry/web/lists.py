"""Cached lists and searches kept across the writes that do not change them.

A list or search entry is cached under the ``lists`` and ``votes`` counters read before it was
rendered (:mod:`~lair.registry.web.cache`); any write bumps one of them, so on a live site (votes
every second, a revision now and then) every entry used to be rendered again about once a second,
and after each revision all of them at once. Most writes change none of them: a write changes a few
recipes, and a page changes only if one of them is on it, or now belongs on it.

So when the counters moved, an entry is kept if this process knows what every bump in between was about
(:class:`ChangeLog`, fed by its own write routes once their transaction committed: each opens it through
:func:`lair.registry.web.writes.committed`; :mod:`lair.registry.service.changes`), none of those recipes
is on the page, and none of them is, as the tables are now, among the page's matches
(:func:`lair.registry.service.search.on_page`: the page's own query, restricted to those recipes and
bounded by its last row; one indexed lookup instead of the search). Otherwise it is rendered again, as
before: a bump this process does not know (another process's write, the CLI's), a text search ranked by
relevance after a change of ``lists`` (bm25 weighs every document), or an older release's write
(``foreign``). A vote is still allowed to show ``VOTE_TTL_S`` late; the check then runs at most once per
entry per that time. Kept entries keep their bytes and ETag.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import anyio.to_thread

from lair.registry.service.changes import Counter, Note
from lair.registry.service.search import SearchParams, on_page
from lair.registry.web.cache import VOTE_TTL_S, Entry, Ver

__all__ = ["ChangeLog", "Listing", "kept"]


@dataclass(frozen=True)
class Listing:
    """What a cached list or search shows: its query, the recipes on it and where it ends."""

    params: SearchParams
    ids: frozenset[int]
    end: tuple[Any, int] | None
    """The last item's sort key and id when more items follow; None: every match is on the page."""


class ChangeLog:
    """The recipes behind each bump of this process's committed writes, by counter and value; the
    oldest forgotten past ``KEEP`` values a counter.

    Not an LRU (so no ``cachetools.LRUCache``): a log in the order of the bumps, its oldest values
    dropped first whatever was read, and read by ranges of consecutive values under its own lock."""

    KEEP = 10_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[Counter, OrderedDict[int, frozenset[int]]] = {
            "lists": OrderedDict(),
            "votes": OrderedDict(),
        }

    def add(self, notes: Iterable[Note]) -> None:
        with self._lock:
            for counter, value, ids in notes:
                seen = self._seen[counter]
                seen[value] = ids
                while len(seen) > self.KEEP:
                    seen.popitem(last=False)

    def between(self, counter: Counter, old: int, new: int) -> frozenset[int] | None:
        """The recipes behind the bumps of ``counter`` from ``old`` to ``new``; None when one of them
        is not known here."""
        if not 0 <= new - old <= self.KEEP:
            return None
        seen, out = self._seen[counter], set[int]()
        with self._lock:
            for value in range(old + 1, new + 1):
                ids = seen.get(value)
                if ids is None:
                    return None
                out |= ids
        return frozenset(out)


def _changed_ids(log: ChangeLog, hit: Entry, current: Ver, now: float) -> tuple[frozenset[int], bool] | None:
    """The recipes changed since ``hit`` was rendered that it must not ignore, and whether the vote
    counter was checked; None when a bump is unknown (or the entry cannot be kept for another reason)."""
    lists, votes, foreign = hit.version
    listing: Listing = hit.listing
    if foreign != current.foreign:
        return None
    ids: frozenset[int] = frozenset()
    if lists != current.lists:
        if listing.params.q and listing.params.sort == "relevance":
            return None
        got = log.between("lists", lists, current.lists)
        if got is None:
            return None
        ids = got
    checked = votes != current.votes and now - hit.born >= VOTE_TTL_S
    if checked:
        got = log.between("votes", votes, current.votes)
        if got is None:
            return None
        ids |= got
    return ids, checked


def _on_page(engine: Any, listing: Listing, ids: frozenset[int]) -> bool:
    """Whether one of ``ids`` now belongs on ``listing``'s page (an outage: True, so the route renders
    it and answers it as it does)."""
    try:
        with engine.connect() as conn:
            return on_page(conn, listing.params, ids, listing.end)
    except Exception:
        return True


async def kept(engine: Any, log: ChangeLog, hit: Entry, current: Ver) -> Entry | None:
    """``hit`` (a list or search entry whose counters moved) under the current counters, when none
    of the writes in between changed it; None when it must be rendered again. Its one statement, if
    any, runs on a worker thread."""
    if not isinstance(hit.listing, Listing):
        return None
    now = time.monotonic()
    found = _changed_ids(log, hit, current, now)
    if found is None:
        return None
    ids, checked = found
    listing: Listing = hit.listing
    if ids & listing.ids:
        return None
    if ids:
        changed: bool = await anyio.to_thread.run_sync(_on_page, engine, listing, ids)
        if changed:
            return None
    votes = current.votes if checked else hit.version[1]
    return replace(hit, version=(current.lists, votes, current.foreign), born=now if checked else hit.born)
