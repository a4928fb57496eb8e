"""Registry test helpers users may want too: a throw-away PostgreSQL database, a ``lair serve``
process on an ephemeral port (started with its descriptors closed, stopped and reaped on exit), and a
snapshot of every table to prove that a refused request changed nothing; a hand-set verified speed row;
schemathesis' serializer of the report upload's ``application/gzip`` body."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = [
    "PG_ADMIN_URL",
    "ServedURL",
    "add_verified_row",
    "charts_drawn",
    "db_snapshot",
    "free_port",
    "gzip_serializer",
    "pg_database",
    "rendered",
    "serve_process",
    "tgz",
    "unsafe_routes",
    "wait_http",
]

PG_ADMIN_URL = os.environ.get("LAIR_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def tgz(files: dict[str, bytes]) -> bytes:
    """A ``.tar.gz`` of ``files`` (name -> bytes) as an upload body; names kept as given, hostile too."""
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def pg_database(admin_url: str = PG_ADMIN_URL) -> Iterator[str]:
    """A new, uniquely named database on the server of ``admin_url``; dropped afterwards."""
    import psycopg

    name = f"lair_test_{os.getpid()}_{secrets.token_hex(4)}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = admin_url.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def wait_http(url: str, timeout: float = 30.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Poll ``url`` until it answers 200, with a deadline (and fail early if ``proc`` died)."""
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} did not answer within {timeout} s")
        time.sleep(0.05)


class ServedURL(str):
    """The base URL of a :func:`serve_process`; ``pid`` leads its process group (the workers, their
    chart drawers), for a test that kills it."""

    pid: int


@contextmanager
def serve_process(
    db_url: str,
    *,
    workers: int = 1,
    port: int | None = None,
    log: Path | None = None,
    seed: bool = True,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> Iterator[ServedURL]:
    """``lair serve`` on 127.0.0.1 and a free port, with more ``args`` and ``env``; yields its base URL."""
    port = port or free_port()
    argv = [
        sys.executable,
        "-m",
        "lair",
        "serve",
        "--db",
        db_url,
        "--port",
        str(port),
        "--workers",
        str(workers),
    ]
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        argv + ([] if seed else ["--no-seed"]) + list(args),
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=subprocess.STDOUT,
        close_fds=True,
        start_new_session=True,
    )
    base = ServedURL(f"http://127.0.0.1:{port}")
    base.pid = proc.pid
    try:
        wait_http(base + "/api/v1/health", 60, proc)
        yield base
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if log:
            out.close()  # type: ignore[union-attr]


@contextmanager
def _engine(db_url: str) -> Iterator[Any]:
    """An engine of its own on ``db_url``, disposed after the block."""
    from lair.registry.db.engine import make_engine

    engine = make_engine(db_url)
    try:
        yield engine
    finally:
        engine.dispose()


def db_snapshot(db_url: str) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every table of the registry's schema, in a stable order (once no chart is pending)."""
    import sqlalchemy as sa

    from lair.registry.db.schema import Base

    with _engine(db_url) as engine:
        _drawn(engine)
        with engine.connect() as conn:
            return {
                t.name: [tuple(r) for r in conn.execute(sa.select(t).order_by(*t.primary_key.columns))]
                for t in Base.metadata.sorted_tables
            }


def _drawn(engine: object, timeout: float = 120.0) -> None:
    """Wait until no recipe waits for a chart: every drawer (in any process) rendered what earlier
    writes left to it, so a snapshot sees no change that is not the next request's."""
    import sqlalchemy as sa

    assert isinstance(engine, sa.Engine)
    if not sa.inspect(engine).has_table("chart_pending"):
        return
    deadline = time.monotonic() + timeout
    while True:
        with engine.connect() as conn:
            if not conn.execute(sa.text("SELECT count(*) FROM chart_pending")).scalar_one():
                return
        assert time.monotonic() < deadline, f"charts still pending after {timeout} s"
        time.sleep(0.05)


def unsafe_routes(app: object) -> set[tuple[str, str]]:
    """(method, path) of every POST, PUT, PATCH and DELETE route in the route table of ``app`` (what
    ``create_app`` returns: the Starlette app inside the response-cache front), mounts included."""
    from starlette.routing import Mount, Route

    from lair.registry.web.auth import UNSAFE_METHODS as unsafe

    out: set[tuple[str, str]] = set()
    pending = [("", r) for r in app.app.routes]  # type: ignore[attr-defined]
    while pending:
        prefix, r = pending.pop()
        if isinstance(r, Route):
            out |= {(m, prefix + r.path) for m in (r.methods or ()) if m in unsafe}
        elif isinstance(r, Mount):
            pending += [(prefix + r.path, sub) for sub in r.routes]
    return out


def charts_drawn(app: object, timeout: float = 120.0) -> None:
    """Wait until the chart drawers drew what the writes so far left to them: the stored pages hold
    their charts inline again. ``app`` is what ``create_app`` returns, or the database URL of
    serving processes (their drawers are in other processes)."""
    if not isinstance(app, str):
        _drawn(app.app.state.engine, timeout)  # type: ignore[attr-defined]
        return
    with _engine(app) as engine:
        _drawn(engine, timeout)


def rendered(conn: object, slug: str) -> None:
    """After rows were written straight to the tables (as a test sets a scene): re-render the stored
    documents of ``slug``, as every write of the service layer does (``stored.changed``)."""
    import sqlalchemy as sa

    from lair.registry.db.tables import RECIPES
    from lair.registry.service.stored import changed

    assert isinstance(conn, sa.Connection)
    changed(conn, [conn.execute(sa.select(RECIPES.c.id).where(RECIPES.c.slug == slug)).scalar_one()])


def add_verified_row(
    conn: object,
    slug: str,
    *,
    context: int,
    decode_tok_s: float,
    submitted_by: int | None = None,
    refresh: bool = True,
) -> int:
    """A verified speed row of ``slug``'s latest revision, as an accepted report leaves one (without the
    report itself): the recipe's speed columns recomputed and its stored documents rendered (unless
    ``refresh`` is off: a database at a schema before them) and the data version bumped; its
    measurement id."""
    import sqlalchemy as sa

    from lair.registry.db.tables import MEASUREMENTS, RECIPES, REVISIONS
    from lair.registry.db.version import bump_version, now
    from lair.registry.service.speeds import refresh_speeds

    assert isinstance(conn, sa.Connection)
    rid, rev = conn.execute(
        sa.select(RECIPES.c.id, REVISIONS.c.id)
        .join(REVISIONS, REVISIONS.c.recipe_id == RECIPES.c.id)
        .where(RECIPES.c.slug == slug, REVISIONS.c.number == RECIPES.c.latest_revision)
    ).one()
    values = {"recipe_id": rid, "revision_id": rev, "context": context, "concurrency": 1}
    values |= {"decode_tok_s": decode_tok_s, "provenance": "verified", "submitted_by": submitted_by}
    values |= {
        "rig_fingerprint": secrets.token_hex(8),
        "report_id": secrets.token_hex(8),
        "created_at": now(),
    }
    stmt = sa.insert(MEASUREMENTS).values(**values).returning(MEASUREMENTS.c.id)
    mid = int(conn.execute(stmt).scalar_one())
    if refresh:  # as every write: the recipe's stored documents rendered again, cached pages go stale
        from lair.registry.service.stored import changed

        refresh_speeds(conn, rid)
        changed(conn, [rid])
    else:
        bump_version(conn)
    return mid


def gzip_serializer() -> None:
    """Teach schemathesis (imported here: a test dependency) to send an ``application/gzip`` body, the
    report upload's, as the bytes generated or given for it."""
    import schemathesis

    @schemathesis.serializer("application/gzip")
    def _gzip(ctx: object, value: object) -> bytes:
        return value if isinstance(value, bytes) else str(value).encode()
