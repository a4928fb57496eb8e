"""A calibrated OpenAI-compatible streaming server: every timing it produces is known in advance.

    python -m lair.testing.calibrated_server [--port 0] [--ttft-ms 200] [--token-ms 10]
        [--tokens-per-chunk 1] [--first-chunk-tokens 1] [--role-first] [--no-usage]
        [--continuous-usage] [--prefix-cache] [--reply WORDS] [--reject-above N] [--max-model-len N]
        [--output text|repeat|empty-deltas|zero-tokens]

It prints ``listening HOST:PORT`` on stdout once it accepts connections, and serves until SIGTERM.

Timing model, for a request whose bytes were first read at ``t0`` (monotonic clock) and that asks
for ``N`` tokens (``max_tokens``): the first content chunk, holding ``first_chunk_tokens`` (B)
tokens, is written at ``t0 + ttft``; token ``j >= B`` is produced at ``t0 + ttft + (j - B + 1) *
token_delay`` and a chunk is written when its last token is produced (``tokens_per_chunk`` per
chunk). So the true per-stream decode rate is exactly ``1 / token_delay`` and the true TTFT is
``ttft``. Every deadline is absolute (``loop.call_at``), never a cumulative sleep. With
``role_first`` a role-only chunk (the trap for clients that count it as the first token) is written at
``t0 + ttft / 2``. The response head goes out with the first chunk, so taking in a request costs one
read and no write. ``t0`` is the kernel's receive timestamp (``SO_TIMESTAMPNS``), so a busy loop or
an idle virtual CPU does not shift it. Prompt tokens are the whitespace-separated words of all
message contents plus one per message. With ``prefix_cache`` a prompt whose first 256
characters were seen before reports ``cached_tokens = prompt_tokens - 1`` and counts a hit. With
``reject_above`` a prompt above that many tokens gets llama.cpp's 400 answer ("request (N tokens)
exceeds the available context size ..."), a limit the server does not list; ``max_model_len`` is
listed in ``/v1/models`` as vLLM does.

Output: by default each answer is words drawn from a small vocabulary by a generator seeded with the
prompt, so answers to different prompts differ and the same prompt gets the same answer; ``--reply
WORDS`` cycles through the given words instead. The broken servers the bench's validity gate must
catch: ``--output repeat`` sends one token (``tok``) for the whole answer, ``empty-deltas`` sends a
blank first chunk and empty deltas after it while usage counts every token, ``zero-tokens`` answers
200 with no content and ``completion_tokens: 0``.

Endpoints: ``POST /v1/chat/completions`` (streaming only), ``GET /v1/models``, ``GET /health``,
``GET /metrics`` (Prometheus text: requests, tokens, prefix-cache hits/queries, KV use) and
``GET /stats`` (JSON: per request ``recv_t``, ``first_write_t`` and ``last_write_t``, the server's
own truth).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from lair.bench.rawstream import realtime_offset

__all__ = ["CalibratedServer", "ServerConfig", "listening_process", "main", "running_server"]


@dataclass
class ServerConfig:
    """The knobs; see the module docstring for the timing model."""

    ttft_s: float = 0.2
    token_delay_s: float = 0.01
    tokens_per_chunk: int = 1
    first_chunk_tokens: int = 1
    role_first: bool = False
    usage: bool = True
    continuous_usage: bool = False
    prefix_cache: bool = False
    prefix_cache_longest: bool = False
    """A prefix cache by the longest prefix of tokens seen before (as an engine's block cache, in
    blocks of one token): ``cached_tokens`` is that prefix, at most ``prompt_tokens - 1``."""
    reply: list[str] = field(default_factory=list)
    """Words to cycle through; empty: words drawn by a generator seeded with the prompt."""
    output: str = "text"
    """``text``, or a broken server: ``repeat``, ``empty-deltas``, ``zero-tokens``."""
    model: str = "calibrated"
    reject_above: int | None = None
    max_model_len: int | None = None


OUTPUTS = ("text", "repeat", "empty-deltas", "zero-tokens")
_VOCAB = [
    "amber",
    "basil",
    "cedar",
    "delta",
    "ember",
    "fjord",
    "garnet",
    "harbor",
    "indigo",
    "juniper",
    "kelp",
    "lantern",
    "meadow",
    "nectar",
    "onyx",
    "pepper",
    "quartz",
    "raven",
    "saffron",
    "tundra",
    "umber",
    "violet",
    "willow",
    "xenon",
    "yarrow",
    "zephyr",
    "anchor",
    "bramble",
    "cobalt",
    "dune",
]


@dataclass
class _Counters:
    requests: int = 0
    prompt_tokens: int = 0
    tokens: int = 0
    cache_hits: int = 0
    cache_queries: int = 0
    running: int = 0
    seen: set[str] = field(default_factory=set)
    prompts: list[list[str]] = field(default_factory=list)
    stats: list[dict[str, Any]] = field(default_factory=list)


_CONTENT_LENGTH = re.compile(rb"(?i)\r\ncontent-length:[ \t]*(\d+)")
_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
)


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


class _Stream:
    """One streaming response: writes chunks at absolute deadlines."""

    def __init__(self, srv: CalibratedServer, transport: _Conn, body: dict[str, Any], t0: float):
        self.srv, self.cfg, self.tr = srv, srv.cfg, transport
        self.n = max(1, int(body.get("max_tokens") or body.get("max_completion_tokens") or 16))
        opts = body.get("stream_options") or {}
        self.usage = self.cfg.usage and bool(opts.get("include_usage"))
        self.cont = self.usage and (self.cfg.continuous_usage or bool(opts.get("continuous_usage_stats")))
        self.prompt_tokens, self.cached = srv.account_prompt(body.get("messages") or [])
        self.sent = 0
        self.head_sent = False
        self.t_first = t0 + self.cfg.ttft_s
        first = (body.get("messages") or [{}])[0].get("content") or ""
        last = str((body.get("messages") or [{}])[-1].get("content") or "")
        self.words = random.Random(zlib.crc32(last.encode())) if not self.cfg.reply else None
        self.stat: dict[str, Any] = {"recv_t": t0, "first_write_t": 0.0, "tokens": 0, "key": str(first)[:16]}
        srv.counters.stats.append(self.stat)
        head = b'data: {"id":"c","object":"chat.completion.chunk","model":"%s","choices":[' % (
            self.cfg.model.encode()
        )
        self.head = head

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Schedule the stream; the response head goes out with the first chunk (one write)."""
        if self.cfg.role_first:
            loop.call_at(self.t_first - self.cfg.ttft_s / 2, self._role)
        if self.cfg.output == "zero-tokens":
            loop.call_at(self.t_first, self._nothing)
        else:
            loop.call_at(self.t_first, self.emit, loop)

    def _nothing(self) -> None:
        """A 200 that carries no token: a stop chunk, usage of 0 completion tokens, the end."""
        self.n = 0
        self._write(b'{"index":0,"delta":{},"finish_reason":"stop"}', 0)
        self.finish()

    def _text(self, k: int) -> str:
        if self.cfg.output == "repeat":
            return " tok" * k
        if self.cfg.output == "empty-deltas":
            return " " if self.sent == 0 else ""
        if self.words is not None:
            return "".join(" " + self.words.choice(_VOCAB) for _ in range(k))
        words = self.cfg.reply
        return "".join(" " + words[(self.sent + i) % len(words)] for i in range(k))

    def _role(self) -> None:
        self._write(b'{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}', 0)

    def _usage(self, completion: int) -> bytes:
        return (
            b',"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,'
            % (
                self.prompt_tokens,
                completion,
                self.prompt_tokens + completion,
            )
            + b'"prompt_tokens_details":{"cached_tokens":%d}}' % self.cached
        )

    def _write(self, choice: bytes, completion: int) -> None:
        tail = self._usage(completion) if self.cont else b""
        data = _chunk(self.head + choice + b"]" + tail + b"}\n\n")
        if not self.head_sent:
            data, self.head_sent = _HEAD + data, True
        self.tr.write(data)

    def emit(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.tr.is_closing():
            self.srv.counters.running -= 1
            return
        k = min(
            self.cfg.first_chunk_tokens if self.sent == 0 else self.cfg.tokens_per_chunk, self.n - self.sent
        )
        text = self._text(k)
        self.sent += k
        last = self.sent >= self.n
        fin = b'"length"' if last else b"null"
        self._write(
            b'{"index":0,"delta":{"content":"%s"},"finish_reason":%s}' % (text.encode(), fin), self.sent
        )
        now = time.monotonic()
        if self.stat["first_write_t"] == 0.0:
            self.stat["first_write_t"] = now
        self.stat["last_write_t"] = now
        self.stat["tokens"] = self.sent
        self.srv.counters.tokens += k
        if last:
            self.finish()
            return
        nxt = min(self.cfg.tokens_per_chunk, self.n - self.sent)
        due = self.t_first + (self.sent + nxt - self.cfg.first_chunk_tokens) * self.cfg.token_delay_s
        loop.call_at(due, self.emit, loop)

    def finish(self) -> None:
        if self.usage and not self.cont:
            self.tr.write(_chunk(self.head + b"]" + self._usage(self.n) + b"}\n\n"))
        self.tr.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        self.srv.counters.running -= 1
        self.tr.close()


class _Conn:
    """One connection on a raw non-blocking socket: reads one request (headers + Content-Length
    body) with ``recvmsg``, taking the kernel's receive timestamp of its first bytes as ``t0``, then
    writes the response (buffering only if the socket is full)."""

    def __init__(self, srv: CalibratedServer, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        self.srv, self.sock, self.loop, self.fd = srv, sock, loop, sock.fileno()
        self.buf = b""
        self.t0 = 0.0
        self.pending = b""
        self.closing = False
        loop.add_reader(self.fd, self._on_read)

    def _on_read(self) -> None:
        try:
            data, anc, _, _ = self.sock.recvmsg(1 << 20, 64)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.loop.remove_reader(self.fd)
            self.close()
            return
        if not self.buf:
            self.t0 = _kernel_time(anc)
        self.buf += data
        head_end = self.buf.find(b"\r\n\r\n")
        if head_end < 0:
            return
        m = _CONTENT_LENGTH.search(self.buf, 0, head_end)
        length = int(m.group(1)) if m else 0
        if len(self.buf) - head_end - 4 < length:
            return
        self.loop.remove_reader(self.fd)
        # call_at(now), not call_soon: the loop reads every socket that is ready before it runs
        # timers, so a burst of requests is read (and time-stamped) before any is processed.
        self.loop.call_at(self.loop.time(), self._route, head_end, length)

    def _route(self, head_end: int, length: int) -> None:
        method, path = [*self.buf[: self.buf.find(b"\r\n")].decode("latin-1").split(" "), "", ""][:2]
        body = self.buf[head_end + 4 : head_end + 4 + length]
        self.srv.route(self, method, path, body, self.t0)

    def write(self, data: bytes) -> None:
        if self.closing:
            return
        if self.pending:
            self.pending += data
            return
        try:
            n = self.sock.send(data)
        except BlockingIOError:
            n = 0
        except OSError:
            self.closing = True
            self.sock.close()
            return
        if n < len(data):
            self.pending = data[n:]
            self.loop.add_writer(self.fd, self._on_write)

    def _on_write(self) -> None:
        try:
            n = self.sock.send(self.pending)
        except BlockingIOError:
            return
        except OSError:
            n, self.closing = len(self.pending), True
        self.pending = self.pending[n:]
        if not self.pending:
            self.loop.remove_writer(self.fd)
            if self.closing:
                self.sock.close()

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        """Close once everything written has left."""
        if not self.closing:
            self.closing = True
            if not self.pending:
                self.sock.close()


def _kernel_time(anc: list[tuple[int, int, bytes]]) -> float:
    """The kernel receive timestamp on the monotonic clock (now, if the kernel gave none)."""
    now = time.monotonic()
    if anc and len(anc[0][2]) >= 16:
        sec, nsec = struct.unpack("qq", anc[0][2][:16])
        t = float(sec + nsec * 1e-9 - _OFFSET)
        if now - 1.0 < t <= now:
            return t
    return now


_OFFSET = realtime_offset(time.monotonic)
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)


class CalibratedServer:
    """The server object; :meth:`serve` runs it on the current event loop."""

    def __init__(self, cfg: ServerConfig) -> None:
        self.cfg = cfg
        self.counters = _Counters()

    @staticmethod
    def prompt_tokens(messages: list[dict[str, Any]]) -> int:
        """A word is a token, plus one per message."""
        return sum(len(str(m.get("content") or "").split()) for m in messages) + len(messages)

    def account_prompt(self, messages: list[dict[str, Any]]) -> tuple[int, int]:
        """(prompt tokens, cached tokens) for one request, counting cache queries and hits."""
        texts = [str(m.get("content") or "") for m in messages]
        tokens = self.prompt_tokens(messages)
        c = self.counters
        c.requests += 1
        c.running += 1
        c.prompt_tokens += tokens
        if self.cfg.prefix_cache_longest:
            return tokens, self._longest(messages, tokens)
        if not self.cfg.prefix_cache:
            return tokens, 0
        key = "\x00".join(texts)[:256]
        c.cache_queries += tokens
        if key in c.seen:
            c.cache_hits += tokens - 1
            return tokens, tokens - 1
        c.seen.add(key)
        return tokens, 0

    def _longest(self, messages: list[dict[str, Any]], tokens: int) -> int:
        """The longest prefix (in this server's tokens: a mark per message, then its words) of any
        prompt seen before, at most ``tokens - 1``; counted as queries and hits."""
        c = self.counters
        seq = [w for m in messages for w in ["\x00m", *str(m.get("content") or "").split()]]
        best = 0
        for old in c.prompts:
            n = 0
            for a, b in zip(old, seq, strict=False):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        c.prompts.append(seq)
        hit = min(best, tokens - 1)
        c.cache_queries += tokens
        c.cache_hits += hit
        return hit

    def route(self, tr: _Conn, method: str, path: str, body: bytes, t0: float) -> None:
        if method == "POST" and path.endswith("/chat/completions"):
            req = json.loads(body or b"{}")
            if not req.get("stream"):
                self._reply(tr, 400, b'{"error":"only stream=true is served"}', "application/json")
                return
            if refusal := self._too_long(req):
                self._reply(tr, 400, refusal, "application/json")
                return
            _Stream(self, tr, req, t0).start(asyncio.get_running_loop())
        elif path == "/metrics":
            self._reply(tr, 200, self.metrics_text().encode(), "text/plain; version=0.0.4")
        elif path == "/stats":
            self._reply(tr, 200, json.dumps(self.counters.stats).encode(), "application/json")
        elif path.endswith("/models"):
            model: dict[str, Any] = {"id": self.cfg.model, "object": "model"}
            if self.cfg.max_model_len:
                model["max_model_len"] = self.cfg.max_model_len
            models = {"object": "list", "data": [model]}
            self._reply(tr, 200, json.dumps(models).encode(), "application/json")
        elif path == "/health":
            self._reply(tr, 200, b"{}", "application/json")
        else:
            self._reply(tr, 404, b'{"error":"not found"}', "application/json")

    def _too_long(self, req: dict[str, Any]) -> bytes | None:
        """llama.cpp's answer to a prompt above ``reject_above`` tokens (a limit it does not list)."""
        n, limit = self.prompt_tokens(req.get("messages") or []), self.cfg.reject_above
        if limit is None or n <= limit:
            return None
        msg = f"request ({n} tokens) exceeds the available context size ({limit} tokens), try increasing it"
        err = {"code": 400, "message": msg, "type": "exceed_context_size_error", "n_ctx": limit}
        return json.dumps({"error": err}).encode()

    @staticmethod
    def _reply(tr: _Conn, status: int, body: bytes, ctype: str) -> None:
        head = f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
        tr.write(head.encode() + b"Connection: close\r\n\r\n" + body)
        tr.close()

    def metrics_text(self) -> str:
        c = self.counters
        return (
            f"calibrated:requests_total {c.requests}\n"
            f"calibrated:prompt_tokens_total {c.prompt_tokens}\n"
            f"calibrated:generation_tokens_total {c.tokens}\n"
            f"calibrated:prefix_cache_queries_total {c.cache_queries}\n"
            f"calibrated:prefix_cache_hits_total {c.cache_hits}\n"
            f"calibrated:num_requests_running {c.running}\n"
            f"calibrated:kv_cache_usage_perc {min(1.0, c.running / 256):.4f}\n"
        )

    async def serve(self, host: str, port: int) -> None:
        """Serve on ``host:port`` (0 = any free port) until SIGTERM or SIGINT."""
        loop = asyncio.get_running_loop()
        lsock = socket.create_server((host, port), backlog=4096, reuse_port=False)
        lsock.setblocking(False)
        loop.add_reader(lsock.fileno(), self._accept, lsock, loop)
        addr = lsock.getsockname()
        print(f"listening {addr[0]}:{addr[1]}", flush=True)
        stop = asyncio.Event()
        for s in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(s, stop.set)
        try:
            await stop.wait()
        finally:
            loop.remove_reader(lsock.fileno())
            lsock.close()

    def _accept(self, lsock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        while True:
            try:
                sock, _ = lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            except OSError:
                pass
            _Conn(self, sock, loop)


def _config(a: argparse.Namespace) -> ServerConfig:
    return ServerConfig(
        ttft_s=a.ttft_ms / 1000,
        token_delay_s=a.token_ms / 1000,
        tokens_per_chunk=a.tokens_per_chunk,
        first_chunk_tokens=a.first_chunk_tokens,
        role_first=a.role_first,
        usage=not a.no_usage,
        continuous_usage=a.continuous_usage,
        prefix_cache=a.prefix_cache,
        prefix_cache_longest=a.prefix_cache_longest,
        reply=a.reply.split() if a.reply else [],
        output=a.output,
        model=a.model,
        reject_above=a.reject_above,
        max_model_len=a.max_model_len,
    )


@contextlib.contextmanager
def listening_process(cmd: list[str], what: str, timeout_s: float = 20.0) -> Iterator[str]:
    """Run ``cmd`` (a server that prints ``listening HOST:PORT`` first); yield ``http://HOST:PORT``;
    terminate it (then kill it after ``timeout_s``) on exit."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the server prints its address (or exits)
        if not line.startswith("listening "):
            raise RuntimeError(f"{what} did not start: {line!r}")
        yield "http://" + line.split()[1]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


@contextlib.contextmanager
def running_server(*args: str, timeout_s: float = 20.0) -> Iterator[str]:
    """Start the server in its own process (``args`` are its command-line flags); yield its base URL.

    A process of its own keeps the server's timing independent of the client under test.
    """
    cmd = [sys.executable, "-m", "lair.testing.calibrated_server", "--port", "0", *args]
    with listening_process(cmd, "calibrated server", timeout_s) as url:
        yield url


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lair.testing.calibrated_server", description=__doc__)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ttft-ms", type=float, default=200.0)
    ap.add_argument("--token-ms", type=float, default=10.0)
    ap.add_argument("--tokens-per-chunk", type=int, default=1)
    ap.add_argument("--first-chunk-tokens", type=int, default=1)
    ap.add_argument("--role-first", action="store_true")
    ap.add_argument("--no-usage", action="store_true")
    ap.add_argument("--continuous-usage", action="store_true")
    ap.add_argument("--prefix-cache", action="store_true")
    ap.add_argument("--prefix-cache-longest", action="store_true", help="cache by the longest prefix seen")
    ap.add_argument("--reply", help="words to cycle through (default: words seeded by the prompt)")
    ap.add_argument("--output", choices=OUTPUTS, default="text", help="text, or a broken server's output")
    ap.add_argument("--model", default="calibrated")
    ap.add_argument("--reject-above", type=int, help="answer 400 to prompts above N tokens (unlisted)")
    ap.add_argument("--max-model-len", type=int, help="list max_model_len N in /v1/models")
    a = ap.parse_args(argv)
    asyncio.run(CalibratedServer(_config(a)).serve(a.host, a.port))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
