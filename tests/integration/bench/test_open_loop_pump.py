"""The open-loop pump (:func:`lair.bench.rawstream.pump_scheduled`) against the calibrated server,
whose ``/stats`` is the server's own record of each request (the kernel's receive time, ``recv_t``):
requests go out in schedule order on their own connections whatever the server is doing, each
stream is read to its end and parsed as the closed-loop cells are, a stream still open at its
timeout is closed and marked late, and a request due beyond the open limit is a client-side failure
said so. No latency bound is asserted: the send error is recorded, not judged."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any

from lair.bench.arrivals import schedule
from lair.bench.client import Endpoint, chat_request, parse_stream
from lair.bench.rawstream import Sent, pump_scheduled, resolve
from lair.testing.calibrated_server import running_server


def _content(i: int) -> str:
    return f"request {i} " + "word " * 16


def _payloads(ep: Endpoint, n: int, tokens: int) -> list[bytes]:
    def body(i: int) -> dict[str, Any]:
        content = _content(i)
        return {
            "model": "calibrated",
            "messages": [{"role": "user", "content": content}],
            "stream": True,
            "max_tokens": tokens,
            "stream_options": {"include_usage": True},
        }

    return [chat_request(ep, body(i), None) for i in range(n)]


def _stats(url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/stats", timeout=10) as r:
        out: list[dict[str, Any]] = json.loads(r.read())
        return out


def _pump(url: str, n: int, offsets: list[float], tokens: int, timeout_s: float, max_open: int) -> list[Sent]:
    ep = Endpoint.parse(url)
    info = asyncio.run(resolve(ep))
    return pump_scheduled(info, _payloads(ep, n, tokens), offsets, timeout_s, 0.02, max_open)


def test_requests_go_out_in_schedule_order_and_every_stream_is_read_to_its_end() -> None:
    n, tokens = 40, 8
    offsets = schedule(80.0, n, "poisson", seed=5)  # ~0.5 s of arrivals, several requests in flight
    with running_server("--ttft-ms", "30", "--token-ms", "5") as url:
        sent = _pump(url, n, offsets, tokens, timeout_s=30.0, max_open=1024)
        seen = _stats(url)
    assert [s.error for s in sent] == [""] * n and not any(s.late for s in sent)
    assert all(s.stream is not None and s.stream.finished for s in sent)
    # the server received each request once, and in the order they were due
    assert len(seen) == n
    recv = sorted(seen, key=lambda st: st["recv_t"])
    assert [st["key"] for st in recv] == [_content(i)[:16] for i in range(n)]
    for s, want in zip(sent, offsets, strict=True):
        assert s.stream is not None
        assert s.stream.send_t >= s.scheduled_t  # never early
        assert abs((s.scheduled_t - sent[0].scheduled_t) - want) < 1e-9  # the schedule as drawn
        r = parse_stream(s.stream.send_t, s.stream.arrival_times(), s.stream.reads)
        assert (r.status, r.error, r.completion_tokens) == (200, "", tokens)
    # a request that was due while earlier ones were still streaming counts them as in flight
    assert max(s.in_flight for s in sent) >= 1


def test_a_stream_open_at_its_timeout_is_closed_and_marked_late() -> None:
    offsets = [0.0, 0.05]
    with running_server("--ttft-ms", "10", "--token-ms", "200") as url:  # 20 tokens: 4 s a stream
        sent = _pump(url, 2, offsets, 20, timeout_s=0.5, max_open=16)
    assert [s.late for s in sent] == [True, True]
    for s in sent:  # cut off mid-answer: some tokens came, not the 20 asked, and no end of stream
        assert s.stream is not None
        r = parse_stream(s.stream.send_t, s.stream.arrival_times(), s.stream.reads)
        assert r.content_times and r.completion_tokens != 20


def test_a_request_due_beyond_the_open_limit_fails_on_the_client_side() -> None:
    offsets = [0.0, 0.01, 0.02]
    with running_server("--ttft-ms", "10", "--token-ms", "100") as url:  # each stream open ~1 s
        sent = _pump(url, 3, offsets, 10, timeout_s=30.0, max_open=2)
        seen = _stats(url)
    assert [s.error for s in sent] == ["", "", "client limit: 2 requests already open"]
    assert sent[2].stream is None and len(seen) == 2
