"""The registry's one settings table: every setting read from its variable by ``Settings.from_env``
alone (a guard: no other registry module reads ``os.environ`` but the entry point and the S3
credential chain), and each app with its own rate limiter, so two apps in one process (two tests,
two sites) never share a count."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from registry_paths import LLAMA
from starlette.testclient import TestClient

from lair.errors import ConfigError
from lair.registry.db.engine import make_engine, migrate
from lair.registry.service.accounts import create_token, create_user
from lair.registry.service.publish import publish, seed_examples
from lair.registry.settings import SETTINGS, Settings
from lair.registry.web.app import create_app

REGISTRY = Path(__file__).resolve().parents[3] / "src" / "lair" / "registry"


def test_every_setting_comes_from_its_variable() -> None:
    env = {
        "LAIR_REGISTRY_DB": "sqlite:////srv/r.sqlite3",
        "LAIR_REGISTRY_PUBLIC_URL": "https://recipes.example/",
        "LAIR_REGISTRY_ALLOWED_HOSTS": "a.example, b.example,",
        "LAIR_REGISTRY_BLOBS": "s3://bucket/p",
        "LAIR_REGISTRY_CACHE_MB": "0",
        "LAIR_REGISTRY_REDIS": "redis://127.0.0.1:6379/3",
        "LAIR_REGISTRY_WRITE_LIMIT": "5/minute",
        "LAIR_REGISTRY_CHARTS": "inline",
        "LAIR_REGISTRY_FORWARDED_ALLOW_IPS": "10.0.0.2, 10.0.1.0/24",
        "LAIR_REGISTRY_NEW_ACCOUNT_DAYS": "7",
    }
    assert {s.env for s in SETTINGS} == set(env)
    conf = Settings.from_env(env)
    assert (conf.db, conf.public_url, conf.allowed_hosts) == (
        "sqlite:////srv/r.sqlite3",
        "https://recipes.example",
        ("a.example", "b.example"),
    )
    assert (conf.blobs, conf.cache_mb, conf.redis, conf.write_limit, conf.charts) == (
        "s3://bucket/p",
        0,
        "redis://127.0.0.1:6379/3",
        "5/minute",
        "inline",
    )
    assert conf.forwarded_allow_ips == ("10.0.0.2", "10.0.1.0/24")
    assert Settings.from_env({"LAIR_HOME": "/h"}).db == "sqlite:////h/registry/registry.sqlite3"
    assert Settings.from_env({}).write_limit == "60/minute"
    assert Settings.from_env({}).forwarded_allow_ips == ()


@pytest.mark.parametrize("bad", ["*", "nginx.internal", "10.0.0.300"])
def test_a_trusted_proxy_is_an_address_or_network(bad: str) -> None:
    """``*`` would let every client name any address (and spread its attempts over as many limits)."""
    with pytest.raises(ConfigError, match="LAIR_REGISTRY_FORWARDED_ALLOW_IPS"):
        Settings.from_env({"LAIR_REGISTRY_FORWARDED_ALLOW_IPS": f"127.0.0.1,{bad}"})


def test_only_the_settings_table_and_the_entry_point_read_the_environment() -> None:
    readers = sorted(
        str(p.relative_to(REGISTRY))
        for p in REGISTRY.rglob("*.py")
        if re.search(r"os\.environ|os\.getenv", p.read_text())
    )
    # serve.py: the entry point hands flags to its workers; backup.py: pg_dump's own environment;
    # blobs.py: the AWS credential chain (AWS_* variables), read as boto3 reads them
    assert readers == ["serve.py", "service/backup.py", "service/blobs.py", "settings.py"]


def test_each_app_has_its_own_rate_limits(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.sqlite3'}"
    engine = make_engine(url)
    migrate(engine)
    with engine.begin() as conn:
        seed_examples(conn)
        token = create_token(conn, create_user(conn, "voter"), "cli")
    engine.dispose()
    strict = create_app(
        settings=Settings.from_env({"LAIR_REGISTRY_DB": url, "LAIR_REGISTRY_WRITE_LIMIT": "2/minute"})
    )
    with TestClient(strict) as a:
        auth = {"authorization": f"Bearer {token}"}
        answers = [a.put("/api/v1/recipes/tiny-cpu/vote", headers=auth).status_code for _ in range(3)]
        assert answers == [200, 200, 429]
        other = create_app(settings=Settings.from_env({"LAIR_REGISTRY_DB": url}))  # same database, own limits
        with TestClient(other) as b:
            assert b.put("/api/v1/recipes/tiny-cpu/vote", headers=auth).status_code == 200
        assert a.put("/api/v1/recipes/tiny-cpu/vote", headers=auth).status_code == 429  # still over its own


def test_the_chart_mode_is_deferred_or_inline_and_named_when_wrong(tmp_path: Path) -> None:
    assert Settings.from_env({}).charts == "deferred"
    with pytest.raises(ConfigError, match=r"LAIR_REGISTRY_CHARTS: 'later' is not one of deferred, inline"):
        Settings.from_env({"LAIR_REGISTRY_CHARTS": "later"})
    url = f"sqlite:///{tmp_path / 'r.sqlite3'}"
    engine = make_engine(url)
    migrate(engine)
    engine.dispose()
    app = create_app(settings=Settings.from_env({"LAIR_REGISTRY_DB": url, "LAIR_REGISTRY_CHARTS": "inline"}))
    with TestClient(app) as client:
        assert app.app.state.drawer is None
        engine = app.app.state.engine
        with engine.begin() as conn:  # a write over the app's own engine: no drawer, drawn inline
            publish(conn, LLAMA.read_text(), owner="author")
        page = client.get("/recipes/llama31-8b-rtx4090-sglang").text
        assert page.count('class="chart"') == 1 and "chart-pending" not in page


def test_the_database_urls_sslmode_reaches_the_driver(pg_url: str) -> None:
    """deploy/systemd/registry.env.example asks for ``sslmode=verify-full``: the URL's parameters go to
    libpq as they are, so this PostgreSQL (no TLS) is refused under ``require`` and reached under
    ``disable``: a TLS requirement in the URL cannot be silently dropped."""
    import sqlalchemy as sa

    from lair.registry.db.engine import connect_url

    sep = "&" if "?" in pg_url else "?"
    refused = make_engine(connect_url(pg_url + sep + "sslmode=require"))
    with pytest.raises(sa.exc.OperationalError, match="does not support SSL"):
        refused.connect().close()
    refused.dispose()
    plain = make_engine(connect_url(pg_url + sep + "sslmode=disable"))
    with plain.connect() as conn:
        assert conn.execute(sa.text("SHOW ssl")).scalar_one() == "off"
    plain.dispose()


def test_the_process_environment_is_read_when_no_snapshot_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAIR_REGISTRY_CACHE_MB", "0")
    monkeypatch.setenv("LAIR_REGISTRY_ALLOWED_HOSTS", "x.example,y.example")
    conf = Settings.from_env()
    assert (conf.cache_mb, conf.allowed_hosts) == (0, ("x.example", "y.example"))
    assert Settings.from_env({}).cache_mb == 64  # a snapshot given: the process's variables are not read
    monkeypatch.setenv("LAIR_REGISTRY_CACHE_MB", "-1")
    with pytest.raises(ConfigError, match=r"^LAIR_REGISTRY_CACHE_MB: '-1': Input should be greater than"):
        Settings.from_env()
