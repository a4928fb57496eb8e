"""The cheap, exact way to read many plain-HTTP streams at once.

Sockets are connected with asyncio, then one thread writes every request back to back and reads
every response with a bare ``epoll`` loop and ``recvmsg``: per read it appends the bytes, the
read time and the kernel's receive timestamp, nothing more (the asyncio machinery costs about twice
as much CPU per read). The kernel timestamp (``SO_TIMESTAMPNS``) is the moment the bytes reached
the host, so neither a busy loop nor an idle virtual CPU waking up late shifts it; the monotonic
clock at read time is the fallback when the kernel gives none.
"""

from __future__ import annotations

import asyncio
import select
import socket
import struct
import time
from typing import Any

from lair.bench.client import TERMINATOR, Endpoint
from lair.errors import BenchError

__all__ = ["RawStream", "open_raw_stream", "pump"]

_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_READ_SIZE = 1 << 15
"""Small enough that each read buffer comes from the heap: a larger one costs mmap/munmap per read."""
_RESOLVED: dict[tuple[str, int], Any] = {}
_TIMESPEC = struct.Struct("qq")


def _realtime_offset() -> float:
    """CLOCK_REALTIME - perf_counter, from the closest of a few back-to-back readings."""
    best = (1.0, 0.0)
    for _ in range(7):
        a = time.perf_counter()
        rt = time.clock_gettime(time.CLOCK_REALTIME)
        b = time.perf_counter()
        best = min(best, (b - a, rt - (a + b) / 2))
    return best[1]


class RawStream:
    """One request on a connected non-blocking socket, and what arrived for it."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.times: list[float] = []
        self.stamps: list[bytes] = []
        self.reads: list[bytes] = []
        self.send_t = 0.0
        self.rest = b""
        self.finished = False
        self._kernel: list[float | None] | None = None

    def close(self) -> None:
        self.finished = True
        self.sock.close()

    def _kernel_times(self) -> list[float | None]:
        if self._kernel is not None:
            return self._kernel
        offset, unpack = _realtime_offset(), _TIMESPEC.unpack_from
        out: list[float | None] = []
        for local, stamp in zip(self.times, self.stamps, strict=True):
            kernel = None
            if len(stamp) >= 16:
                sec, nsec = unpack(stamp)
                kernel = sec + nsec * 1e-9 - offset
            out.append(kernel if kernel is not None and self.send_t <= kernel <= local + 1e-3 else None)
        self._kernel = out
        return out

    def arrival_times(self) -> list[float]:
        """Per read: the kernel's receive time on the perf_counter clock, else the read time."""
        return [k if k is not None else t for k, t in zip(self._kernel_times(), self.times, strict=True)]

    def read_lags(self) -> list[float]:
        """Per kernel-stamped read: seconds between the bytes' arrival and the bench reading them."""
        return [
            max(0.0, t - k) for k, t in zip(self._kernel_times(), self.times, strict=True) if k is not None
        ]


async def open_raw_stream(ep: Endpoint) -> RawStream:
    """Connect a plain-HTTP socket with kernel receive timestamps on."""
    loop = asyncio.get_running_loop()
    if (ep.host, ep.port) not in _RESOLVED:
        infos = await loop.getaddrinfo(ep.host, ep.port, type=socket.SOCK_STREAM)
        _RESOLVED[(ep.host, ep.port)] = infos[0]
    family, _, proto, _, addr = _RESOLVED[(ep.host, ep.port)]
    sock = socket.socket(family, socket.SOCK_STREAM, proto)
    sock.setblocking(False)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        pass
    try:
        await loop.sock_connect(sock, addr)
    except OSError as exc:
        sock.close()
        raise BenchError(f"cannot connect to {ep.scheme}://{ep.netloc}: {exc}") from exc
    return RawStream(sock)


def _send(st: RawStream, payload: bytes) -> None:
    st.send_t = time.perf_counter()
    try:
        n = st.sock.send(payload)
    except BlockingIOError:
        n = 0
    st.rest = payload[n:]


def _flush(st: RawStream) -> bool:
    """Send more of a request that did not fit at once; True when all of it is out."""
    try:
        n = st.sock.send(st.rest)
    except BlockingIOError:
        return False
    except OSError:
        n = len(st.rest)
    st.rest = st.rest[n:]
    return not st.rest


def pump(streams: list[RawStream], payloads: list[bytes], timeout_s: float) -> list[RawStream]:
    """Send every request back to back, then read until every response ends (blocking; run it in a
    thread). Returns the streams still open at the deadline (closed here)."""
    ep = select.epoll()
    by_fd = {}
    for st, payload in zip(streams, payloads, strict=True):
        _send(st, payload)
        fd = st.sock.fileno()
        by_fd[fd] = st
        ep.register(fd, select.EPOLLIN | (select.EPOLLOUT if st.rest else 0))
    deadline, live = time.perf_counter() + timeout_s, len(streams)
    try:
        while live and time.perf_counter() < deadline:
            for fd, ev in ep.poll(0.5):
                st = by_fd[fd]
                if ev & select.EPOLLOUT and _flush(st):
                    ep.modify(fd, select.EPOLLIN)
                if ev & ~select.EPOLLOUT and _read(st):
                    ep.unregister(fd)
                    st.close()
                    live -= 1
    finally:
        ep.close()
    late = [st for st in streams if not st.finished]
    for st in late:
        st.close()
    return late


def _read(st: RawStream) -> bool:
    """One read; True when the response has ended."""
    try:
        data, anc, _, _ = st.sock.recvmsg(_READ_SIZE, 64)
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True
    if not data:
        return True
    st.times.append(time.perf_counter())
    st.stamps.append(anc[0][2] if anc else b"")
    st.reads.append(data)
    return data.endswith(TERMINATOR) and len(st.reads) > 1
