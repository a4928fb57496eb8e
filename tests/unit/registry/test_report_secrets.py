"""Report files are screened for secrets before anything is stored: a token in a file the checks cover
(results.json, requests.jsonl, report.md, the recipe as run), written out or behind a JSON or TOML
escape, refuses the upload with the file, line, column and kind, never the token, and leaves every
table and the blob store as they were (SQLite and PostgreSQL); engine logs are not refused but
redacted in place, byte for byte elsewhere. An accepted real report's served log: see
tests/integration/verify/test_report_secrets_served.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import Engine
from starlette.testclient import TestClient

from lair.registry.service.accounts import create_token, create_user
from lair.registry.service.scrub import redact_log, screen_report
from lair.registry.web.app import create_app
from lair.registry.web.auth import reset_limits
from lair.testing.registry import db_snapshot, tgz

# built here so this file holds no secret-looking literal
GHP = "ghp_" + "Z9y8X7w6" * 4 + "V5u4"
HF = "hf_" + "k3J" * 12
SLACK = "xoxb-" + "1234567890-1234567890-" + "aBcD" * 6


def _json_escaped(token: str) -> str:
    return token[:2] + "".join(f"\\u{ord(c):04x}" for c in token[2:])


@dataclass
class Site:
    client: TestClient
    db_url: str
    blobs: Path

    def refused(self, files: dict[str, bytes]) -> list[str]:
        before = db_snapshot(self.db_url)
        r = self.client.post(
            "/api/v1/reports", content=tgz(files), headers={"content-type": "application/gzip"}
        )
        assert r.status_code == 422, r.text
        assert not any(t in r.text for t in (GHP, HF, SLACK))
        err = r.json()["error"]
        assert err["code"] == "secret", err
        assert db_snapshot(self.db_url) == before
        assert not self.blobs.exists() or not any(p.is_file() for p in self.blobs.rglob("*"))
        return list(err["reasons"])


@pytest.fixture
def site(engine: Engine, db_url: str, tmp_path: Path) -> Iterator[Site]:
    reset_limits()
    with engine.begin() as conn:
        token = create_token(conn, create_user(conn, "uploader"))
    blobs = tmp_path / "blobs"
    with TestClient(create_app(db_url, blobs=str(blobs)), raise_server_exceptions=False) as c:
        c.headers["authorization"] = f"Bearer {token}"
        yield Site(c, db_url, blobs)


RESULTS = {"kind": "lair.run_report", "run_name": "run-1", "bench": {"cells": []}}


def _results(**extra: object) -> bytes:
    return json.dumps(RESULTS | extra, indent=1).encode()


def test_a_token_in_results_json_refuses_the_report(site: Site) -> None:
    body = _results(run_name=f"mine {GHP}")  # indent=1: line 3 is ' "run_name": "mine ghp_..."'
    reasons = site.refused({"run/results.json": body, "run/logs/engine.log": b"ok\n"})
    assert reasons == ["results.json:3:20: a GitHub Token is written here"]


def test_a_json_escaped_token_is_found_and_located_by_its_field(site: Site) -> None:
    text = '{\n "kind": "lair.run_report",\n "run_name": "' + _json_escaped(HF) + '",\n "bench": {}\n}\n'
    assert HF not in text and json.loads(text)["run_name"] == HF
    reasons = site.refused({"run/results.json": text.encode()})
    assert reasons == [
        "results.json:3:14: run_name: a Hugging Face Token is written here once its JSON escapes and line "
        "continuations are read"
    ]


def test_a_token_in_the_timings_is_refused_with_its_line(site: Site) -> None:
    lines = [json.dumps({"i": i, "text": "fine"}) for i in range(4)]
    lines[2] = '{"i": 2, "text": "' + _json_escaped(SLACK) + '"}'
    reasons = site.refused({"run/results.json": _results(), "run/requests.jsonl": "\n".join(lines).encode()})
    assert [r.split(": a ")[0] for r in reasons] == ["requests.jsonl:3:1: text"]
    assert "Slack Token" in reasons[0]


def test_a_token_in_report_md_and_in_the_recipe_as_run_is_refused(site: Site) -> None:
    recipe = 'engine = "vllm"\n[env]\nX = "' + "\\u0067" + GHP[1:] + '"\n'  # \u0067 is "g"
    reasons = site.refused(
        {
            "run/results.json": _results(),
            "run/report.md": f"# Run\n\nused {HF}\n".encode(),
            "run/tiny.recipe.toml": recipe.encode(),
        }
    )
    assert sorted(r.split(": a ")[0] for r in reasons) == [
        "report.md:3:6",
        "tiny.recipe.toml:3:5: env.X",
    ]


def test_a_token_in_a_log_does_not_refuse_the_report(site: Site) -> None:
    # not a report the registry knows: refused, but by the report checks, not for the log's token
    r = site.client.post(
        "/api/v1/reports",
        content=tgz({"run/results.json": _results(), "run/logs/engine.log": f"HF_TOKEN={HF}\n".encode()}),
        headers={"content-type": "application/gzip"},
    )
    assert r.status_code == 422 and r.json()["error"]["code"] != "secret", r.text
    assert HF not in r.text


def test_logs_are_redacted_in_place_and_byte_for_byte_elsewhere() -> None:
    log = (
        b"\xff\xfe binary prefix\n"
        + f"INFO env HF_TOKEN={HF} set\n".encode()
        + f"DEBUG headers: Authorization: Bearer {GHP}\n".encode()
        + b"DEBUG Authorization: Bearer 0a1b2c3d4e5f6a7b8c9d\n"
        + b"INFO api_key=None tokenizer=/models/tok max_num_batched_tokens=8192\n"
        + b"INFO export OPENAI_API_KEY='abcDEF123456ghi'\n"
    )
    expected = (
        b"\xff\xfe binary prefix\n"
        + b"INFO env HF_TOKEN=[REDACTED:Hugging Face Token] set\n"
        + b"DEBUG headers: Authorization: Bearer [REDACTED:Bearer credential]\n"
        + b"DEBUG Authorization: Bearer [REDACTED:Bearer credential]\n"
        + b"INFO api_key=None tokenizer=/models/tok max_num_batched_tokens=8192\n"
        + b"INFO export OPENAI_API_KEY='[REDACTED:secret assignment]'\n"
    )
    assert redact_log(log) == expected
    assert redact_log(expected) == expected  # nothing left to redact
    kept = screen_report({"logs/engine.log": log, "fingerprint.json": b'{"gpus": null}'})
    assert kept == {"logs/engine.log": expected, "fingerprint.json": b'{"gpus": null}'}
