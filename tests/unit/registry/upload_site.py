"""The registry in process (the real app over SQLite and PostgreSQL, the bundled examples seeded) and
an uploader's token, with the tiny-cpu revision's canonical TOML and sha256 a report must name."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine
from starlette.testclient import TestClient

from lair.registry.service.accounts import create_token, create_user
from lair.registry.service.publish import seed_examples
from lair.registry.service.recompute import check_cells
from lair.registry.web.app import create_app
from lair.registry.web.auth import reset_limits
from lair.testing.uploads import encode, report_files, tar_gz


@dataclass
class Site:
    client: TestClient
    engine: Engine
    base: dict[str, Any]
    """A report that the registry accepts (201): its cell filled in from the server's recomputation."""
    other: str = ""
    """The token of a second uploader (``as_other=True``)."""

    def post(self, data: bytes, *, as_other: bool = False) -> Any:
        reset_limits()  # many uploads by one account: the write rate limit is not under test here
        headers = {"content-type": "application/gzip"}
        if as_other:
            headers["authorization"] = f"Bearer {self.other}"
        return self.client.post("/api/v1/reports", content=data, headers=headers)

    def report(self) -> dict[str, Any]:
        return copy.deepcopy(self.base)

    def upload(self, files: dict[str, Any], *, as_other: bool = False) -> Any:
        return self.post(tar_gz(encode(files)), as_other=as_other)


def make_site(db_url: str, engine: Engine) -> Iterator[Site]:
    reset_limits()
    with engine.begin() as conn:
        seed_examples(conn)
        token = create_token(conn, create_user(conn, "uploader"), "cli")
        other = create_token(conn, create_user(conn, "second-uploader"), "cli")
        toml, sha = conn.execute(
            sa.text(
                "SELECT v.toml, v.sha256 FROM revisions v JOIN recipes r ON r.id = v.recipe_id "
                "WHERE r.slug = 'tiny-cpu' AND v.number = 1"
            )
        ).one()
    base = report_files(toml, sha)
    (again,), _reasons = check_cells(base["results.json"]["bench"], base["requests.jsonl"])
    cell = base["results.json"]["bench"]["cells"][0]
    cell.update({k: v for k, v in again.items() if k in cell})
    with TestClient(create_app(db_url), raise_server_exceptions=False) as c:
        c.headers["authorization"] = f"Bearer {token}"
        yield Site(c, engine, base, other)


@pytest.fixture
def site(db_url: str, engine: Engine) -> Iterator[Site]:
    yield from make_site(db_url, engine)
