"""0 5xx from a fuzzed upload corpus: hypothesis mutates a report the registry accepts (a value
anywhere in results.json, a requests.jsonl row or fingerprint.json swapped for a wrong type, a deep
nesting, a non-finite or huge number, a negative or backwards time, a dropped key; or raw bytes of a
file spliced with NaN, 1e400 and deep brackets) and posts it through the real app. Every answer is a
201 or a 4xx whose error envelope carries reasons."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from upload_site import Site, site  # noqa: F401  (the fixture)

from lair.testing.uploads import encode, tar_gz

DOCS = ("results.json", "fingerprint.json", "requests.jsonl")


def _paths(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at] if at else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*at, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*at, i))
    return out


def _nest(depth: int) -> Any:
    v: Any = 1
    for i in range(depth):
        v = [v] if i % 2 else {"k": v}
    return v


HOSTILE_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([-1e15, -1.0, -0.001, 1e300, 1e308, 2**63, -(2**63) - 1]),
    st.text(max_size=30),
    st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=5),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    st.integers(min_value=10, max_value=400).map(_nest),
)
SPLICES = st.sampled_from(
    [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e400", b"1" * 5000, b"[" * 3000, b"{", b"\xff"]
)


def _set(doc: Any, path: tuple[Any, ...], value: Any, drop: bool) -> None:
    for key in path[:-1]:
        doc = doc[key]
    if drop and isinstance(doc, dict):
        del doc[path[-1]]
    else:
        doc[path[-1]] = value


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any]) -> bytes:
    files = json.loads(json.dumps(base))  # a deep copy
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(DOCS))
        path = draw(st.sampled_from(_paths(files[name])))
        _set(files[name], path, draw(HOSTILE_VALUES), draw(st.booleans()))
    raw = encode(files)
    if draw(st.booleans()):  # a raw splice: what json.dumps cannot write
        name = draw(st.sampled_from(DOCS))
        text = raw[name]
        at = draw(st.integers(0, len(text)))
        raw[name] = text[:at] + draw(SPLICES) + text[at + draw(st.integers(0, 8)) :]
    return tar_gz(raw)


def test_no_fuzzed_upload_gets_a_5xx(site: Site) -> None:  # noqa: F811
    statuses: list[int] = []

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(data=mutated(site.report()))
    def upload(data: bytes) -> None:
        r = site.post(data)
        statuses.append(r.status_code)
        assert r.status_code == 201 or 400 <= r.status_code < 500, r.text
        if r.status_code != 201:
            err = r.json()["error"]
            assert err["status"] == r.status_code and (err.get("reasons") or err["message"]), err

    upload()
    assert any(400 <= s < 500 for s in statuses)  # the corpus reached the refusals
