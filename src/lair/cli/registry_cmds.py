"""``lair serve`` and ``lair registry migrate|seed|export-static``: the recipe site and its database."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import Any

from lair.cli._common import dump_json, err

__all__ = ["register"]

DB_HELP = (
    "database URL: a SQLite path or sqlite:///..., or postgresql://... without a password (it would show "
    "in ps: give it in PGPASSWORD, ~/.pgpass or LAIR_REGISTRY_DB) "
    "(default: LAIR_REGISTRY_DB, else a SQLite file in the user data dir)"
)


def db_arg(text: str) -> str:
    """An argparse ``type`` for ``--db``: a URL with a password is refused (every user of the machine
    sees a command line); the message never repeats the value."""
    from urllib.parse import urlsplit

    try:
        password = urlsplit(text).password if "://" in text else None
    except ValueError:
        password = None
    if password:
        raise argparse.ArgumentTypeError(
            "a password in the URL would show in ps: give it in PGPASSWORD, ~/.pgpass or "
            "LAIR_REGISTRY_DB (the URL there may hold it), and --db without it"
        )
    return text


# (flag suffix, LAIR_REGISTRY_<P>_ field, metavar, help); a client secret never comes from argv
OAUTH_FLAGS = [
    ("client-id", "client_id", "ID", "{t} OAuth app's client id: turns on 'Sign in with {t}'"),
    ("secret-file", "client_secret_file", "PATH", "file holding its client secret (or {env}_CLIENT_SECRET)"),
    ("authorize-url", "authorize_url", "URL", "authorization endpoint (default: {d})"),
    ("token-url", "token_url", "URL", "token endpoint (default: {d})"),
    ("userinfo-url", "userinfo_url", "URL", "user endpoint (default: {d})"),
]


def _oauth_flags(p: Any) -> None:
    from lair.registry.providers import PROVIDERS

    for name, d in PROVIDERS.items():
        g = p.add_argument_group(
            f"sign in with {d['title']} (each flag also as LAIR_REGISTRY_{name.upper()}_*)"
        )
        flags = OAUTH_FLAGS + (
            [("issuer", "issuer", "URL", "OpenID Connect issuer (default {i})")] if "issuer" in d else []
        )
        for suffix, field, metavar, text in flags:
            env = f"LAIR_REGISTRY_{name.upper()}"
            g.add_argument(
                f"--{name}-{suffix}",
                dest=f"oauth_{name}_{field}",
                metavar=metavar,
                help=text.format(t=d["title"], env=env, i=d.get("issuer"), d=d.get(field, "from the issuer")),
            )


def _oauth_settings(args: argparse.Namespace) -> dict[str, str]:
    from lair.registry.providers import env_name

    return {
        env_name(*key[len("oauth_") :].split("_", 1)): value
        for key, value in vars(args).items()
        if key.startswith("oauth_") and value
    }


def register(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="serve the recipe site and its JSON API",
        description="Serve the registry: upgrades the database, seeds the bundled examples into an empty "
        "one, "
        "then serves pages and /api/v1 with N worker processes.",
    )
    p.add_argument("--db", metavar="URL", type=db_arg, help=DB_HELP)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8780, help="port (default 8780)")
    p.add_argument("--workers", type=int, default=1, metavar="N", help="worker processes (default 1)")
    p.add_argument(
        "--public-url",
        metavar="URL",
        help="base URL of every absolute link (pages, JSON, llms.txt, OpenAPI); requests for another "
        "host name get 400 (default: LAIR_REGISTRY_PUBLIC_URL)",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name to answer for, repeatable (*.example.org for subdomains); others get 400 "
        "(default: LAIR_REGISTRY_ALLOWED_HOSTS, plus localhost when bound to a loopback address; with "
        "neither this nor --public-url every name is answered and links are relative)",
    )
    p.add_argument(
        "--forwarded-allow-ips",
        metavar="IP,NET",
        help="the reverse proxies (addresses or networks) whose X-Forwarded-For and X-Forwarded-Proto "
        "name the client and scheme, for the rate limits and cookies; requests from any other peer count "
        "as that peer (default: LAIR_REGISTRY_FORWARDED_ALLOW_IPS, else none)",
    )
    p.add_argument(
        "--no-seed", action="store_true", help="do not seed the bundled examples into an empty database"
    )
    _oauth_flags(p)
    p.add_argument(
        "--blobs",
        metavar="URL",
        help="where report files go: a folder or file:///folder, db (the registry's database), "
        "s3://BUCKET/PREFIX (endpoint and keys from LAIR_REGISTRY_S3_ENDPOINT and AWS_*, see "
        "docs/deploy.md), or a scheme a plugin registers (default: LAIR_REGISTRY_BLOBS, else a folder "
        "beside the SQLite file)",
    )
    p.set_defaults(handler=cmd_serve)

    r = sub.add_parser("registry", help="registry database: migrate, seed, export a static copy, back up")
    rs = r.add_subparsers(dest="registry_command", metavar="ACTION", required=True)
    m = rs.add_parser("migrate", help="upgrade the database schema (or downgrade with --to)")
    m.add_argument("--db", metavar="URL", type=db_arg, help=DB_HELP)
    m.add_argument(
        "--to", default="head", metavar="REV", help="target revision: head (default), base, or NNNN"
    )
    m.add_argument("--json", action="store_true", help="print one JSON document")
    m.set_defaults(handler=cmd_migrate)
    s = rs.add_parser("seed", help="publish the bundled example recipes not published yet")
    s.add_argument("--db", metavar="URL", type=db_arg, help=DB_HELP)
    s.add_argument("--json", action="store_true", help="print one JSON document")
    s.set_defaults(handler=cmd_seed)
    u = rs.add_parser("user", help="registry accounts (for operators and tests)")
    us = u.add_subparsers(dest="user_command", metavar="ACTION", required=True)
    ua = us.add_parser("add", help="create an account and print an API token for it (shown once)")
    ua.add_argument("name", metavar="NAME")
    ua.add_argument("--admin", action="store_true", help="the account may hide recipes and users")
    ua.add_argument("--scopes", default="read,publish", help="token scopes: read, publish (default both)")
    ua.add_argument("--db", metavar="URL", type=db_arg, help=DB_HELP)
    ua.add_argument("--json", action="store_true", help="print one JSON document")
    ua.set_defaults(handler=cmd_user_add)
    g = rs.add_parser(
        "import-git",
        help="load a git repository of recipes (lair TOML, sparkrun YAML) with its authors and history",
        description="Walks the repository's history oldest first: each commit that adds or changes a recipe "
        "file makes a revision by the commit's author (account git-NAME, no sign-in). Importing again adds "
        "only new commits; each revision's page links back to its file and commit.",
    )
    g.add_argument("repo", metavar="PATH_OR_URL", help="a repository's folder, or a URL git clones")
    g.add_argument("--db", metavar="URL", type=db_arg, help=DB_HELP)
    g.add_argument("--json", action="store_true", help="print one JSON document")
    g.set_defaults(handler=cmd_import_git)
    e = rs.add_parser("export-static", help="write the JSON API and the pages as files with the same URLs")
    e.add_argument("dir", metavar="DIR", help="output folder")
    e.add_argument("--db", metavar="URL", type=db_arg, help=DB_HELP)
    e.add_argument("--base-url", default="", metavar="URL", help="base URL the copy will be served from")
    e.add_argument("--json", action="store_true", help="print one JSON document")
    e.set_defaults(handler=cmd_export_static)
    _backup_parsers(rs)


BLOBS_HELP = "the blob store (default: LAIR_REGISTRY_BLOBS, else the folder beside the SQLite file)"


def _backup_parsers(rs: Any) -> None:
    b = rs.add_parser(
        "backup",
        help="write the database and every report blob to one archive, while the site serves",
        description="SQLite's online backup or pg_dump (custom format, one snapshot) plus every blob of "
        "every stored report, in a .tar.gz with a manifest (rows per table, sha256 of each blob).",
    )
    b.add_argument("out", metavar="OUT", help="the archive to write (.tar.gz)")
    b.add_argument("--db", metavar="URL", type=db_arg, help=DB_HELP)
    b.add_argument("--blobs", metavar="URL", help=BLOBS_HELP)
    b.add_argument("--json", action="store_true", help="print one JSON document")
    b.set_defaults(handler=cmd_backup)
    r = rs.add_parser(
        "restore",
        help="load a backup archive into an empty database and a blob store",
        description="Checks every member before anything loads (its sha256, its tar header: no links, "
        "bounded extended headers; blob keys; a dump holding anything but lair's own tables is refused), "
        "loads the database as data only (a PostgreSQL dump's rows into lair's own migrated schema, never "
        "its SQL), writes the blobs, upgrades the schema to head and compares the rows with the manifest.",
    )
    r.add_argument("archive", metavar="IN", help="an archive written by lair registry backup")
    r.add_argument("--db", metavar="URL", type=db_arg, help=DB_HELP + "; must be empty")
    r.add_argument("--blobs", metavar="URL", help=BLOBS_HELP)
    r.add_argument("--json", action="store_true", help="print one JSON document")
    r.set_defaults(handler=cmd_restore)


@contextlib.contextmanager
def _store(db: str | None, blobs: str | None) -> Iterator[tuple[str, Any]]:
    """The database URL and the blob store ``--blobs`` names (on that database's engine)."""
    from lair.registry.db.engine import connect_url, make_engine
    from lair.registry.service.blobs import blob_store
    from lair.registry.settings import Settings

    conf = Settings.from_env()
    url = connect_url(db or conf.db)
    engine = make_engine(url)
    try:
        yield url, blob_store(blobs or conf.blobs or None, db_url=url, engine=engine)
    finally:
        engine.dispose()


def _said(args: argparse.Namespace, out: dict[str, Any], verb: str) -> None:
    if args.json:
        dump_json(out)
        return
    rows = sum(v for k, v in out["tables"].items() if k != "alembic_version")
    err(f"{verb} {out['file']}: {out['database']} at {out['revision']}, {rows} rows, {out['blobs']} blobs")


def cmd_backup(args: argparse.Namespace) -> int:
    from lair.registry.service.backup import backup, summary

    with _store(args.db, args.blobs) as (url, store):
        _said(args, summary(backup(url, store, args.out), args.out), "wrote")
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    from lair.registry.service.backup import restore, summary

    with _store(args.db, args.blobs) as (url, store):
        _said(args, summary(restore(args.archive, url, store), args.archive), "restored")
    return 0


# An upgrade while the site serves (docs/deploy.md): on PostgreSQL the migration waits at most this
# long for each table lock, then rolls back whole (DDL is transactional) and tries again, so a lock it
# needs behind a write never makes that write wait past PostgreSQL's deadlock check (1 s) and fail.
LOCK_TIMEOUT_MS = 200
MIGRATE_TRIES = 30


def _migrate_online(url: str, target: str) -> Any:
    import time

    import sqlalchemy as sa
    from psycopg import errors

    from lair.registry.db.engine import migrate

    options = {"options": f"-c lock_timeout={LOCK_TIMEOUT_MS}", "connect_timeout": 5}
    engine = sa.create_engine(url, connect_args=options)
    for attempt in range(MIGRATE_TRIES):
        try:
            migrate(engine, target)
            return engine
        except sa.exc.OperationalError as exc:
            busy = isinstance(exc.orig, errors.LockNotAvailable | errors.DeadlockDetected)
            if not busy or attempt == MIGRATE_TRIES - 1:
                raise
            err(f"a table is busy: migration rolled back, trying again ({attempt + 2}/{MIGRATE_TRIES})")
            time.sleep(0.1 * (attempt + 1))
    raise AssertionError("unreachable")


def cmd_migrate(args: argparse.Namespace) -> int:
    from lair.registry.db.engine import (
        connect_url,
        current_revision,
        default_url,
        dialect_of,
        make_engine,
        migrate,
    )

    url = connect_url(args.db or default_url())
    if dialect_of(url) == "postgresql":
        engine = _migrate_online(url, args.to)
    else:
        engine = make_engine(url)
        migrate(engine, args.to)
    rev = current_revision(engine)
    engine.dispose()
    dump_json({"ok": True, "revision": rev}) if args.json else err(f"database at revision {rev or 'base'}")
    return 0


def cmd_seed(args: argparse.Namespace) -> int:
    from lair.registry.db.engine import make_engine, migrate
    from lair.registry.service.publish import seed_examples

    engine = make_engine(args.db)
    try:
        migrate(engine)
        with engine.begin() as conn:
            added = seed_examples(conn)
    finally:
        engine.dispose()
    dump_json({"ok": True, "added": added}) if args.json else err(
        f"seeded {len(added)} recipe(s): {', '.join(added) or '-'}"
    )
    return 0


def cmd_import_git(args: argparse.Namespace) -> int:
    import subprocess
    import tempfile
    from pathlib import Path

    from lair.errors import ConfigError
    from lair.interop.git_history import recipe_history
    from lair.registry.db.engine import make_engine, migrate
    from lair.registry.service.git_import import import_git

    local = Path(args.repo)
    with tempfile.TemporaryDirectory(prefix="lair-import-git-") as tmp:
        if local.is_dir():
            where, label = local, str(local.resolve())
        else:  # a URL: a full clone (the history is the point), into a folder removed after
            where, label = Path(tmp) / "repo", args.repo
            done = subprocess.run(
                ["git", "clone", "--quiet", "--", args.repo, str(where)], capture_output=True
            )
            if done.returncode:
                why = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["failed"]
                raise ConfigError(
                    f"git clone {args.repo}: {why[0]}", hint="give a folder or a URL git can clone"
                )
        history = recipe_history(where)  # read whole before the database is touched
        engine = make_engine(args.db)
        migrate(engine)
        try:
            with engine.begin() as conn:
                got = import_git(conn, history, label)
        finally:
            engine.dispose()
    if args.json:
        dump_json({"ok": True, "repo": got.repo, "written": got.written, "skipped": got.skipped,
                   "unchanged": got.unchanged})  # fmt: skip
        return 0
    for w in got.written:
        print(f"{w['slug']} revision {w['revision']}: {w['path']} @ {w['commit'][:12]}")
    for k in got.skipped:
        print(f"skipped {k['path']} @ {k['commit'][:12]}: {k['why']}")
    counts = f"{len(got.skipped)} file(s) skipped, {got.unchanged} unchanged"
    err(f"{len(got.written)} revision(s) from {got.repo}; {counts}")
    return 0


def cmd_user_add(args: argparse.Namespace) -> int:
    import getpass
    import os
    import sys

    from lair.registry.db.engine import make_engine, migrate
    from lair.registry.service.accounts import create_token, create_user

    # a password only from the environment or an interactive prompt, never from argv
    password = os.environ.get("LAIR_REGISTRY_PASSWORD") or (
        getpass.getpass("password (empty: token only): ") if sys.stdin.isatty() else ""
    )
    engine = make_engine(args.db)
    try:
        migrate(engine)
        with engine.begin() as conn:
            uid = create_user(conn, args.name, password or None, admin=args.admin)
            scopes = tuple(s.strip() for s in args.scopes.split(",") if s.strip())
            token = create_token(conn, uid, "cli", scopes)
    finally:
        engine.dispose()
    if args.json:
        dump_json({"ok": True, "name": args.name, "admin": args.admin, "token": token})
    else:
        print(token)
        err(f"created {args.name}{' (admin)' if args.admin else ''}; the token above is shown once")
    return 0


def cmd_export_static(args: argparse.Namespace) -> int:
    from lair.registry.static import export_static

    files = export_static(args.dir, args.db, base_url=args.base_url)
    dump_json({"ok": True, "files": len(files)}) if args.json else err(
        f"wrote {len(files)} files under {args.dir}"
    )
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from lair.registry.serve import serve

    return serve(
        args.db,
        host=args.host,
        port=args.port,
        workers=args.workers,
        public_url=args.public_url,
        seed=not args.no_seed,
        oauth=_oauth_settings(args),
        blobs=args.blobs,
        allowed_hosts=args.allowed_host,
        forwarded_allow_ips=args.forwarded_allow_ips,
    )
