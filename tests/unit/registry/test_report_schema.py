"""Malformed report documents are a 422 ``report_refused`` whose reason names the file and the field
path, never a 500: the shapes that once raised RecursionError, AttributeError, TypeError and
OverflowError inside the verification, and negative or backwards times that were stored as verified.
Also a recipe nested too deeply on publish and a list cursor holding 1e308, through the API."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import pytest
from upload_site import Site, site  # noqa: F401  (the fixture)

from lair.testing.uploads import encode, tar_gz

Edit = Callable[[dict[str, Any]], None]


def _results(edit: Callable[[dict[str, Any]], None]) -> Edit:
    return lambda files: edit(files["results.json"])


def _row(line: int, edit: Callable[[dict[str, Any]], None]) -> Edit:
    return lambda files: edit(files["requests.jsonl"][line - 1])


def _raw(name: str, text: bytes) -> Edit:
    return lambda files: files.__setitem__(name, text)


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for p in parents:
            doc = doc[int(p)] if isinstance(doc, list) else doc[p]
        if isinstance(doc, list):
            doc[int(last)] = value
        else:
            doc[last] = value

    return edit


def _huge_int(files: dict[str, Any]) -> None:
    text = json.dumps(files["results.json"])  # json.dumps refuses 10**5000 itself: spliced in as text
    files["results.json"] = text.replace('"decode_tokens": 4', '"decode_tokens": 1' + "0" * 5000).encode()


_NaN_ROW = b'{"context":256,"concurrency":1,"repeat":0,"send_ms":0,"chunk_ms":[1,NaN]}\n'
_NESTED = b'{"kind": "lair.run_report", "bench": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
_ROW_1E400 = b'{"context":256,"concurrency":1,"repeat":0,"send_ms":1e400}\n'

SHAPES: dict[str, tuple[Edit, str]] = {
    # RecursionError: 100,000 levels of arrays
    "deeply nested results.json": (
        _raw("results.json", _NESTED),
        "results.json is not JSON: nested too deeply",
    ),
    # AttributeError: a list where the bench's options dict is read with .get
    "a list for bench.options": (_results(_set("bench.options", [1, 2])), "results.json: bench.options: "),
    # TypeError: a list where a cell dict is expected
    "a list for a cell": (_results(_set("bench.cells.0", [])), "results.json: bench.cells.0: "),
    # TypeError / ValueError: a string where a number is
    "a string for send_ms": (_row(1, _set("send_ms", "0")), "requests.jsonl line 1: send_ms: "),
    # OverflowError: 1e400 parses to inf, int(inf) overflows
    "1e400 for a time": (
        _raw("requests.jsonl", _ROW_1E400),
        "requests.jsonl line 1: send_ms: 1e400 is out of range",
    ),
    # a 5,000-digit integer (int() of more than 4,300 digits raises ValueError)
    "a huge integer": (_huge_int, "results.json: bench.options.decode_tokens: an integer of 5,001 digits"),
    # negative time, once stored as verified
    "send_ms -1e15": (
        _row(2, _set("send_ms", -1e15)),
        "requests.jsonl line 2: send_ms: Input should be greater than or equal to 0",
    ),
    # chunk times going backwards
    "chunk_ms unordered": (
        _row(1, _set("chunk_ms", [120.0, 130.0, 125.0, 150.0])),
        "requests.jsonl line 1: chunk_ms.2: must be >= the previous chunk time (130.0 ms)",
    ),
    "NaN in chunk_ms": (
        _raw("requests.jsonl", _NaN_ROW),
        "requests.jsonl line 1: chunk_ms.1: NaN is not a finite number",
    ),
    "a missing key": (_row(1, lambda r: r.pop("repeat")), "requests.jsonl line 1: repeat: Field required"),
    "a string for the fingerprint's GPUs": (
        lambda f: f["fingerprint.json"].__setitem__("gpus", "none"),
        "fingerprint.json: gpus: ",
    ),
    "true for a count": (
        _results(_set("bench.cells.0.concurrency", True)),
        "results.json: bench.cells.0.concurrency: Input should be a valid integer",
    ),
    "the eval's suites as text": (_results(_set("eval", {"suites": "all"})), "results.json: eval.suites: "),
    "a deep extra field": (
        _results(_set("bench.server", json.loads("[" * 40 + "]" * 40))),
        "results.json: bench.server.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0: nested deeper than 16 levels",
    ),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_each_malformed_shape_is_a_422_naming_the_file_and_field(site: Site, shape: str) -> None:  # noqa: F811
    edit, want = SHAPES[shape]
    files = site.report()
    edit(files)
    r = site.upload(files)
    body = r.json()
    assert r.status_code == 422, body
    assert body["error"]["code"] == "report_refused"
    assert any(x.startswith(want) for x in body["error"]["reasons"]), (want, body["error"]["reasons"])


def test_the_unedited_report_is_accepted(site: Site) -> None:  # noqa: F811
    """The control: the shapes above are refused for their edit, not for the report they edit."""
    r = site.upload(site.report())
    assert r.status_code == 201, r.text
    assert [(x["context"], x["concurrency"]) for x in r.json()["rows"]] == [(256, 1)]


def test_a_deeply_nested_recipe_is_a_located_422_on_publish(site: Site) -> None:  # noqa: F811
    toml = site.base["recipe.recipe.toml"].replace('slug = "tiny-cpu"', 'slug = "tiny-deep"')
    # the 33rd level: the 33rd "[" after "y = " (column 37); "[" and 32 dots (the 32nd at column 65)
    cases = [("\n[x]\ny = " + "[" * 5000 + "]" * 5000 + "\n", "y = [", 37)]
    cases.append(("\n[" + ".".join(["a"] * 20000) + "]\n", "[a.a", 65))
    for tail, marker, col in cases:
        text = toml + tail
        r = site.client.post("/api/v1/recipes", json={"toml": text})
        body = r.json()
        assert r.status_code == 422, body
        line = text[: text.index(marker)].count("\n") + 1
        want = f"recipe.toml:{line}:{col}: nested deeper than 32 levels"
        assert body["error"]["message"] == want, body


def test_too_many_placeholders_are_a_422(site: Site) -> None:  # noqa: F811
    toml = site.base["recipe.recipe.toml"].replace('slug = "tiny-cpu"', 'slug = "tiny-many"')
    extra = "".join(f'\n[placeholders.P{i}]\ntype = "string"\ndescription = "p"\n' for i in range(101))
    r = site.client.post("/api/v1/recipes", json={"toml": toml + extra})
    assert r.status_code == 422, r.text
    assert (
        "placeholders: " in r.json()["error"]["message"] and "(at most 100)" in r.json()["error"]["message"]
    )


def _cursor(*parts: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(parts)).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    ("sort", "cursor"),
    [
        ("votes", "1e308"),
        ("votes", _cursor("votes", None, False, 1e308, 1)),
        ("votes", _cursor("votes", None, False, 10**30, 1)),
        ("votes", _cursor("votes", None, False, 1, 10**30)),
        ("decode", _cursor("decode", None, False, 1e308, 1)),
        ("votes", base64.urlsafe_b64encode(b"[" * 5000).decode()),
    ],
)
def test_a_cursor_out_of_range_is_a_422_naming_the_cursor(site: Site, sort: str, cursor: str) -> None:  # noqa: F811
    r = site.client.get("/api/v1/recipes", params={"sort": sort, "cursor": cursor})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["message"].startswith("query parameter cursor: ")


def test_a_cursor_the_api_returned_still_pages(site: Site) -> None:  # noqa: F811
    first = site.client.get("/api/v1/recipes", params={"limit": 1}).json()
    assert first["next_cursor"], first
    second = site.client.get("/api/v1/recipes", params={"limit": 1, "cursor": first["next_cursor"]})
    assert second.status_code == 200
    assert second.json()["items"][0]["slug"] != first["items"][0]["slug"]


def test_a_tar_gz_of_the_encoded_files_is_what_the_upload_reads(site: Site) -> None:  # noqa: F811
    from lair.registry.service.archive import unpack

    files = encode(site.report())
    assert unpack(tar_gz(files)) == files
