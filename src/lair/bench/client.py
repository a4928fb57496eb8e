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
import re
import ssl
import time
from bisect import bisect_left
from collections.abc import Callable
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
    "error_message",
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
        raise connect_error(f"{ep.scheme}://{ep.netloc}", exc) from exc
    return proto


def connect_error(url: str, exc: OSError) -> BenchError:
    """``cannot connect to URL: connection refused`` (or the socket's own reason), with what to check."""
    inner = getattr(exc, "reason", None)  # urllib's URLError wraps the socket's error
    reason = inner if isinstance(inner, OSError) else exc
    said = (
        "connection refused (nothing listens there)"
        if isinstance(reason, ConnectionRefusedError)
        else str(reason)
    )
    return BenchError(
        f"cannot connect to {url}: {said}",
        hint="is the server up? `lair status` lists lair's runs; check the host and port of the URL",
    )


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


def error_message(body: bytes) -> str:
    """The server's own words in an error body: OpenAI's ``{"error": {"message"}}``, vLLM's
    ``{"message"}``, a bare ``{"error": "..."}``, else the body's start."""
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        inner = doc.get("error")
        for cand in (inner.get("message") if isinstance(inner, dict) else inner, doc.get("message")):
            if isinstance(cand, str) and cand:
                return cand[:500]
    return body[:300].decode("utf-8", "replace").strip() or "(empty body)"


def parse_stream(send_t: float, times: list[float], reads: list[bytes], full: bool = False) -> RequestTiming:
    """Turn the recorded reads of one streamed response into a :class:`RequestTiming`.

    Only the final usage event is JSON-decoded; content events are found and measured by byte
    search, which gives the same result as decoding every event (``full=True``, also the path taken
    for streams with an error event or an event the byte search does not cover)."""
    r = RequestTiming(send_t=send_t, done_t=times[-1] if times else send_t)
    status, _, segments, raw = _split_response(b"".join(reads))
    r.status = status
    if status != 200:
        body = b"".join(raw[s:e] for s, e in segments)
        r.error = f"HTTP {status}: {error_message(body)}" if status else "no response"
        return r
    if segments and not full and not _has_key(raw, segments[0][0], b'"error"'):
        if _lines_whole(segments, raw):  # scan the raw bytes: offsets there are read offsets
            read_ends = list(accumulate(len(x) for x in reads))
            if _scan_events(r, raw, segments[0][0], lambda ends: _times_at(read_ends, times, ends)):
                return r
        else:
            body = b"".join(raw[s:e] for s, e in segments)
            if _scan_events(r, body, 0, _OffsetMap(segments, times, reads).times_at):
                return r
    body = b"".join(raw[s:e] for s, e in segments)
    _decode_events(r, body, _OffsetMap(segments, times, reads))
    return r


def _lines_whole(segments: list[tuple[int, int]], raw: bytes) -> bool:
    """True when no SSE line is split by chunk framing (every chunk ends a line, as servers send
    them), so the raw bytes can be searched in place of the de-chunked body."""
    if len(segments) == 1 and segments[0][1] == len(raw):
        return True
    return all(raw[e - 1] == 10 for _, e in segments)


def _times_at(read_ends: list[int], times: list[float], ends: list[int]) -> list[float]:
    """Arrival of the read holding the byte just before each raw offset."""
    last = len(times) - 1
    return [times[min(bisect_left(read_ends, e), last)] for e in ends]


_TEXT = re.compile(rb'"(?:content|reasoning_content|reasoning)"[ \t\r]*:[ \t\r]*"((?:[^"\\\n]|\\.)*)"')
"""A text field and its (still JSON-escaped) string value. Outside a JSON string the quoted name can
only be a key, and the value pattern consumes any string whole, escaped quotes included."""
_COMPLETION = re.compile(rb'"completion_tokens"[ \t\r]*:[ \t\r]*(\d+)')
_USAGE_KEY = re.compile(rb'"usage"\s*:\s*\{')
_COLON = re.compile(rb"\s*:")


def _has_key(buf: bytes, lo: int, quoted: bytes) -> bool:
    """Whether ``quoted`` (a JSON key with its quotes) appears as a key in ``buf`` from ``lo`` on."""
    pos = buf.find(quoted, lo)
    while pos >= 0:
        if _COLON.match(buf, pos + len(quoted)):
            return True
        pos = buf.find(quoted, pos + 1)
    return False


def _scan_events(r: RequestTiming, buf: bytes, lo: int, times_at: Callable[[list[int]], list[float]]) -> bool:
    """The fast, exact parse of the events in ``buf[lo:]``: only the final usage event is
    JSON-decoded, every content event is found and read by byte search. Returns False (recording
    nothing) when the stream needs the full parse: an event with more than one text field, or text
    or a final usage that does not decode."""
    usable, usage = _last_usage(buf, lo)
    if not usable:
        return False
    counts = buf.count(b'"completion_tokens"', lo)  # more than one: usage in every chunk
    only = buf.find(b'"completion_tokens"', lo) if counts == 1 else -1
    ends: list[int] = []
    parts: list[bytes] = []
    chars: list[int] = []
    cum: list[int] = []
    line_end = -1
    for m in _TEXT.finditer(buf, lo):
        if m.start() < line_end:
            return False  # several text fields in one event: the full parse decides
        text, line_start = m.group(1), buf.rfind(b"\n", lo, m.start()) + 1
        line_end = buf.find(b"\n", m.end())
        line_end = len(buf) if line_end < 0 else line_end
        if not text or not buf.startswith(b"data:", max(line_start, lo)):
            continue
        if b"\\" in text:
            try:
                text = json.loads(b'"' + text + b'"').encode()
            except (ValueError, UnicodeEncodeError):
                return False  # not JSON, or a lone surrogate: the full parse decides
        ends.append(line_end)
        parts.append(text)
        chars.append(len(text) if text.isascii() else len(text.decode("utf-8", "replace")))
        usage_here = counts > 1 or line_start <= only < line_end
        if usage_here and (c := _COMPLETION.search(buf, line_start, line_end)) is not None:
            cum.append(int(c.group(1)))
    r.content_times, r.content_chars, r.content_cum_tokens = times_at(ends), chars, cum
    r.text = b"".join(parts).decode("utf-8", "replace")
    if usage:
        _take_usage(r, usage)
    return True


def _last_usage(buf: bytes, lo: int) -> tuple[bool, dict[str, Any] | None]:
    """(decodes, the usage object of the last event that has one, None when no event has)."""
    hi = len(buf)
    while (pos := buf.rfind(b'"usage"', lo, hi)) >= 0:
        hi = pos
        if _USAGE_KEY.match(buf, pos) is None:
            continue  # "usage": null, or the word in a text
        start, end = buf.rfind(b"\n", lo, pos) + 1, buf.find(b"\n", pos)
        line = buf[max(start, lo) : end if end >= 0 else len(buf)]
        try:
            ev = json.loads(line[5:]) if line[:5] == b"data:" else None
        except ValueError:
            return False, None
        usage = ev.get("usage") if isinstance(ev, dict) else None
        if isinstance(usage, dict) and usage:
            return True, usage
    return True, None


def _decode_events(r: RequestTiming, body: bytes, stamps: _OffsetMap) -> None:
    """The full parse: every event JSON-decoded (streams with errors or unusual events)."""
    datas, ends = _data_lines(body)
    texts: list[str] = []
    usage = None
    for ev, t in zip(_decode_all(datas), stamps.times_at(ends), strict=True):
        if isinstance(ev, dict):
            usage = _take_event(r, ev, t, texts) or usage
    if usage:
        _take_usage(r, usage)
    r.text = "".join(texts)


def _take_event(r: RequestTiming, ev: dict[str, Any], t: float, texts: list[str]) -> dict[str, Any] | None:
    """Record a content chunk; return the event's usage (the last one seen is the final count)."""
    if "error" in ev:
        r.error = error_message(json.dumps(ev).encode())
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
