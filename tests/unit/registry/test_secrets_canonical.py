"""Secrets the raw-text scan cannot see: a token written with TOML escapes, split by a line
continuation, hidden in a key, or a placeholder default that fills a secret field in plain text. Each
is refused on publish and on revise (SQLite and PostgreSQL) with its field path and the line and
column of its value, the token never echoed, nothing stored; honest placeholders still publish."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import sqlalchemy as sa
from registry_paths import LLAMA
from sqlalchemy import Engine
from starlette.testclient import TestClient

from lair.registry.service.accounts import create_token, create_user
from lair.registry.service.publish import publish
from lair.registry.service.scrub import redact, scan_recipe
from lair.registry.web.app import create_app
from lair.registry.web.auth import reset_limits

# built here so this file holds no secret-looking literal
GHP = "ghp_" + "A1b2C3d4" * 4 + "E5f6"
HF = "hf_" + "q7W" * 12
HEAD = 'engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.11.0"\n'  # lines 1-2
SLUG = tomllib.loads(LLAMA.read_text())["meta"]["slug"]


def _escaped(token: str) -> str:
    """``token`` with every character after the first two as a TOML ``\\uXXXX`` escape."""
    return token[:2] + "".join(f"\\u{ord(c):04x}" for c in token[2:])


@dataclass
class Site:
    client: TestClient
    engine: Engine
    headers: dict[str, str]

    def publish(self, toml: str) -> dict[str, object]:
        r = self.client.post("/api/v1/recipes", json={"toml": toml}, headers=self.headers)
        assert r.status_code == 422, r.text
        assert GHP not in r.text and HF not in r.text  # never echoed, nor its escaped spelling's value
        body: dict[str, object] = r.json()["error"]
        return body


@pytest.fixture
def site(engine: Engine, db_url: str) -> Iterator[Site]:
    reset_limits()
    with engine.begin() as conn:
        token = create_token(conn, create_user(conn, "owner"))
        publish(conn, LLAMA.read_text(), owner="owner")
    with TestClient(create_app(db_url), raise_server_exceptions=False) as client:
        yield Site(client, engine, {"authorization": f"Bearer {token}"})


def _recipe(extra_meta: str = "", top: str = "", tail: str = "") -> str:
    """HEAD (lines 1-2), ``top`` lines, then ``[meta]`` with title and slug, ``extra_meta``, ``tail``."""
    return HEAD + top + '[meta]\ntitle = "Leak"\nslug = "leak"\n' + extra_meta + tail


def _only(err: dict[str, object]) -> dict[str, object]:
    errors = err["errors"]
    assert isinstance(errors, list) and len(errors) == 1, errors
    found: dict[str, object] = errors[0]
    assert err["code"] == "secret" and found["code"] == "secret"
    return found


def _nothing_stored(site: Site) -> None:
    with site.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM recipes")).scalar_one() == 1  # the seed only
        tomls = conn.execute(sa.text("SELECT toml FROM revisions")).scalars().all()
    assert len(tomls) == 1 and not any(t in tomls[0] for t in (GHP, HF))
    assert site.client.get("/api/v1/recipes/leak.json").status_code == 404


def test_a_token_behind_toml_unicode_escapes_is_refused_at_its_field(site: Site) -> None:
    text = _recipe(f'summary = "token {_escaped(GHP)}"\n')  # line 6
    assert GHP not in text and tomllib.loads(text)["meta"]["summary"] == f"token {GHP}"
    found = _only(site.publish(text))
    assert (found["line"], found["col"], found["path"]) == (6, 11, "meta.summary")
    assert "a GitHub Token is written here once its TOML escapes" in str(found["message"])
    _nothing_stored(site)


def test_a_token_split_by_a_line_continuation_is_refused(site: Site) -> None:
    # a line-ending backslash in a multi-line basic string joins the lines, dropping the whitespace
    text = _recipe(f'performance_notes = """\\\n    see {GHP[:12]}\\\n        {GHP[12:]} for access"""\n')
    assert GHP not in text and GHP in tomllib.loads(text)["meta"]["performance_notes"]
    found = _only(site.publish(text))
    assert (found["line"], found["col"], found["path"]) == (6, 21, "meta.performance_notes")
    _nothing_stored(site)


def test_a_token_in_an_escaped_key_is_refused_at_the_key(site: Site) -> None:
    key = f'"{_escaped(HF)}"'
    text = _recipe(tail=f"[meta.credits]\n{key} = 1\n")  # line 6 the table, line 7 the key
    found = _only(site.publish(text))
    assert (found["line"], found["col"]) == (7, 1)
    assert found["path"] == "meta.credits.[secret removed]"  # the key is the secret: not in the path
    assert "a Hugging Face Token" in str(found["message"])
    _nothing_stored(site)


@pytest.mark.parametrize(
    ("launch", "where"),
    [
        ('[env]\nHF_TOKEN = "{TOK}"\n', "env.HF_TOKEN"),
        ('args = ["--api-key", "{TOK}"]\n', "args[1]"),
        ('args = ["--hf-token={TOK}"]\n', "args[0]"),
        ('args = ["--auth", "{TOK}"]\n', "args[1]"),
        ('args = ["--port", "8000", "--api_key={TOK}"]\n', "args[2]"),
        ('args = ["--openai-api-key", "{TOK}"]\n', "args[1]"),
    ],
)
def test_a_plain_default_that_fills_a_secret_field_is_refused(site: Site, launch: str, where: str) -> None:
    # whatever its format: "pw-0123456789" matches no token pattern
    declared = '[placeholders.TOK]\ntype = "string"\ndefault = "pw-0123456789"\n'
    text = (HEAD + launch + declared) if launch.startswith("args") else (HEAD + declared + launch)
    text += '[meta]\ntitle = "Leak"\nslug = "leak"\n'
    line = text.splitlines().index('default = "pw-0123456789"') + 1
    found = _only(site.publish(text))
    assert (found["line"], found["col"], found["path"]) == (line, 11, "placeholders.TOK.default")
    assert found["message"] == f"{where} is a secret, and this default fills it in plain text"
    assert "pw-0123456789" not in str(site.publish(text))
    _nothing_stored(site)


def test_an_escaped_token_in_a_placeholder_default_is_refused(site: Site) -> None:
    declared = f'[placeholders.MODEL_DIR]\ntype = "path"\ndefault = "/models/{_escaped(HF)}"\n'  # 3-5
    found = _only(site.publish(HEAD + declared + '[meta]\ntitle = "Leak"\nslug = "leak"\n'))
    assert (found["line"], found["col"], found["path"]) == (5, 11, "placeholders.MODEL_DIR.default")
    _nothing_stored(site)


def test_a_revision_is_checked_the_same_way(site: Site) -> None:
    text = LLAMA.read_text().replace("[meta]\n", f'[meta]\nperformance_notes = "{_escaped(GHP)}"\n', 1)
    line = text.splitlines().index(f'performance_notes = "{_escaped(GHP)}"') + 1
    r = site.client.post(f"/api/v1/recipes/{SLUG}/revisions", json={"toml": text}, headers=site.headers)
    assert r.status_code == 422 and GHP not in r.text
    found = r.json()["error"]["errors"][0]
    assert (found["line"], found["path"]) == (line, "meta.performance_notes")
    assert site.client.get(f"/api/v1/recipes/{SLUG}.json").json()["revision"] == 1


def test_a_token_in_a_field_the_recipe_checks_refuse_is_not_echoed(site: Site) -> None:
    # an unknown key would be named by the recipe checks: the secret refusal comes first
    err = site.publish(_recipe(tail=f'[meta.{GHP}]\nx = "1"\n'))
    assert err["code"] == "secret"


def test_honest_placeholders_still_publish(site: Site) -> None:
    text = HEAD + (
        '[env]\nHF_TOKEN = "{HF_TOKEN}"\nHF_HOME = "{CACHE}"\n'
        '[placeholders.HF_TOKEN]\ntype = "secret"\n'
        '[placeholders.CACHE]\ntype = "path"\ndefault = "/models/cache"\n'
        '[meta]\ntitle = "Honest"\nslug = "honest"\n'
        'performance_notes = """\\\n    A recipe whose text is \\u0041SCII \\\n    and joined."""\n'
    )
    assert scan_recipe(text) == []
    r = site.client.post("/api/v1/recipes", json={"toml": text}, headers=site.headers)
    assert r.status_code == 201, r.text
    assert (
        site.client.get("/api/v1/recipes/honest.toml").text.count("A recipe whose text is ASCII and joined.")
        == 1
    )


def test_redact_replaces_the_whole_token() -> None:
    # detect-secrets' GitHub pattern captures only its prefix: the whole match must go
    assert redact(f"a {GHP} b {HF}") == "a [secret removed] b [secret removed]"
