"""Node leases: which run holds which rank of a cluster, so that two launches never share a node.

One JSON file per cluster under ``<state>/leases/`` maps a rank (or, for ad-hoc ``--nodes`` hosts in
no cluster, an address) to the run holding it. Every read-modify-write happens under an exclusive
``fcntl.flock`` on a sibling ``.lock`` file and replaces the JSON atomically (write + rename), so a
crash never leaves half a file and concurrent ``lair`` processes serialise.

A lease records the holder's pid (and its start time, so a recycled pid is not mistaken for the
holder) and the control host. :func:`reclaim` frees leases whose holder process is gone on this
host. A detached run hands its lease to no process (``pid=None``): only :func:`release` frees it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lair.errors import AllocationError
from lair.inventory.model import Inventory, Node, adhoc_node

__all__ = ["ADHOC", "Lease", "RankStatus", "acquire", "reclaim", "release", "set_holder", "status"]

ADHOC = "_adhoc"
"""Lease file for ``--nodes`` hosts that belong to no cluster (keyed by address)."""


@dataclass(frozen=True)
class Lease:
    """Who holds one rank: the run, its holder process on ``hostname`` (the control host), since when."""

    key: str
    node: str
    run_id: str
    pid: int | None
    pid_start: int | None
    hostname: str
    started_at: str

    def holder_alive(self) -> bool | None:
        """True/False for a holder on this host; None when unknowable (other host, detached)."""
        if self.pid is None or self.hostname != socket.gethostname():
            return None
        return _pid_alive(self.pid, self.pid_start)


@dataclass(frozen=True)
class RankStatus:
    """One node of a cluster and the lease on it (None when free)."""

    node: Node
    lease: Lease | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.node.name,
            "address": self.node.address,
            "rank": self.node.rank,
            "gpus": self.node.gpus,
            "state": "held" if self.lease else "free",
            "lease": asdict(self.lease) if self.lease else None,
        }


# -- public API --------------------------------------------------------------------------------
def acquire(
    cluster: str | None,
    count: int | None = None,
    *,
    run_id: str,
    hosts: Sequence[str] | None = None,
    pid: int | None = -1,
    inventory: Inventory | None = None,
) -> list[Node]:
    """Lease ``count`` nodes of ``cluster`` (the first free ranks, in rank order) or exactly ``hosts``
    (names or addresses, any cluster; hosts in no cluster become ad-hoc root@host:22 nodes).

    All or nothing: raises :class:`AllocationError` naming the holders when not enough are free.
    ``pid`` is the holder process (default: this process; None: held until :func:`release`)."""
    inv = inventory if inventory is not None else _load()
    holder = os.getpid() if pid == -1 else pid
    if hosts:
        picks = _resolve_hosts(inv, hosts)
        groups = sorted({c for c, _ in picks})
        with _locked(groups) as books:
            _reclaim_books(books)
            _check_free(books, picks)
            _grant(books, picks, run_id, holder)
        return [n for _, n in picks]
    if cluster is None or count is None:
        raise AllocationError("nothing to allocate: give a cluster and a node count, or hosts")
    nodes = inv.get(cluster).nodes
    with _locked([cluster]) as books:
        _reclaim_books(books)
        free = [n for n in nodes if str(n.rank) not in books[cluster]]
        if len(free) < count:
            raise _not_enough(cluster, nodes, books[cluster], count)
        picks = [(cluster, n) for n in free[:count]]
        _grant(books, picks, run_id, holder)
    return [n for _, n in picks]


def release(run_id: str) -> list[Lease]:
    """Free every lease of ``run_id`` (any cluster); returns what was freed."""
    freed: list[Lease] = []
    with _locked(_lease_files()) as books:
        for book in books.values():
            for key, lease in list(book.items()):
                if lease.run_id == run_id:
                    freed.append(book.pop(key))
    return freed


def set_holder(run_id: str, pid: int | None) -> int:
    """Hand ``run_id``'s leases to another holder process (None: detached); returns how many."""
    n = 0
    with _locked(_lease_files()) as books:
        for book in books.values():
            for key, lease in list(book.items()):
                if lease.run_id == run_id:
                    book[key] = _lease(lease.key, lease.node, run_id, pid, lease.started_at)
                    n += 1
    return n


def reclaim() -> list[Lease]:
    """Free the leases whose holder process is dead (holders on this control host only)."""
    with _locked(_lease_files()) as books:
        return _reclaim_books(books)


def status(cluster: str, *, inventory: Inventory | None = None) -> list[RankStatus]:
    """Every node of ``cluster`` in rank order with its lease (None = free)."""
    inv = inventory if inventory is not None else _load()
    nodes = inv.get(cluster).nodes
    with _locked([cluster]) as books:
        book = books[cluster]
    return [RankStatus(n, book.get(str(n.rank))) for n in nodes]


def leases(cluster: str = ADHOC) -> dict[str, Lease]:
    """The raw lease table of one lease file (key -> lease)."""
    with _locked([cluster]) as books:
        return dict(books[cluster])


# -- internals ---------------------------------------------------------------------------------
Books = dict[str, dict[str, Lease]]


def _load() -> Inventory:
    from lair.inventory.store import load_inventory

    return load_inventory()


def _dir() -> Path:
    from lair import config

    return config.state_dir() / "leases"


def _lease_files() -> list[str]:
    d = _dir()
    return sorted(p.stem for p in d.glob("*.json")) if d.is_dir() else []


@contextlib.contextmanager
def _locked(groups: Sequence[str]) -> Iterator[Books]:
    """Lock the lease files of ``groups`` (in sorted order: no deadlock), load them, and write back
    those that changed when the block ends without an error."""
    d = _dir()
    d.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        for g in sorted(set(groups)):
            fd = os.open(d / f"{g}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            stack.callback(os.close, fd)
            fcntl.flock(fd, fcntl.LOCK_EX)
        books = {g: _read(d / f"{g}.json") for g in groups}
        before = {g: dict(b) for g, b in books.items()}
        yield books
        for g, book in books.items():
            if book != before[g]:
                _write(d / f"{g}.json", book)


def _read(path: Path) -> dict[str, Lease]:
    if not path.exists():
        return {}
    data = json.loads(path.read_text(encoding="utf-8") or "{}")
    return {k: Lease(**v) for k, v in data.get("leases", {}).items()}


def _write(path: Path, book: dict[str, Lease]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    body = {"leases": {k: asdict(v) for k, v in sorted(book.items())}}
    tmp.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _lease(key: str, node: str, run_id: str, pid: int | None, started_at: str | None = None) -> Lease:
    return Lease(
        key=key,
        node=node,
        run_id=run_id,
        pid=pid,
        pid_start=_pid_start(pid) if pid is not None else None,
        hostname=socket.gethostname(),
        started_at=started_at or datetime.now(UTC).isoformat(timespec="milliseconds"),
    )


def _key(group: str, node: Node) -> str:
    return node.address if group == ADHOC else str(node.rank)


def _resolve_hosts(inv: Inventory, hosts: Sequence[str]) -> list[tuple[str, Node]]:
    picks: list[tuple[str, Node]] = []
    for i, host in enumerate(hosts):
        node = inv.find(host)
        picks.append((node.cluster, node) if node else (ADHOC, adhoc_node(host, i)))
    keys = [(g, _key(g, n)) for g, n in picks]
    if len(set(keys)) != len(keys):
        raise AllocationError(f"a host is given twice: {', '.join(hosts)}")
    return picks


def _check_free(books: Books, picks: list[tuple[str, Node]]) -> None:
    taken = [(n, books[g][_key(g, n)]) for g, n in picks if _key(g, n) in books[g]]
    if taken:
        held = ", ".join(f"{n.name} (held by run {lease.run_id})" for n, lease in taken)
        raise AllocationError(f"nodes busy: {held}", hint="stop that run (lair stop RUN) or pick other nodes")


def _grant(books: Books, picks: list[tuple[str, Node]], run_id: str, pid: int | None) -> None:
    for g, n in picks:
        key = _key(g, n)
        books[g][key] = _lease(key, n.name, run_id, pid)


def _not_enough(cluster: str, nodes: list[Node], book: dict[str, Lease], count: int) -> AllocationError:
    held = sorted({lease.run_id for lease in book.values()})
    free = len(nodes) - len([n for n in nodes if str(n.rank) in book])
    return AllocationError(
        f"cluster {cluster!r} has {free} free of {len(nodes)} nodes, {count} needed"
        + (f" (held by runs: {', '.join(held)})" if held else ""),
        hint="see `lair nodes`; stop a run with `lair stop RUN`",
    )


def _reclaim_books(books: Books) -> list[Lease]:
    freed: list[Lease] = []
    for book in books.values():
        for key, lease in list(book.items()):
            if lease.holder_alive() is False:
                freed.append(book.pop(key))
    return freed


def _pid_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux), to tell a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def _pid_alive(pid: int, start: int | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    now = _pid_start(pid)
    return start is None or now is None or now == start
