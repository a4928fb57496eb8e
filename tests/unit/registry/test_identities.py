"""Accounts reached through GitHub / Hugging Face, on SQLite and PostgreSQL: first sign-in creates the
account (a unique name from the provider login), later ones find it by the provider's subject id, a
signed-in user gets the identity linked; and the provider settings read from the environment."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from lair.cli import main
from lair.errors import ConfigError, RegistryError
from lair.registry.db.tables import USERS
from lair.registry.oauth import load_providers, state_key
from lair.registry.service.accounts import create_user
from lair.registry.service.identities import IDENTITIES, Identity, sign_in_external


def test_first_sign_in_creates_the_account_later_ones_find_it(engine: Engine) -> None:
    with engine.begin() as conn:
        a = sign_in_external(conn, Identity("github", "583231", "Octo.Cat"))
        assert a.name == "octo-cat" and not a.is_admin
        again = sign_in_external(conn, Identity("github", "583231", "renamed-cat"))  # a rename at GitHub
        assert again.id == a.id and again.name == "octo-cat"
        assert conn.execute(sa.select(IDENTITIES.c.login)).scalar_one() == "renamed-cat"
        hf = sign_in_external(conn, Identity("huggingface", "583231", "Octo.Cat"))  # same id, other provider
        assert hf.id != a.id and hf.name == "octo-cat-2"
        assert conn.execute(sa.select(USERS.c.password_hash).where(USERS.c.id == a.id)).scalar_one() is None


def test_names_are_made_valid_and_unique(engine: Engine) -> None:
    with engine.begin() as conn:
        create_user(conn, "alice", "alice-password")
        create_user(conn, "alice-2")
        names = [
            sign_in_external(conn, Identity("github", str(i), login)).name
            for i, login in enumerate(["alice", "Alice", "__", "Ünïcode_Nämé", "x" * 60])
        ]
    assert names == ["alice-3", "alice-4", "github", "n-code-n-m", "x" * 40]


def test_a_signed_in_user_gets_the_identity_linked(engine: Engine) -> None:
    with engine.begin() as conn:
        me = sign_in_external(conn, Identity("github", "1", "me"))
        linked = sign_in_external(conn, Identity("huggingface", "hf-9", "someone-else"), signed_in=me)
        assert linked.id == me.id
        assert sign_in_external(conn, Identity("huggingface", "hf-9", "x")).id == me.id
        n = conn.execute(sa.select(sa.func.count()).select_from(USERS)).scalar_one()
    assert n == 1


def test_a_hidden_account_cannot_sign_in_and_an_identity_is_unique(engine: Engine) -> None:
    with engine.begin() as conn:
        a = sign_in_external(conn, Identity("github", "7", "seven"))
        conn.execute(sa.update(USERS).where(USERS.c.id == a.id).values(hidden=True))
        with pytest.raises(RegistryError) as exc:
            sign_in_external(conn, Identity("github", "7", "seven"))
        assert exc.value.status == 403
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
        row = {
            "provider": "github",
            "subject": "7",
            "user_id": a.id,
            "login": "",
            "created_at": sa.func.now(),
        }
        conn.execute(sa.insert(IDENTITIES).values(**row, last_sign_in_at=sa.func.now()))
    with pytest.raises(RegistryError):
        Identity("github", "", "nobody")


GH = {"LAIR_REGISTRY_GITHUB_CLIENT_ID": "gh-id"}


def test_providers_from_the_environment(tmp_path: Path) -> None:
    assert load_providers({}) == {}
    secret = tmp_path / "secret"
    secret.write_text("s3cr3t-value\n")
    env = GH | {"LAIR_REGISTRY_GITHUB_CLIENT_SECRET_FILE": str(secret)}
    gh = load_providers(env)["github"]
    assert gh.client_secret.get_secret_value() == "s3cr3t-value"
    assert gh.token_url == "https://github.com/login/oauth/access_token" and not gh.oidc
    assert "s3cr3t" not in repr(gh) and "s3cr3t" not in str(gh.model_dump())
    hf = load_providers(
        {"LAIR_REGISTRY_HUGGINGFACE_CLIENT_ID": "h", "LAIR_REGISTRY_HUGGINGFACE_CLIENT_SECRET": "x"}
    )
    assert hf["huggingface"].register_kwargs()["server_metadata_url"] == (
        "https://huggingface.co/.well-known/openid-configuration"
    )
    assert state_key(load_providers(env)) == state_key(load_providers(env)) != state_key(hf)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({}, "LAIR_REGISTRY_GITHUB_CLIENT_ID is set but the github client secret is not"),
        (
            {"LAIR_REGISTRY_GITHUB_CLIENT_SECRET": "a", "LAIR_REGISTRY_GITHUB_CLIENT_SECRET_FILE": "/x"},
            "both set",
        ),
        ({"LAIR_REGISTRY_GITHUB_CLIENT_SECRET_FILE": "/nonexistent/secret"}, "No such file or directory"),
        (
            {"LAIR_REGISTRY_GITHUB_CLIENT_SECRET": "a", "LAIR_REGISTRY_GITHUB_TOKEN_URL": "ftp://x"},
            "not an http(s) URL",
        ),
    ],
)
def test_bad_provider_settings_are_config_errors(extra: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_providers(GH | extra)
    assert message in exc.value.message


def test_serve_refuses_a_client_id_without_a_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for field in ("CLIENT_ID", "CLIENT_SECRET", "CLIENT_SECRET_FILE"):  # undone after the test
        monkeypatch.setenv(f"LAIR_REGISTRY_GITHUB_{field}", "")
    rc = main(["serve", "--db", str(tmp_path / "r.sqlite3"), "--github-client-id", "gh-id", "--port", "1"])
    assert rc != 0
    assert "the github client secret is not" in capsys.readouterr().err


def test_without_providers_there_is_no_button_and_no_auth_route(tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    from lair.registry.serve import prepare
    from lair.registry.web.app import create_app

    url, _ = prepare(str(tmp_path / "r.sqlite3"), seed=False)
    with TestClient(create_app(url, oauth={})) as c:
        page = c.get("/signin")
        assert page.status_code == 200 and 'id="signin"' in page.text and "Sign in with" not in page.text
        assert c.get("/auth/github/login").status_code == 404
