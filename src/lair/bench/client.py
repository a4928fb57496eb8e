"""A low-overhead HTTP/1.1 streaming client over raw asyncio sockets.

While a stream runs, the client only appends ``(arrival time, bytes)`` for every read: no
de-chunking, no SSE splitting, no JSON. All parsing happens after the cell, when nothing is being
timed, and maps each SSE line back to the read that completed it. One connection per request with
``Connection: close``; the response ends at EOF or at the chunked terminator.

Arrival time: for plain-HTTP streams the socket asks the kernel for receive timestamps
(``SO_TIMESTAMPNS``, read with ``recvmsg``), so a stamp is the moment the bytes reached the host, not
the moment a busy event loop or an idle virtual CPU got round to reading them; the monotonic clock
at read time is the fallback (TLS streams, kernels without the option).
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import struct
import time
from bisect import bisect_left
from dataclasses import dataclass
from itertools import accumulate
from typing import Any
from urllib.parse import urlsplit

from lair.bench.definitions import RequestTiming
from lair.errors import BenchError

__all__ = [
    "Endpoint",
    "RawStream",
    "StreamProtocol",
    "chat_request",
    "http_request",
    "open_raw_stream",
    "open_stream",
    "parse_stream",
]

_TERMINATOR = b"0\r\n\r\n"
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_READ_SIZE = 1 << 15
"""Small enough that each read buffer comes from the heap: a larger one costs mmap/mremap/munmap per read."""


def _realtime_offset() -> float:
    """CLOCK_REALTIME - perf_counter, from the closest of a few back-to-back readings."""
    best = (1.0, 0.0)
    for _ in range(7):
        a = time.perf_counter()
        rt = time.clock_gettime(time.CLOCK_REALTIME)
        b = time.perf_counter()
        best = min(best, (b - a, rt - (a + b) / 2))
    return best[1]


_OFFSET = _realtime_offset()


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where an OpenAI-compatible server listens: ``http(s)://host:port[/prefix]``."""

    scheme: str
    host: str
    port: int
    prefix: str

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        u = urlsplit(url if "://" in url else "http://" + url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise BenchError(f"not an http(s) URL: {url}", hint="e.g. http://127.0.0.1:8000")
        port = u.port or (443 if u.scheme == "https" else 80)
        prefix = u.path.rstrip("/")
        if prefix.endswith("/v1"):
            prefix = prefix[:-3]
        return cls(u.scheme, u.hostname, port, prefix)

    def path(self, p: str) -> str:
        return self.prefix + p

    @property
    def netloc(self) -> str:
        return f"{self.host}:{self.port}"


def _request_bytes(ep: Endpoint, method: str, path: str, body: bytes, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {ep.path(path)} HTTP/1.1", f"Host: {ep.netloc}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    if body or method == "POST":
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class StreamProtocol(asyncio.Protocol):
    """Records every read with its arrival time; nothing else on the hot path."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.reads: list[bytes] = []
        self.transport: asyncio.Transport | None = None
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.send_t = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.times.append(time.perf_counter())
        self.reads.append(data)
        if data.endswith(_TERMINATOR) and len(self.reads) > 1:
            self.transport.close()  # type: ignore[union-attr]

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)

    def send(self, payload: bytes) -> None:
        """Write the request; the send time is taken just before the write."""
        self.send_t = time.perf_counter()
        self.transport.write(payload)  # type: ignore[union-attr]

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class RawStream:
    """A plain-HTTP stream on a non-blocking socket read with ``recvmsg`` and kernel timestamps."""

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        self.sock, self.loop, self.fd = sock, loop, sock.fileno()
        self.times: list[float] = []
        self.stamps: list[bytes] = []
        self.reads: list[bytes] = []
        self.done: asyncio.Future[None] = loop.create_future()
        self.send_t = 0.0
        self._rest = b""
        loop.add_reader(self.fd, self._on_read)

    def _on_read(self) -> None:
        try:
            data, anc, _, _ = self.sock.recvmsg(_READ_SIZE, 64)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.close()
            return
        self.times.append(time.perf_counter())
        self.stamps.append(anc[0][2] if anc else b"")
        self.reads.append(data)
        if data.endswith(_TERMINATOR) and len(self.reads) > 1:
            self.close()

    def send(self, payload: bytes) -> None:
        """Write the request; the send time is taken just before the write."""
        self.send_t = time.perf_counter()
        try:
            n = self.sock.send(payload)
        except BlockingIOError:
            n = 0
        if n < len(payload):
            self._rest = payload[n:]
            self.loop.add_writer(self.fd, self._on_write)

    def _on_write(self) -> None:
        try:
            n = self.sock.send(self._rest)
        except BlockingIOError:
            return
        except OSError:
            n = len(self._rest)
        self._rest = self._rest[n:]
        if not self._rest:
            self.loop.remove_writer(self.fd)

    def close(self) -> None:
        if self.sock.fileno() >= 0:
            self.loop.remove_reader(self.fd)
            if self._rest:
                self.loop.remove_writer(self.fd)
            self.sock.close()
        if not self.done.done():
            self.done.set_result(None)

    def arrival_times(self) -> list[float]:
        """Per read: the kernel's receive time on the perf_counter clock, else the read time."""
        out = []
        for local, stamp in zip(self.times, self.stamps, strict=True):
            if len(stamp) >= 16:
                sec, nsec = struct.unpack("qq", stamp[:16])
                kernel = sec + nsec * 1e-9 - _OFFSET
                out.append(kernel if self.send_t <= kernel <= local + 1e-3 else local)
            else:
                out.append(local)
        return out


_RESOLVED: dict[tuple[str, int], Any] = {}


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
    return RawStream(sock, loop)


async def open_stream(ep: Endpoint) -> StreamProtocol:
    """Connect (TLS for https) and return the idle protocol, ready to :meth:`StreamProtocol.send`."""
    loop = asyncio.get_running_loop()
    ctx = ssl.create_default_context() if ep.scheme == "https" else None
    try:
        _, proto = await loop.create_connection(
            StreamProtocol, ep.host, ep.port, ssl=ctx, server_hostname=ep.host if ctx else None
        )
    except OSError as exc:
        raise BenchError(f"cannot connect to {ep.scheme}://{ep.netloc}: {exc}") from exc
    return proto


def chat_request(ep: Endpoint, body: dict[str, Any], api_key: str | None) -> bytes:
    """The bytes of one streamed chat-completions POST."""
    headers = {"Accept": "text/event-stream"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    data = json.dumps(body, separators=(",", ":")).encode()
    return _request_bytes(ep, "POST", "/v1/chat/completions", data, headers)


async def http_request(
    ep: Endpoint,
    method: str,
    path: str,
    body: bytes = b"",
    api_key: str | None = None,
    timeout_s: float = 30.0,
) -> tuple[int, bytes]:
    """A plain request (``/metrics``, ``/v1/models``): returns (status, de-chunked body)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    proto = await open_stream(ep)
    proto.send(_request_bytes(ep, method, path, body, headers))
    try:
        await asyncio.wait_for(proto.done, timeout_s)
    except TimeoutError as exc:
        proto.transport.close()  # type: ignore[union-attr]
        raise BenchError(f"{method} {path}: no answer in {timeout_s:.0f} s") from exc
    status, _, segments, raw = _split_response(b"".join(proto.reads))
    return status, b"".join(raw[s:e] for s, e in segments)


def _split_response(raw: bytes) -> tuple[int, dict[str, str], list[tuple[int, int]], bytes]:
    """Status, headers and the body's byte ranges in ``raw`` (de-chunked)."""
    head_end = raw.find(b"\r\n\r\n")
    if head_end < 0:
        return 0, {}, [], raw
    head = raw[:head_end].decode("latin-1").split("\r\n")
    parts = head[0].split(" ", 2)
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    headers = {}
    for line in head[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    start = head_end + 4
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return status, headers, _dechunk(raw, start), raw
    return status, headers, [(start, len(raw))], raw


def _dechunk(raw: bytes, pos: int) -> list[tuple[int, int]]:
    out = []
    while True:
        eol = raw.find(b"\r\n", pos)
        if eol < 0:
            break
        size = int(raw[pos:eol].split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out.append((eol + 2, min(eol + 2 + size, len(raw))))
        pos = eol + 2 + size + 2
    return out


class _OffsetMap:
    """Maps an offset in the de-chunked body back to the arrival time of the read holding it."""

    def __init__(self, segments: list[tuple[int, int]], times: list[float], reads: list[bytes]) -> None:
        self.segments = segments
        self.body_ends = list(accumulate(e - s for s, e in segments))
        self.read_ends = list(accumulate(len(r) for r in reads))
        self.times = times

    def time_at(self, body_end: int) -> float:
        """Arrival of the byte just before body offset ``body_end``."""
        i = bisect_left(self.body_ends, body_end)
        seg_start = self.body_ends[i - 1] if i else 0
        raw_end = self.segments[i][0] + (body_end - seg_start)
        j = bisect_left(self.read_ends, raw_end)
        return self.times[min(j, len(self.times) - 1)]


def parse_stream(send_t: float, times: list[float], reads: list[bytes]) -> RequestTiming:
    """Turn the recorded reads of one streamed response into a :class:`RequestTiming`."""
    r = RequestTiming(send_t=send_t, done_t=times[-1] if times else send_t)
    status, _, segments, raw = _split_response(b"".join(reads))
    r.status = status
    if status != 200:
        body = b"".join(raw[s:e] for s, e in segments)
        r.error = f"HTTP {status}: {body[:300].decode('utf-8', 'replace')}" if status else "no response"
        return r
    body = b"".join(raw[s:e] for s, e in segments)
    omap = _OffsetMap(segments, times, reads)
    texts: list[str] = []
    pos = 0
    for line in body.split(b"\n"):
        end = pos + len(line)
        pos = end + 1
        if line.startswith(b"data:"):
            _take_event(r, line[5:].strip(), end, omap, texts)
    r.text = "".join(texts)
    return r


def _take_event(r: RequestTiming, data: bytes, end: int, omap: _OffsetMap, texts: list[str]) -> None:
    if not data or data == b"[DONE]":
        return
    ev = json.loads(data)
    if "error" in ev:
        r.error = str(ev["error"])[:300]
        return
    usage = ev.get("usage")
    text = ""
    for choice in ev.get("choices") or ():
        delta = choice.get("delta") or {}
        text += (delta.get("content") or "") + (
            delta.get("reasoning_content") or delta.get("reasoning") or ""
        )
    if text:
        r.content_times.append(omap.time_at(end))
        r.content_chars.append(len(text))
        texts.append(text)
        if usage and usage.get("completion_tokens") is not None:
            r.content_cum_tokens.append(int(usage["completion_tokens"]))
    if usage:
        _take_usage(r, usage)


def _take_usage(r: RequestTiming, usage: dict[str, Any]) -> None:
    if usage.get("prompt_tokens") is not None:
        r.prompt_tokens = int(usage["prompt_tokens"])
    if usage.get("completion_tokens") is not None:
        r.completion_tokens = int(usage["completion_tokens"])
    details = usage.get("prompt_tokens_details") or {}
    if details.get("cached_tokens") is not None:
        r.cached_tokens = int(details["cached_tokens"])
