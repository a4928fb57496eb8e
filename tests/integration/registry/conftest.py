"""A real ``lair serve`` (granian, SQLite) seeded with the bundled examples and the test recipe, and a
page of the shared headless Chromium (``browser``, from :mod:`lair.testing.fixtures`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lair.registry.db.engine import make_engine
from lair.registry.serve import prepare
from lair.registry.service.publish import publish
from lair.testing.registry import serve_process

ROOT = Path(__file__).resolve().parents[3]
LLAMA = ROOT / "tests" / "data" / "registry" / "llama31-8b.toml"


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Screenshots and logs of the run: ``LAIR_TEST_ARTIFACTS`` or the run's temp dir."""
    out = Path(os.environ.get("LAIR_TEST_ARTIFACTS") or tmp_path_factory.getbasetemp() / "artifacts")
    out.mkdir(parents=True, exist_ok=True)
    return out


@dataclass(frozen=True)
class Served:
    db: str
    base: str


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, artifacts: Path) -> Iterator[Served]:
    """The site of a test module and its database (to look behind the pages)."""
    db = f"sqlite:///{tmp_path_factory.mktemp('site') / 'registry.sqlite3'}"
    prepare(db)
    engine = make_engine(db)
    with engine.begin() as conn:
        publish(conn, LLAMA.read_text(), owner="tester")
    engine.dispose()
    with serve_process(db, log=artifacts / "serve.log") as base:
        yield Served(db, base)


@pytest.fixture(scope="module")
def site(served: Served) -> str:
    return served.base


@pytest.fixture
def page(browser: object) -> Iterator[object]:
    ctx = browser.new_context(accept_downloads=True, viewport={"width": 1200, "height": 900})  # type: ignore[attr-defined]
    pg = ctx.new_page()
    yield pg
    ctx.close()
