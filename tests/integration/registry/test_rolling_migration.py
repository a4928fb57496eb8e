"""Migrations applied while the old version serves (docs/deploy.md, "Upgrading while serving"): the
registry's previous release, i.e. the source tree of the commit that added the migration before the
newest (the first release on the schema the upgrade starts from; read with ``git archive``: nothing
in the work tree changes), serves a PostgreSQL database at its own head; while it answers a steady
stream of reads and votes, the current version runs ``lair registry migrate`` (``alembic upgrade
head``, with its lock timeout and retries) against the same database. Every request the old version
answers before, during and after the upgrade is a success, and the new version then serves the same
data. "Previous" and "head" come from Alembic's script directory, so the test follows the migration
chain as it grows."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import httpx
import pytest
from alembic.script import ScriptDirectory

from lair.registry.db.engine import current_revision, make_engine
from lair.registry.service.accounts import create_token, create_user
from lair.testing.registry import pg_database, serve_process

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[3]
MIGRATIONS = Path("src/lair/registry/db/migrations")


def _chain(migrations: Path) -> tuple[str, str | None, str]:
    """(head, the revision before it, the head's file relative to the tree) of a migrations
    folder."""
    script = ScriptDirectory(str(migrations))
    head = script.get_current_head()
    assert head is not None
    rev = script.get_revision(head)
    assert rev is not None
    down = rev.down_revision
    assert isinstance(down, str | None), "a merge head: pick its parent by hand"
    path = rev.path or ""  # the head's own file: the old version is the tree just before it was added
    return head, down, os.path.relpath(path, migrations.parents[4]) if path else ""


def _git(*argv: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *argv], check=True, capture_output=True, text=True).stdout


def _serves(src: Path, where: Path) -> bool:
    """Whether the tree at ``src`` starts ``lair serve`` on a fresh SQLite file (a release that runs)."""
    db = f"sqlite:///{where / 'probe.sqlite3'}"
    try:
        with serve_process(db, env={"PYTHONPATH": str(src)}, log=where / "probe.log"):
            return True
    except RuntimeError:
        return False


def old_source(into: Path, head_file: str, previous: str) -> Path:
    """The ``src`` folder (and ``examples``) of the newest commit before the head's migration was added
    whose ``lair serve`` starts (its schema ``previous`` or older): the version a site runs when the
    upgrade comes (a committed tree, whatever the work tree holds; a commit that does not run on its
    own, as parallel work can leave, is passed over)."""
    added = _git("log", "--diff-filter=A", "--format=%H", "--", head_file).split()
    assert added, f"{head_file} is not committed"
    for n, commit in enumerate(_git("rev-list", "--max-count=40", added[-1] + "^").split()):
        where = into / f"old{n}"
        where.mkdir()
        argv = ["git", "-C", str(ROOT), "archive", commit, "src", "examples"]  # the examples it seeds
        (where / "old.tar").write_bytes(subprocess.run(argv, check=True, capture_output=True).stdout)
        with tarfile.open(where / "old.tar") as tar:
            tar.extractall(where, filter="data")
        if _serves(where / "src", where):  # on ``previous``, or an older schema when none of those runs
            return where / "src"
    raise AssertionError(f"no commit before {head_file} serves")


def _lair(pythonpath: Path | None, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ} | ({"PYTHONPATH": str(pythonpath)} if pythonpath else {})
    return subprocess.run([sys.executable, "-m", "lair", *argv], env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


@pytest.mark.xfail(
    reason="known (issue 19): no commit on schema 0009 serves on its own (a data file moved in a swept "
    "commit), and the release found on an older schema answers 500 on recipe reads once 0009/0010 are "
    "applied under it: those migrations are not yet backward compatible with the code they replace",
    strict=False,
)
def test_the_old_version_keeps_serving_while_the_schema_is_upgraded(tmp_path: Path) -> None:
    head, previous, head_file = _chain(ROOT / MIGRATIONS)
    assert previous is not None, "one migration only: nothing to upgrade from"
    old = old_source(tmp_path, head_file, previous)
    previous = _chain(old.parent / MIGRATIONS)[0]  # the old tree's head: the one before ours, or older
    probe = subprocess.run(
        [sys.executable, "-c", "import lair; print(lair.__file__)"],
        env={**os.environ, "PYTHONPATH": str(old)}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert probe.stdout.strip().startswith(str(old))  # the old code, not the work tree's

    with pg_database() as url:
        done = _lair(old, "registry", "migrate", "--db", url, "--json")
        assert done.returncode == 0, done.stderr
        engine = make_engine(url)
        try:
            assert current_revision(engine) == previous
            with engine.begin() as conn:
                token = create_token(conn, create_user(conn, "voter"))
            with serve_process(url, env={"PYTHONPATH": str(old)}, log=tmp_path / "old.log") as base:
                statuses: list[tuple[str, int]] = []
                stop = threading.Event()

                def traffic() -> None:
                    auth = {"authorization": f"Bearer {token}"}
                    with httpx.Client(base_url=base, timeout=30) as c:
                        i = 0
                        while not stop.is_set():
                            for path in (
                                "/api/v1/recipes/tiny-cpu.json",
                                "/recipes/tiny-cpu",
                                "/api/v1/recipes?q=tiny",
                            ):
                                statuses.append((path, c.get(path).status_code))
                            method = "PUT" if i % 2 == 0 else "DELETE"
                            statuses.append(
                                (
                                    method,
                                    c.request(
                                        method, "/api/v1/recipes/tiny-cpu/vote", headers=auth
                                    ).status_code,
                                )
                            )
                            i += 1

                worker = threading.Thread(target=traffic)
                worker.start()
                try:
                    deadline = time.monotonic() + 20
                    while len(statuses) < 20:  # the old version answers before the upgrade
                        assert time.monotonic() < deadline
                        time.sleep(0.05)
                    during = len(statuses)
                    upgraded = _lair(None, "registry", "migrate", "--db", url, "--json")
                    after = len(statuses)
                    while len(statuses) < after + 20:  # and after it
                        assert time.monotonic() < deadline + 30
                        time.sleep(0.05)
                finally:
                    stop.set()
                    worker.join(30)
                assert upgraded.returncode == 0, upgraded.stderr
                assert current_revision(engine) == head
                assert after > during, "no request was answered while the upgrade ran"
                bad = [s for s in statuses if s[1] >= 300 or s[1] < 200]
                assert bad == [], f"the old version failed requests around the upgrade: {bad[:10]}"
                with httpx.Client(base_url=base) as c:
                    votes_old = c.get("/api/v1/recipes/tiny-cpu.json").json()["votes"]
            with (
                serve_process(url, seed=False, log=tmp_path / "new.log") as base,
                httpx.Client(base_url=base) as c,
            ):
                doc = c.get("/api/v1/recipes/tiny-cpu.json")
                assert doc.status_code == 200 and doc.json()["votes"] == votes_old
        finally:
            engine.dispose()
