"""Machine leases: which run holds which machine, so that two launches never share one.

Every run leases its machines, the local one included. A lease is keyed by the machine's normalised
address (:func:`machine_key`: IP literals in canonical form, names lower-cased and resolved through
the system resolver where they resolve, every loopback name or address and any node flagged
``local`` as ``localhost``; ``:PORT`` appended when sshd is not on 22), in one book for all
clusters and ad-hoc ``--nodes`` hosts: a machine listed in two clusters and given with ``--nodes``
is still leased once. The lease records the cluster and rank it was taken as and the run's ports.

The book is ``<state>/leases/machines.json``. Every read-modify-write happens under an exclusive
``fcntl.flock`` on a sibling ``.lock`` file and replaces the JSON atomically (write + rename), so a
crash never leaves half a file and concurrent ``lair`` processes serialise.

A lease records the holder's pid (and its start time, so a recycled pid is not mistaken for the
holder) and the control host. :func:`reclaim` frees leases whose holder process is gone on this
host. A detached run hands its lease to no process (``pid=None``): only :func:`release` frees it.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import socket
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lair.errors import AllocationError
from lair.inventory.clusters import Inventory, Node, adhoc_node

__all__ = [
    "ADHOC",
    "Lease",
    "RankStatus",
    "acquire",
    "acquire_nodes",
    "machine_key",
    "reclaim",
    "release",
    "set_holder",
    "status",
]

ADHOC = "_adhoc"
"""The cluster name of leases on ``--nodes`` hosts that belong to no cluster."""
BOOK = "machines"


@dataclass(frozen=True)
class Lease:
    """Who holds one machine: the run, its holder process on ``hostname`` (the control host), since when."""

    key: str
    node: str
    run_id: str
    pid: int | None
    pid_start: int | None
    hostname: str
    started_at: str
    cluster: str = ""
    rank: int | None = None
    ports: list[int] = field(default_factory=list)

    def holder_alive(self) -> bool | None:
        """True/False for a holder on this host; None when unknowable (other host, detached)."""
        if self.pid is None or self.hostname != socket.gethostname():
            return None
        return _pid_alive(self.pid, self.pid_start)


@dataclass(frozen=True)
class RankStatus:
    """One node of a cluster and the lease on its machine (None when free)."""

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


def machine_key(node: Node) -> str:
    """The normalised address a machine is leased under (see the module docstring)."""
    addr = node.address.strip().strip("[]").lower().rstrip(".")
    port = f":{node.port}" if node.port != 22 else ""
    if node.local or addr in ("localhost", "localhost.localdomain"):
        return "localhost" + port
    ip = _ip(addr)
    if ip is None:
        with contextlib.suppress(OSError, UnicodeError):
            ip = _ip(str(socket.getaddrinfo(addr, None)[0][4][0]))
    if ip is not None and ip.is_loopback:
        return "localhost" + port
    return (ip.compressed if ip is not None else addr) + port


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        return ip.ipv4_mapped
    return ip


# -- public API --------------------------------------------------------------------------------
def acquire(
    cluster: str | None,
    count: int | None = None,
    *,
    run_id: str,
    hosts: Sequence[str] | None = None,
    pid: int | None = -1,
    inventory: Inventory | None = None,
    ports: Sequence[int] = (),
) -> list[Node]:
    """Lease ``count`` nodes of ``cluster`` (the first free ranks, in rank order) or exactly ``hosts``
    (names or addresses, any cluster; hosts in no cluster become ad-hoc root@host:22 nodes).

    All or nothing: raises :class:`AllocationError` naming the holders when not enough are free.
    ``pid`` is the holder process (default: this process; None: held until :func:`release`)."""
    inv = inventory if inventory is not None else _load()
    holder = os.getpid() if pid == -1 else pid
    if hosts:
        picks = [inv.find(h) or adhoc_node(h, i) for i, h in enumerate(hosts)]
        return acquire_nodes(picks, run_id=run_id, pid=holder, ports=ports, given=hosts)
    if cluster is None or count is None:
        raise AllocationError("nothing to allocate: give a cluster and a node count, or hosts")
    nodes = inv.get(cluster).nodes
    with _locked() as book:
        _reclaim_book(book)
        free = [n for n in nodes if machine_key(n) not in book]
        if len(free) < count:
            raise _not_enough(cluster, nodes, book, count)
        _grant(book, free[:count], run_id, holder, ports)
    return free[:count]


def acquire_nodes(
    nodes: Sequence[Node],
    *,
    run_id: str,
    pid: int | None = -1,
    ports: Sequence[int] = (),
    given: Sequence[str] | None = None,
) -> list[Node]:
    """Lease exactly ``nodes`` (the local machine, ``--nodes`` hosts): all or nothing."""
    holder = os.getpid() if pid == -1 else pid
    keys = [machine_key(n) for n in nodes]
    if len(set(keys)) != len(keys):
        raise AllocationError(f"a machine is given twice: {', '.join(given or [n.name for n in nodes])}")
    with _locked() as book:
        _reclaim_book(book)
        _check_free(book, nodes)
        _grant(book, list(nodes), run_id, holder, ports)
    return list(nodes)


def release(run_id: str) -> list[Lease]:
    """Free every lease of ``run_id``; returns what was freed."""
    with _locked() as book:
        return [book.pop(k) for k, lease in list(book.items()) if lease.run_id == run_id]


def set_holder(run_id: str, pid: int | None) -> int:
    """Hand ``run_id``'s leases to another holder process (None: detached); returns how many."""
    n = 0
    with _locked() as book:
        for key, lease in list(book.items()):
            if lease.run_id == run_id:
                book[key] = _lease(lease, pid)
                n += 1
    return n


def reclaim() -> list[Lease]:
    """Free the leases whose holder process is dead (holders on this control host only)."""
    with _locked() as book:
        return _reclaim_book(book)


def status(cluster: str, *, inventory: Inventory | None = None) -> list[RankStatus]:
    """Every node of ``cluster`` in rank order with the lease on its machine (None = free)."""
    inv = inventory if inventory is not None else _load()
    nodes = inv.get(cluster).nodes
    with _locked() as book:
        pass
    return [RankStatus(n, book.get(machine_key(n))) for n in nodes]


def leases(cluster: str | None = None) -> dict[str, Lease]:
    """The lease table (machine key -> lease); with ``cluster``, the leases taken as its nodes
    (:data:`ADHOC`: those taken as ad-hoc hosts or the local machine)."""
    with _locked() as book:
        pass
    want = "" if cluster == ADHOC else cluster
    return {k: v for k, v in book.items() if cluster is None or v.cluster == want}


# -- internals ---------------------------------------------------------------------------------
Book = dict[str, Lease]


def _load() -> Inventory:
    from lair.inventory.store import load_inventory

    return load_inventory()


def _dir() -> Path:
    from lair import config

    return config.state_dir() / "leases"


@contextlib.contextmanager
def _locked() -> Iterator[Book]:
    """Lock the book, load it, and write it back if it changed when the block ends without an error."""
    d = _dir()
    d.mkdir(parents=True, exist_ok=True)
    fd = os.open(d / f"{BOOK}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        book = _read(d / f"{BOOK}.json")
        before = dict(book)
        yield book
        if book != before:
            _write(d / f"{BOOK}.json", book)
    finally:
        os.close(fd)


def _read(path: Path) -> Book:
    if not path.exists():
        return {}
    data = json.loads(path.read_text(encoding="utf-8") or "{}")
    return {k: Lease(**v) for k, v in data.get("leases", {}).items()}


def _write(path: Path, book: Book) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    body = {"leases": {k: asdict(v) for k, v in sorted(book.items())}}
    tmp.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _lease(old: Lease, pid: int | None) -> Lease:
    """``old`` held by another process."""
    return Lease(**{**asdict(old), "pid": pid, "pid_start": _pid_start(pid) if pid is not None else None})


def _new(node: Node, run_id: str, pid: int | None, ports: Sequence[int]) -> Lease:
    return Lease(
        key=machine_key(node),
        node=node.name,
        run_id=run_id,
        pid=pid,
        pid_start=_pid_start(pid) if pid is not None else None,
        hostname=socket.gethostname(),
        started_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
        cluster=node.cluster,
        rank=node.rank if node.cluster else None,
        ports=list(ports),
    )


def _check_free(book: Book, nodes: Sequence[Node]) -> None:
    taken = [(n, book[machine_key(n)]) for n in nodes if machine_key(n) in book]
    if taken:
        held = ", ".join(f"{n.name} (held by run {lease.run_id})" for n, lease in taken)
        raise AllocationError(f"nodes busy: {held}", hint="stop that run (lair stop RUN) or pick other nodes")


def _grant(book: Book, nodes: Sequence[Node], run_id: str, pid: int | None, ports: Sequence[int]) -> None:
    for n in nodes:
        book[machine_key(n)] = _new(n, run_id, pid, ports)


def _not_enough(cluster: str, nodes: list[Node], book: Book, count: int) -> AllocationError:
    held_by = [book[machine_key(n)] for n in nodes if machine_key(n) in book]
    runs = sorted({lease.run_id for lease in held_by})
    free = len(nodes) - len(held_by)
    return AllocationError(
        f"cluster {cluster!r} has {free} free of {len(nodes)} nodes, {count} needed"
        + (f" (held by runs: {', '.join(runs)})" if runs else ""),
        hint="see `lair nodes`; stop a run with `lair stop RUN`",
    )


def _reclaim_book(book: Book) -> list[Lease]:
    return [book.pop(k) for k, lease in list(book.items()) if lease.holder_alive() is False]


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
