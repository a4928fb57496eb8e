"""HTTP/1.1 for the bench: request bytes, an asyncio protocol (TLS streams, plain requests such as
``/metrics``), and the parser that turns the recorded reads of a stream into timings.

While a stream runs, the reader only appends ``(arrival time, bytes)`` for every read: no
de-chunking, no SSE splitting, no JSON. All parsing happens after the cell, when nothing is being
timed, and maps each SSE line back to the read that completed it. One connection per request with
``Connection: close``; the response ends at EOF or at the chunked terminator. Plain-HTTP streams use
the cheaper kernel-timestamped reader in :mod:`lair.bench.rawstream`.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from dataclasses import dataclass
from itertools import accumulate
from typing import Any
from urllib.parse import urlsplit

from lair.bench.definitions import RequestTiming
from lair.errors import BenchError

__all__ = [
    "Endpoint",
    "StreamProtocol",
    "chat_request",
    "http_request",
    "open_stream",
    "parse_stream",
]

TERMINATOR = b"0\r\n\r\n"
"""The last bytes of a chunked response."""


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
        if data.endswith(TERMINATOR) and len(self.reads) > 1:
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
    """Maps offsets in the de-chunked body back to the arrival time of the read holding them."""

    def __init__(self, segments: list[tuple[int, int]], times: list[float], reads: list[bytes]) -> None:
        self.segments = segments
        self.body_ends = list(accumulate(e - s for s, e in segments))
        self.read_ends = list(accumulate(len(r) for r in reads))
        self.times = times

    def times_at(self, body_ends: list[int]) -> list[float]:
        """Arrival of the byte just before each (ascending) body offset, in one forward walk."""
        out, i, j, last = [], 0, 0, len(self.times) - 1
        for end in body_ends:
            while self.body_ends[i] < end:
                i += 1
            raw_end = self.segments[i][0] + end - (self.body_ends[i - 1] if i else 0)
            while j < last and self.read_ends[j] < raw_end:
                j += 1
            out.append(self.times[j])
        return out


def _data_lines(body: bytes) -> tuple[list[bytes], list[int]]:
    """SSE ``data:`` payloads (without ``[DONE]``) and the body offset where each line ends."""
    datas, ends, pos = [], [], 0
    for line in body.split(b"\n"):
        end = pos + len(line)
        pos = end + 1
        if line[:5] == b"data:":
            data = line[5:].strip()
            if data and data != b"[DONE]":
                datas.append(data)
                ends.append(end)
    return datas, ends


def _decode_all(datas: list[bytes]) -> list[Any]:
    """All events in one JSON parse; line by line (skipping bad lines) if that fails."""
    try:
        events: list[Any] = json.loads(b"[" + b",".join(datas) + b"]")
        return events
    except ValueError:
        out = []
        for d in datas:
            try:
                out.append(json.loads(d))
            except ValueError:
                out.append({"error": f"unparsable event: {d[:80]!r}"})
        return out


def parse_stream(send_t: float, times: list[float], reads: list[bytes]) -> RequestTiming:
    """Turn the recorded reads of one streamed response into a :class:`RequestTiming`."""
    r = RequestTiming(send_t=send_t, done_t=times[-1] if times else send_t)
    status, _, segments, raw = _split_response(b"".join(reads))
    r.status = status
    body = b"".join(raw[s:e] for s, e in segments)
    if status != 200:
        r.error = f"HTTP {status}: {body[:300].decode('utf-8', 'replace')}" if status else "no response"
        return r
    datas, ends = _data_lines(body)
    texts: list[str] = []
    stamps = _OffsetMap(segments, times, reads).times_at(ends)
    usage = None
    for ev, t in zip(_decode_all(datas), stamps, strict=True):
        if isinstance(ev, dict):
            usage = _take_event(r, ev, t, texts) or usage
    if usage:
        _take_usage(r, usage)
    r.text = "".join(texts)
    return r


def _take_event(r: RequestTiming, ev: dict[str, Any], t: float, texts: list[str]) -> dict[str, Any] | None:
    """Record a content chunk; return the event's usage (the last one seen is the final count)."""
    if "error" in ev:
        r.error = str(ev["error"])[:300]
        return None
    usage: dict[str, Any] | None = ev.get("usage")
    choices = ev.get("choices")
    if choices:
        delta = choices[0].get("delta") or {}
        text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
        if len(choices) > 1 or (text and delta.get("content") and delta.get("reasoning_content")):
            text = _all_text(choices)
        if text:
            r.content_times.append(t)
            r.content_chars.append(len(text))
            texts.append(text)
            if usage and usage.get("completion_tokens") is not None:
                r.content_cum_tokens.append(usage["completion_tokens"])
    return usage


def _all_text(choices: list[dict[str, Any]]) -> str:
    parts = []
    for choice in choices:
        delta = choice.get("delta") or {}
        parts += [delta.get("content") or "", delta.get("reasoning_content") or delta.get("reasoning") or ""]
    return "".join(parts)


def _take_usage(r: RequestTiming, usage: dict[str, Any]) -> None:
    if usage.get("prompt_tokens") is not None:
        r.prompt_tokens = int(usage["prompt_tokens"])
    if usage.get("completion_tokens") is not None:
        r.completion_tokens = int(usage["completion_tokens"])
    details = usage.get("prompt_tokens_details") or {}
    if details.get("cached_tokens") is not None:
        r.cached_tokens = int(details["cached_tokens"])
