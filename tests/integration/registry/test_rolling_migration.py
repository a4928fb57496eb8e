"""Migrations applied while the old version serves (docs/deploy.md, "Upgrading while serving").

The old version is the registry's previous release: the source tree (``git archive``: nothing in the
work tree changes) of the newest commit before the head migration was committed (HEAD itself while
the head migration is not committed yet) whose ``lair serve`` answers the reads this test sends. A
commit that only starts is not enough: ccbbe3c moved ``registry/data/cuda_drivers.toml`` to
``fit/`` while the code went on reading it there until dd1063f, so the commits between them on 0009
fail at start (``lair serve`` renders the stored documents) and ccbbe3c itself, on 0008, answers
its health check yet 500 on every recipe read: the failures this test once saw were those, not the
migrations. "Previous" is that tree's own head: the head minus one, or an older one when no commit
on the head minus one serves, in which case every later migration is applied under it.

The old version serves a PostgreSQL database at its own head and answers a steady stream of reads
and votes while the current version runs ``lair registry migrate`` (``alembic upgrade head``, with
its lock timeout and retries) against it; then the current version starts beside it, as the first
host of the rolling restart, and both serve while the old one goes on taking votes. Every answer of
either is a success. The old release's writes do not keep the stored documents as the current one
does: the current version serves them from fresh renders while its stamp is behind, and once the
old version is gone it has rendered them again, so the votes cast through the old one are in its
stored documents (the bytes a fresh render gives) and it serves the same data."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType

import httpx
import orjson
import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory

from lair.registry.db.engine import current_revision, make_engine
from lair.registry.db.tables import VERSION
from lair.registry.service.accounts import create_token, create_user
from lair.registry.service.stored import DOCUMENTS, render_documents
from lair.testing.registry import pg_database, serve_process

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[3]
MIGRATIONS = Path("src/lair/registry/db/migrations")
SLUG = "tiny-cpu"
READS = (f"/api/v1/recipes/{SLUG}.json", f"/recipes/{SLUG}", "/api/v1/recipes?q=tiny")
VOTERS = 400
"""More than the votes the old version takes in a run (about 100 here): one account each."""
SAME = ("slug", "revision", "sha256", "owner", "votes")
"""What the old and the new version's JSON document of the recipe must agree on."""


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
    """Whether the tree at ``src`` serves, on a fresh SQLite file, the reads the test sends (each a
    200): a release that runs, not one that only starts."""
    db = f"sqlite:///{where / 'probe.sqlite3'}"
    try:
        with (
            serve_process(db, env={"PYTHONPATH": str(src)}, log=where / "probe.log") as base,
            httpx.Client(base_url=base, timeout=30) as c,
        ):
            return all(c.get(p).status_code == 200 for p in READS)
    except (RuntimeError, TimeoutError):
        return False


def old_source(into: Path, head_file: str) -> tuple[Path, str]:
    """The ``src`` folder (and ``examples``, which it seeds) and the commit of the previous release:
    the newest commit before ``head_file`` was added (HEAD while it is not committed) whose tree
    serves; a commit that does not, as parallel work can leave, is passed over."""
    added = _git("log", "--diff-filter=A", "--format=%H", "--", head_file).split()
    start = added[-1] + "^" if added else "HEAD"
    passed: list[str] = []
    for n, commit in enumerate(_git("rev-list", "--max-count=40", start).split()):
        where = into / f"old{n}"
        where.mkdir()
        argv = ["git", "-C", str(ROOT), "archive", commit, "src", "examples"]
        (where / "old.tar").write_bytes(subprocess.run(argv, check=True, capture_output=True).stdout)
        with tarfile.open(where / "old.tar") as tar:
            tar.extractall(where, filter="data")
        if _serves(where / "src", where):
            print(f"previous release: {commit} (passed over, not serving: {passed or 'none'})")
            return where / "src", commit
        passed.append(commit[:7])
    raise AssertionError(f"no commit before {head_file} serves (passed over: {passed})")


def _lair(pythonpath: Path | None, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ} | ({"PYTHONPATH": str(pythonpath)} if pythonpath else {})
    return subprocess.run([sys.executable, "-m", "lair", *argv], env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


class Traffic:
    """A thread sending :data:`READS` to ``base`` in a loop, each round with a vote by the next of
    ``tokens`` while there is one (the count only grows: a stored document rendered before any vote
    shows fewer); every answer as (what, status), 0 for no answer."""

    def __init__(self, base: str, tokens: list[str] | None = None) -> None:
        self.base, self.tokens = base, tokens or []
        self.statuses: list[tuple[str, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _send(self, c: httpx.Client, method: str, path: str, token: str | None = None) -> None:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        try:
            status = c.request(method, path, headers=headers).status_code
        except httpx.HTTPError as exc:
            status, path = 0, f"{path} ({type(exc).__name__})"
        self.statuses.append((f"{method} {path}", status))

    def _run(self) -> None:
        with httpx.Client(base_url=self.base, timeout=30) as c:
            i = 0
            while not self._stop.is_set():
                for path in READS:
                    self._send(c, "GET", path)
                if i < len(self.tokens):
                    self._send(c, "PUT", f"/api/v1/recipes/{SLUG}/vote", self.tokens[i])
                i += 1

    def more(self, n: int, within: float = 30) -> None:
        """Wait for ``n`` more answers."""
        deadline, want = time.monotonic() + within, len(self.statuses) + n
        while len(self.statuses) < want:
            assert self._thread.is_alive() and time.monotonic() < deadline, "the traffic stalled"
            time.sleep(0.05)

    def failed(self) -> list[tuple[str, int]]:
        return [s for s in self.statuses if not 200 <= s[1] < 300]

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(30)


def _stamp(engine: sa.Engine) -> tuple[int, int | None]:
    with engine.connect() as conn:
        n, documents = conn.execute(sa.select(VERSION.c.n, VERSION.c.documents)).one()
        return int(n), documents


def _stored_and_fresh(engine: sa.Engine) -> tuple[dict[tuple[str, int], bytes], dict[tuple[str, int], bytes]]:
    """The recipe's stored rows and what the current code renders from the tables now."""
    d = DOCUMENTS.c
    with engine.connect() as conn:
        rows = conn.execute(sa.select(d.kind, d.revision, d.body).where(d.slug == SLUG))
        stored = {(r.kind, r.revision): bytes(r.body) for r in rows}
        fresh = {(r["kind"], r["revision"]): r["body"] for r in render_documents(conn, SLUG)}
    return stored, fresh


def _previous_release(tmp_path: Path) -> tuple[str, str, Path]:
    """(head, the previous release's head, its ``src``)."""
    head, previous, head_file = _chain(ROOT / MIGRATIONS)
    assert previous is not None, "one migration only: nothing to upgrade from"
    old, commit = old_source(tmp_path, head_file)
    previous = _chain(old.parent / MIGRATIONS)[0]  # the old tree's head: the one before ours, or older
    assert previous != head, f"{commit} already has {head}"
    probe = subprocess.run(
        [sys.executable, "-c", "import lair; print(lair.__file__)"],
        env={**os.environ, "PYTHONPATH": str(old)}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert probe.stdout.strip().startswith(str(old))  # the old code, not the work tree's
    return head, previous, old


def _upgrade_while_serving(
    stack: ExitStack, url: str, head: str, old_base: str, tokens: list[str], log: Path
) -> str:
    """Votes and reads through the old version before, during and after ``lair registry migrate``,
    and while the new version (started on ``stack``) serves beside it; the new version's URL."""
    with Traffic(old_base, tokens) as old_traffic:
        old_traffic.more(20)  # the old version answers before the upgrade
        during = len(old_traffic.statuses)
        upgraded = _lair(None, "registry", "migrate", "--db", url, "--json")
        answered = len(old_traffic.statuses) - during
        assert upgraded.returncode == 0, upgraded.stderr
        new_base = stack.enter_context(serve_process(url, seed=False, log=log))
        with Traffic(new_base) as new_traffic:  # the first host restarted: both versions serve
            old_traffic.more(20)  # votes through the old one after the new one stored its documents
            new_traffic.more(20)
    engine = make_engine(url)
    try:
        assert current_revision(engine) == head
    finally:
        engine.dispose()
    assert answered > 0, "no request was answered while the upgrade ran"
    assert old_traffic.failed() == [], f"the old version failed requests: {old_traffic.failed()[:10]}"
    assert new_traffic.failed() == [], f"the new version failed requests: {new_traffic.failed()[:10]}"
    return new_base


def _listed_votes(c: httpx.Client) -> int:
    listed = c.get("/api/v1/recipes", params={"q": "tiny"}).json()["items"]
    return int(next(i["votes"] for i in listed if i["slug"] == SLUG))


def _caught_up(new_base: str, engine: sa.Engine, old_doc: dict[str, object], votes: int) -> None:
    """The new version shows the old one's votes at once, renders its stored documents again (the
    bytes a fresh render gives, the votes in them) and serves the same data."""
    with httpx.Client(base_url=new_base) as c:
        assert c.get(READS[0]).json()["votes"] == votes  # at once: a fresh render while stale
        deadline = time.monotonic() + 60
        while (stamp := _stamp(engine))[1] != stamp[0]:
            assert time.monotonic() < deadline, f"the stored documents stayed stale: {stamp}"
            assert c.get(READS[0]).is_success  # a read pokes the refresh
            time.sleep(0.1)
        stored, fresh = _stored_and_fresh(engine)
        assert stored == fresh, "the stored documents are not what a fresh render gives"
        assert orjson.loads(stored[("json", 0)])["votes"] == votes
        new_doc = c.get(READS[0]).json()
        assert {k: new_doc[k] for k in SAME} == {k: old_doc[k] for k in SAME}
        assert c.get(READS[1]).is_success
        # a cached list outlives a vote by at most 1 s (docs/registry.md); give it 5
        deadline = time.monotonic() + 5
        while (listed := _listed_votes(c)) != votes and time.monotonic() < deadline:
            time.sleep(0.2)
        assert listed == votes


def test_the_old_version_keeps_serving_while_the_schema_is_upgraded(tmp_path: Path) -> None:
    head, previous, old = _previous_release(tmp_path)
    with pg_database() as url, ExitStack() as stack:
        done = _lair(old, "registry", "migrate", "--db", url, "--json")
        assert done.returncode == 0, done.stderr
        engine = make_engine(url)
        stack.callback(engine.dispose)
        assert current_revision(engine) == previous
        with engine.begin() as conn:
            tokens = [create_token(conn, create_user(conn, f"voter{i}")) for i in range(VOTERS)]
            late = {"authorization": f"Bearer {create_token(conn, create_user(conn, 'late-voter'))}"}
        olds = stack.enter_context(ExitStack())  # the old version: stopped before the new one
        old_env = {"PYTHONPATH": str(old)}
        old_base = olds.enter_context(serve_process(url, env=old_env, log=tmp_path / "old.log"))
        new_base = _upgrade_while_serving(stack, url, head, old_base, tokens, tmp_path / "new.log")
        with httpx.Client(base_url=old_base) as c:  # a last vote through the old version, for sure
            assert c.put(f"/api/v1/recipes/{SLUG}/vote", headers=late).is_success
            old_doc = c.get(READS[0]).json()
        olds.close()  # the last old host restarted
        with engine.connect() as conn:  # the count from the tables, not from either version
            votes = conn.execute(sa.text("SELECT votes FROM recipes WHERE slug = :s"), {"s": SLUG}).scalar()
        assert old_doc["votes"] == votes
        _caught_up(new_base, engine, old_doc, votes)
