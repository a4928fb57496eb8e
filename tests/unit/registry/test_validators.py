"""Names and slugs are matched whole: ``$`` matches before a final newline, so ``re.match`` with a
``...$`` pattern took ``"admin\\n"``. Sign-up refuses such a name with 422 and the field path (and
creates nothing); a recipe slug, a host placeholder value and a user name are each refused with a
trailing newline, on SQLite and PostgreSQL."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine
from starlette.testclient import TestClient

from lair.errors import RegistryError
from lair.recipe.placeholders import check_value
from lair.registry.service.accounts import NAME_RE, create_user
from lair.registry.web.app import create_app
from lair.registry.web.auth import reset_limits

PASSWORD = "correct horse battery"


@pytest.fixture
def client(engine: Engine, db_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(db_url), raise_server_exceptions=False) as c:
        yield c


def test_the_bug_this_guards_against_is_real() -> None:
    # the old pattern, as it was: re.match with ^...$ accepts a name with a final newline
    old = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?$")
    assert old.match("admin\n") is not None
    assert NAME_RE.fullmatch("admin\n") is None and NAME_RE.fullmatch("admin") is not None


@pytest.mark.parametrize(
    "name", ["admin\n", "admin\r\n", "\nadmin", "admin\x00", "Admin", "ad min", "admin-"]
)
def test_sign_up_refuses_a_name_that_is_not_whole_with_the_field_path(
    client: TestClient, engine: Engine, name: str
) -> None:
    reset_limits()
    r = client.post("/api/v1/users", json={"name": name, "password": PASSWORD})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid" and err["message"].startswith("name: ")
    assert [(e["path"], e["code"]) for e in err["errors"]] == [("name", "invalid")]
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(sa.table("users"))).scalar_one() == 0


def test_the_plain_name_is_still_accepted(client: TestClient, engine: Engine) -> None:
    reset_limits()
    r = client.post("/api/v1/users", json={"name": "admin", "password": PASSWORD})
    assert r.status_code == 201, r.text
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT name FROM users")).scalars().all() == ["admin"]


def test_the_service_refuses_it_too(engine: Engine) -> None:
    with engine.begin() as conn, pytest.raises(RegistryError) as exc:
        create_user(conn, "root\n")
    assert exc.value.status == 422 and exc.value.errors[0].path == "name"


def test_a_recipe_slug_with_a_final_newline_is_refused(client: TestClient, engine: Engine) -> None:
    reset_limits()
    token = client.post("/api/v1/users", json={"name": "owner", "password": PASSWORD}).json()["csrf"]
    text = 'engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.11.0"\n[meta]\ntitle = "T"\nslug = "t\\n"\n'
    r = client.post("/api/v1/recipes", json={"toml": text}, headers={"x-csrf-token": token})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid_recipe" and [e["path"] for e in err["errors"]] == ["meta.slug"]
    assert err["errors"][0]["line"] == 5
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM recipes")).scalar_one() == 0


def test_a_host_placeholder_value_with_a_final_newline_is_refused() -> None:
    assert check_value("host", "node-1.example") is None
    assert check_value("host", "node-1.example\n") == "not a host name or address: 'node-1.example\\n'"
