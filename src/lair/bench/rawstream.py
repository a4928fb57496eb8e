"""The cheap, exact way to read many plain-HTTP streams at once.

Sockets are connected with asyncio, then one thread writes every request back to back and reads
every response with bare ``epoll`` loops and ``recvmsg``: per read it appends the bytes, the read time
and the kernel's receive timestamp, nothing more (the asyncio machinery costs about twice as much CPU
per read). The kernel timestamp (``SO_TIMESTAMPNS``) is the moment the latest bytes of a read reached
the host, so neither a busy loop nor an idle virtual CPU waking up late shifts it; the monotonic clock
at read time is the fallback when the kernel gives none.

Two phases per stream keep the syscalls few without blurring the numbers that matter:

*eager*
    Until a read brings the first content chunk (a byte search for a non-empty ``content`` or
    reasoning string), the stream is read as soon as bytes arrive, so the first content chunk gets
    its own read and its own kernel timestamp: TTFT is exact.
*batched*
    After that, the stream is read once every ``read_interval_s`` (a tick): one read then carries the
    few chunks that arrived since the last tick, and its kernel timestamp is the arrival of the latest
    of them. The last content chunk arrives together with the end of the response (finish reason,
    usage, ``[DONE]``), so it too keeps its true arrival time; only the chunks in between are stamped
    up to one tick late. An interval of 0 keeps every stream eager.
"""

from __future__ import annotations

import asyncio
import errno
import os
import re
import select
import socket
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lair.bench.client import TERMINATOR, Endpoint
from lair.errors import BenchError

__all__ = ["RawStream", "Sent", "open_raw_stream", "pump", "pump_scheduled", "resolve"]

_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_READ_SIZE = 1 << 16
"""The pump's one read buffer: a tick's worth of chunks fits many times over."""
_RESOLVED: dict[tuple[str, int], Any] = {}
_TIMESPEC = struct.Struct("qq")
_CONTENT = re.compile(rb'"(?:content|reasoning_content|reasoning)"\s*:\s*"[^"]')
"""A non-empty text field: the read holds a content chunk. Split over two reads it is missed, which
only keeps the stream eager one read longer."""
_TAIL = 64
"""Bytes of the previous read searched again with the next one (a key split between reads)."""


def realtime_offset(clock: Callable[[], float] = time.perf_counter) -> float:
    """CLOCK_REALTIME - ``clock``, from the closest of a few back-to-back readings."""
    best = (1.0, 0.0)
    for _ in range(7):
        a = clock()
        rt = time.clock_gettime(time.CLOCK_REALTIME)
        b = clock()
        best = min(best, (b - a, rt - (a + b) / 2))
    return best[1]


class RawStream:
    """One request on a connected non-blocking socket, and what arrived for it.

    Per read: ``times`` (perf_counter at the read), ``stamps`` (the kernel's timestamp, raw),
    ``reads`` (the bytes) and ``due`` (the tick the read was scheduled for; 0 for eager reads).
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.times: list[float] = []
        self.stamps: list[bytes] = []
        self.reads: list[bytes] = []
        self.due: list[float] = []
        self.send_t = 0.0
        self.rest = b""
        self.eager = True
        self.finished = False
        self._kernel: list[float | None] | None = None

    def close(self) -> None:
        self.finished = True
        self.sock.close()

    def _kernel_times(self) -> list[float | None]:
        if self._kernel is not None:
            return self._kernel
        offset, unpack, lo = realtime_offset(), _TIMESPEC.unpack_from, self.send_t
        out: list[float | None] = []
        for local, stamp in zip(self.times, self.stamps, strict=True):
            kernel = None
            if len(stamp) >= 16:
                sec, nsec = unpack(stamp)
                kernel = sec + nsec * 1e-9 - offset
                if not lo <= kernel <= local + 1e-3:
                    kernel = None
            out.append(kernel)
        self._kernel = out
        return out

    def arrival_times(self) -> list[float]:
        """Per read: the kernel's receive time on the perf_counter clock, else the read time."""
        return [t if k is None else k for k, t in zip(self._kernel_times(), self.times, strict=True)]

    def read_lags(self, batched: bool) -> list[float]:
        """Per kernel-stamped eager (or batched) read: seconds between the bytes being due (arrived,
        and for a batched read its tick come) and the bench reading them."""
        return [
            max(0.0, t - max(k, due))
            for k, t, due in zip(self._kernel_times(), self.times, self.due, strict=True)
            if k is not None and (due > 0) == batched
        ]


async def resolve(ep: Endpoint) -> Any:
    """The endpoint's first address (``getaddrinfo``), looked up once per host and port."""
    if (ep.host, ep.port) not in _RESOLVED:
        infos = await asyncio.get_running_loop().getaddrinfo(ep.host, ep.port, type=socket.SOCK_STREAM)
        _RESOLVED[(ep.host, ep.port)] = infos[0]
    return _RESOLVED[(ep.host, ep.port)]


def _socket(info: Any) -> socket.socket:
    """A non-blocking TCP socket (no Nagle, kernel receive timestamps on) for ``info``'s address."""
    family, _, proto, _, _ = info
    sock = socket.socket(family, socket.SOCK_STREAM, proto)
    sock.setblocking(False)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        pass
    return sock


async def open_raw_stream(ep: Endpoint) -> RawStream:
    """Connect a plain-HTTP socket with kernel receive timestamps on."""
    loop = asyncio.get_running_loop()
    info = await resolve(ep)
    addr = info[4]
    sock = _socket(info)
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


class _Pump:
    """The two epoll sets: eager streams (read on arrival) and batched ones (read at each tick)."""

    def __init__(self, streams: list[RawStream], interval_s: float) -> None:
        self.eager, self.batched = select.epoll(), select.epoll()
        self.by_fd = {st.sock.fileno(): st for st in streams}
        self.interval = interval_s
        self.n_eager, self.n_batched = len(streams), 0
        self.view = memoryview(bytearray(_READ_SIZE))

    def close(self) -> None:
        self.eager.close()
        self.batched.close()

    def on_eager(self, fd: int, ev: int) -> None:
        st = self.by_fd[fd]
        if ev & select.EPOLLOUT and _flush(st):
            self.eager.modify(fd, select.EPOLLIN)
        if not ev & ~select.EPOLLOUT:
            return
        if _read(st, 0.0, self.view):
            self.eager.unregister(fd)
            self.n_eager -= 1
            st.close()
        elif self.interval > 0 and not st.eager:
            self.eager.unregister(fd)
            self.batched.register(fd, select.EPOLLIN)
            self.n_eager, self.n_batched = self.n_eager - 1, self.n_batched + 1

    def tick(self, due: float) -> None:
        for fd, _ in self.batched.poll(0):
            st = self.by_fd[fd]
            if _read(st, due, self.view):
                self.batched.unregister(fd)
                self.n_batched -= 1
                st.close()

    def run(self, deadline: float) -> None:
        next_tick = time.perf_counter() + self.interval
        while self.n_eager + self.n_batched:
            now = time.perf_counter()
            if now >= deadline:
                return
            if self.n_eager:
                wait = max(0.0, next_tick - now) if self.n_batched else 0.5
                for fd, ev in self.eager.poll(min(wait, deadline - now)):
                    self.on_eager(fd, ev)
            elif next_tick > now:
                time.sleep(min(next_tick, deadline) - now)
            if self.n_batched and time.perf_counter() >= next_tick:
                self.tick(next_tick)
                next_tick = max(next_tick + self.interval, time.perf_counter())


def pump(
    streams: list[RawStream], payloads: list[bytes], timeout_s: float, read_interval_s: float
) -> list[RawStream]:
    """Send every request back to back, then read until every response ends (blocking; run it in a
    thread); batched streams are read every ``read_interval_s``. Returns the streams still open at
    the deadline (closed here)."""
    p = _Pump(streams, read_interval_s)
    try:
        for st, payload in zip(streams, payloads, strict=True):
            _send(st, payload)
            p.eager.register(st.sock.fileno(), select.EPOLLIN | (select.EPOLLOUT if st.rest else 0))
        p.run(time.perf_counter() + timeout_s)
    finally:
        p.close()
    late = [st for st in streams if not st.finished]
    for st in late:
        st.close()
    return late


def _read(st: RawStream, due: float, view: memoryview) -> bool:
    """One read into the pump's buffer, keeping a copy of just the bytes read (allocating a whole
    read buffer per read costs more); True when the response has ended. An eager stream whose read
    holds content text stops being eager."""
    try:
        n, anc, _, _ = st.sock.recvmsg_into((view,), 64)
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True
    if not n:
        return True
    st.times.append(time.perf_counter())
    data = view[:n].tobytes()
    st.stamps.append(anc[0][2] if anc else b"")
    st.due.append(due)
    if st.eager:
        prev = st.reads[-1][-_TAIL:] if st.reads else b""
        st.eager = _CONTENT.search(prev + data) is None
    st.reads.append(data)
    return data.endswith(TERMINATOR) and len(st.reads) > 1


_CONNECT_AHEAD_S = 0.05
"""An open-loop request's connection is opened this long before its send time, so the send is
one write on an established connection."""
_PRECISE_S = 0.002
"""Within this of a send, the pump sleeps to it (nanosecond timer) instead of polling (epoll waits
in whole milliseconds, rounded up)."""
_EXPIRY_CHECK_S = 0.1


@dataclass
class Sent:
    """One open-loop request: when it was due, its stream (None: never sent), the requests in
    flight when it was sent, and why it failed on the client's side ("" when it did not)."""

    scheduled_t: float
    stream: RawStream | None = None
    in_flight: int = 0
    error: str = ""
    late: bool = False
    """Still open at its timeout (closed by the pump)."""


class _Scheduled(_Pump):
    """The pump of an open-loop cell: requests sent at their scheduled times, whatever the server's
    state, while every open stream is read as :func:`pump` reads them."""

    def __init__(self, info: Any, payloads: Sequence[bytes], due: list[float], interval_s: float) -> None:
        super().__init__([], interval_s)
        self.info, self.payloads, self.due = info, payloads, due
        self.sent = [Sent(t) for t in due]
        self.socks: list[socket.socket | None] = [None] * len(due)
        self.i_conn = 0
        self.open: dict[int, Sent] = {}

    def _connect(self, i: int) -> None:
        sock = _socket(self.info)
        err = sock.connect_ex(self.info[4])
        if err not in (0, errno.EINPROGRESS):
            sock.close()
            self.sent[i].error = f"connect: {os.strerror(err)}"
            return
        self.socks[i] = sock

    def _send(self, i: int, max_open: int) -> None:
        rec, sock = self.sent[i], self.socks[i]
        if sock is None:
            return
        if len(self.open) >= max_open:
            sock.close()
            rec.error = f"client limit: {max_open} requests already open"
            return
        st = RawStream(sock)
        try:
            _send(st, self.payloads[i])
        except OSError as exc:
            sock.close()
            rec.error = f"connect: {exc.strerror or exc}"
            return
        rec.stream, rec.in_flight = st, len(self.open)
        fd = sock.fileno()
        self.by_fd[fd] = st
        self.open[fd] = rec
        self.eager.register(fd, select.EPOLLIN | (select.EPOLLOUT if st.rest else 0))
        self.n_eager += 1

    def _forget_finished(self) -> None:
        for fd in [fd for fd, rec in self.open.items() if rec.stream is not None and rec.stream.finished]:
            del self.open[fd]

    def _expire(self, now: float, timeout_s: float) -> None:
        for fd, rec in list(self.open.items()):
            st = rec.stream
            if st is not None and not st.finished and now - st.send_t > timeout_s:
                for ep in (self.eager, self.batched):
                    try:
                        ep.unregister(fd)
                    except OSError:
                        continue
                    if ep is self.eager:
                        self.n_eager -= 1
                    else:
                        self.n_batched -= 1
                rec.late = True
                st.close()
                del self.open[fd]

    def _wait(self, wake: float, now: float) -> None:
        """Serve reads until ``wake`` (a send: slept to exactly)."""
        wait = wake - now
        if wait <= _PRECISE_S:
            time.sleep(max(0.0, wait))
        elif self.n_eager:
            for fd, ev in self.eager.poll(wait - _PRECISE_S / 2):
                self.on_eager(fd, ev)
        else:
            time.sleep(wait - _PRECISE_S / 2)

    def run_scheduled(self, timeout_s: float, max_open: int) -> None:
        n, i = len(self.due), 0
        next_tick = self.due[0] + self.interval if n else 0.0
        next_check = time.perf_counter() + _EXPIRY_CHECK_S
        while i < n or self.n_eager + self.n_batched:
            now = time.perf_counter()
            while self.i_conn < n and self.due[self.i_conn] - _CONNECT_AHEAD_S <= now:
                self._connect(self.i_conn)
                self.i_conn += 1
            if i < n and self.due[i] <= now:
                self._send(i, max_open)
                i += 1
                continue
            if now >= next_check:
                self._forget_finished()
                self._expire(now, timeout_s)
                next_check = now + _EXPIRY_CHECK_S
            wake = min(
                self.due[i] if i < n else next_check,
                self.due[self.i_conn] - _CONNECT_AHEAD_S if self.i_conn < n else next_check,
                next_tick if self.n_batched else next_check,
                next_check,
            )
            if i < n and wake == self.due[i]:
                self._wait(wake, now)
            elif self.n_eager:
                for fd, ev in self.eager.poll(max(0.0, wake - now)):
                    self.on_eager(fd, ev)
            else:
                time.sleep(max(0.0, wake - now))
            if time.perf_counter() >= next_tick:
                if self.n_batched:
                    self.tick(next_tick)
                next_tick = (
                    max(next_tick + self.interval, time.perf_counter()) if self.interval else now + 1.0
                )


def pump_scheduled(
    info: Any,
    payloads: Sequence[bytes],
    offsets: Sequence[float],
    timeout_s: float,
    read_interval_s: float,
    max_open: int,
) -> list[Sent]:
    """Send request *i* at ``offsets[i]`` seconds after now, each on its own connection opened just
    before, and read every response until it ends or its ``timeout_s`` (from its send) passes
    (blocking; run it in a thread). At most ``max_open`` requests are open at once: one due beyond
    that fails on the client's side, said so."""
    start = time.perf_counter() + _CONNECT_AHEAD_S
    p = _Scheduled(info, payloads, [start + o for o in offsets], read_interval_s)
    try:
        p.run_scheduled(timeout_s, max_open)
    finally:
        p.close()
        for rec, sock in zip(p.sent, p.socks, strict=True):
            if rec.stream is not None and not rec.stream.finished:
                rec.stream.close()
            elif rec.stream is None and sock is not None:
                sock.close()
    return p.sent
