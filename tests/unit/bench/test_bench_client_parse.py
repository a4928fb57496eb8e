"""Parsing recorded reads of a streamed response, however the bytes were split."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lair.bench.client import Endpoint, parse_stream
from lair.errors import BenchError


def _event(delta: dict[str, str], usage: dict[str, int] | None = None) -> bytes:
    ev: dict[str, object] = {"choices": [{"index": 0, "delta": delta}] if delta else []}
    if usage:
        ev["usage"] = usage
    return b"data: " + json.dumps(ev).encode() + b"\n\n"


def _chunked(payloads: list[bytes]) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    return head + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in payloads) + b"0\r\n\r\n"


EVENTS = [
    _event({"role": "assistant", "content": ""}),
    _event({"content": "Hello"}),
    _event({"reasoning_content": "hm"}),
    _event({"content": " world"}),
    _event({}, {"prompt_tokens": 12, "completion_tokens": 3}),
    b"data: [DONE]\n\n",
]
RAW = _chunked(EVENTS)


def _ends() -> list[int]:
    """Raw offsets at which each content event's data line ends."""
    ends, pos = [], 0
    for ev in EVENTS:
        pos = RAW.index(ev, pos)
        if (b'"content": "' in ev and b'"content": ""' not in ev) or b"reasoning" in ev:
            ends.append(pos + ev.index(b"\n"))
        pos += len(ev)
    return ends


@given(cuts=st.lists(st.integers(1, len(RAW) - 1), unique=True, max_size=40))
def test_any_split_gives_the_same_events_and_the_right_read_times(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(RAW)]
    reads = [RAW[a:b] for a, b in itertools.pairwise(bounds)]
    times = [float(i) for i in range(len(reads))]
    r = parse_stream(-1.0, times, reads)
    assert r.status == 200 and not r.error
    assert r.text == "Hellohm world" and r.content_chars == [5, 2, 6]
    assert (r.prompt_tokens, r.completion_tokens) == (12, 3)
    # each content chunk is stamped with the read that brought the end of its line
    want = [next(i for i, b in enumerate(bounds[1:]) if b >= end) for end in _ends()]
    assert r.content_times == [float(i) for i in want]


def test_role_only_chunk_is_not_content_and_errors_are_kept() -> None:
    r = parse_stream(0.0, [1.0], [_chunked([EVENTS[0]])])
    assert r.content_times == [] and not r.ok
    bad = b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 12\r\n\r\nno api key!!"
    r = parse_stream(0.0, [1.0], [bad])
    assert r.status == 401 and "no api key" in r.error


def test_continuous_usage_is_recorded_per_chunk() -> None:
    evs = [
        _event({"content": "a"}, {"completion_tokens": 2}),
        _event({"content": "b"}, {"completion_tokens": 3}),
    ]
    r = parse_stream(0.0, [1.0], [_chunked(evs)])
    assert r.content_cum_tokens == [2, 3]


def test_endpoint_parse() -> None:
    ep = Endpoint.parse("http://10.0.0.5:8000/v1/")
    assert (ep.host, ep.port, ep.path("/v1/models")) == ("10.0.0.5", 8000, "/v1/models")
    assert Endpoint.parse("https://api.example.com/proxy").path("/metrics") == "/proxy/metrics"
    assert Endpoint.parse("localhost:9").port == 9
    with pytest.raises(BenchError):
        Endpoint.parse("ftp://x")


# ---- the fast parse (byte search, one JSON decode per stream) against the full one (every event)

_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=6) | st.sampled_from(
    ['"', "\\", "\n", "é", "😀", '"content":"x"', "data: y", '"usage":{}', "\\u0041"]
)
_DELTAS = st.one_of(
    st.builds(lambda t: {"content": t}, _TEXT),
    st.builds(lambda t: {"reasoning_content": t}, _TEXT),
    st.builds(lambda t: {"reasoning": t}, _TEXT),
    st.builds(lambda t: {"role": "assistant", "content": t}, st.just("") | _TEXT),
    st.builds(lambda a, b: {"content": a, "reasoning_content": b}, _TEXT, _TEXT),
    st.builds(lambda t: {"reasoning_content": t, "reasoning": t}, _TEXT),
    st.builds(lambda t: {"content": None, "reasoning_content": t}, _TEXT),
    st.just({}),
)


@st.composite
def _stream(draw: st.DrawFn) -> bytes:
    """A chunked SSE response as servers write them: usage per chunk or at the end, null usage,
    spaces or not after separators, escaped or raw non-ASCII, several choices now and then."""
    seps = draw(st.sampled_from([(",", ":"), (", ", ": ")]))
    ascii_only = draw(st.booleans())
    continuous = draw(st.booleans())
    n = 0
    payloads = []
    for delta in draw(st.lists(_DELTAS, max_size=12)):
        n += 1
        choices = [{"index": 0, "delta": delta, "finish_reason": None}]
        if draw(st.integers(0, 9)) == 0:
            choices.append({"index": 1, "delta": {"content": "b"}})
        ev: dict[str, object] = {"id": "x", "choices": choices}
        if continuous:
            ev["usage"] = {"prompt_tokens": 5, "completion_tokens": n}
        elif draw(st.booleans()):
            ev["usage"] = None
        line = json.dumps(ev, separators=seps, ensure_ascii=ascii_only).encode()
        payloads.append(b"data: " + line + b"\n\n")
    if not continuous and draw(st.booleans()):
        usage = {"prompt_tokens": 5, "completion_tokens": n, "prompt_tokens_details": {"cached_tokens": 1}}
        payloads.append(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
    if draw(st.booleans()):
        payloads.insert(draw(st.integers(0, len(payloads))), b": keep-alive\n\n")
    if draw(st.booleans()):  # one SSE line split over two HTTP chunks
        joined = b"".join(payloads)
        cut = draw(st.integers(0, len(joined)))
        payloads = [joined[:cut], joined[cut:]]
    return _chunked([p for p in payloads if p] + [b"data: [DONE]\n\n"])


@given(raw=_stream(), cuts=st.lists(st.integers(1, 4000), unique=True, max_size=12))
def test_fast_parse_equals_decoding_every_event(raw: bytes, cuts: list[int]) -> None:
    bounds = [0, *sorted(c for c in cuts if c < len(raw)), len(raw)]
    reads = [raw[a:b] for a, b in itertools.pairwise(bounds)]
    times = [float(i) for i in range(len(reads))]
    assert parse_stream(-1.0, times, reads) == parse_stream(-1.0, times, reads, full=True)


def test_an_error_event_is_kept() -> None:
    evs = [_event({"content": "a"}), b'data: {"error": {"message": "overloaded"}}\n\n']
    r = parse_stream(0.0, [1.0], [_chunked(evs)])
    assert "overloaded" in r.error and r.content_chars == [1]
