"""``lair serve``: migrate, seed an empty database, then run granian with N workers.

Each worker builds its own app from the environment (``LAIR_REGISTRY_DB``, ``LAIR_REGISTRY_PUBLIC_URL``,
``LAIR_REGISTRY_ALLOWED_HOSTS``, ``LAIR_REGISTRY_BLOBS``, the sign-in providers'
``LAIR_REGISTRY_GITHUB_*`` / ``LAIR_REGISTRY_HUGGINGFACE_*``): processes share nothing but the
database, so any number of them, on any number of machines over one PostgreSQL, serve the same data.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import sqlalchemy as sa

from lair.registry.db.engine import connect_url, default_url, make_engine, migrate
from lair.registry.settings import Settings

__all__ = ["configure_oauth", "host_names", "prepare", "serve"]


def err(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def prepare(db: str | None, *, seed: bool = True) -> tuple[str, list[str]]:
    """Upgrade the schema; seed the bundled examples when there is no recipe yet; render the stored
    documents again when an older release's writes left them stale, those of recipes that have none,
    and every recipe's when another release's templates rendered them (``stored.restyle``)."""
    from lair.registry.db.tables import RECIPES
    from lair.registry.service.publish import seed_examples
    from lair.registry.service.stored import documents_stale, refresh_missing, refresh_stale, restyle

    url = connect_url(db or default_url())
    engine = make_engine(url)
    migrate(engine)
    added: list[str] = []
    with engine.begin() as conn:
        if seed and conn.execute(sa.select(sa.func.count()).select_from(RECIPES)).scalar_one() == 0:
            added = seed_examples(conn)
    with engine.connect() as conn:
        stale = documents_stale(conn)
    if stale:  # an older release wrote without rendering: every recipe once (the app retries)
        refresh_stale(engine)
    with engine.begin() as conn:  # recipes stored before migration 0009 get their documents once
        refresh_missing(conn)
    restyle(engine)  # rendered by another release's templates: every recipe once, then stamped
    engine.dispose()
    return url, added


def configure_oauth(settings: dict[str, str]) -> list[str]:
    """Put sign-in provider settings (``LAIR_REGISTRY_<P>_...``, from flags) into the environment the
    workers read, and check the result; the names of the providers that are on."""
    from lair.registry.oauth import load_providers

    os.environ.update(settings)
    return list(load_providers(os.environ))


def _check_blobs(spec: str | None, url: str) -> None:
    """Refuse a blob store URL no store answers before any worker starts (RegistryError 422; an
    object store that cannot be reached: 503)."""
    from lair.registry.service.blobs import blob_store

    engine = make_engine(url)
    try:
        store = blob_store(spec, db_url=url, engine=engine)
        check = getattr(store, "check", None)  # a store that can tell (s3: the bucket answers)
        if callable(check):
            check()
    finally:
        engine.dispose()


def _is_loopback(host: str) -> bool:
    import ipaddress

    try:
        return host == "localhost" or ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_names(host: str, allowed: Sequence[str]) -> list[str]:
    """The host names the workers answer for (``LAIR_REGISTRY_ALLOWED_HOSTS``): ``allowed`` (and
    ``LAIR_REGISTRY_ALLOWED_HOSTS`` already set), the loopback names when bound to a loopback
    address; the public URL's host is added by each app. None given: every name, with relative links
    (see :mod:`lair.registry.web.hosts`)."""
    from lair.registry.web.hosts import LOOPBACK

    names = [
        n.strip()
        for spec in [os.environ.get("LAIR_REGISTRY_ALLOWED_HOSTS", ""), *allowed]
        for n in spec.split(",")
    ]
    names = [n for n in names if n]
    if _is_loopback(host):
        names += [n for n in LOOPBACK if n not in names]
    return names


def serve(
    db: str | None,
    *,
    host: str,
    port: int,
    workers: int,
    public_url: str | None,
    seed: bool = True,
    oauth: dict[str, str] | None = None,
    blobs: str | None = None,
    allowed_hosts: Sequence[str] = (),
    forwarded_allow_ips: str | None = None,
) -> int:
    from granian import Granian
    from granian.constants import Interfaces

    from lair.errors import Invalid

    providers = configure_oauth(oauth or {})
    names = host_names(host, allowed_hosts)
    if providers and not (public_url or os.environ.get("LAIR_REGISTRY_PUBLIC_URL") or names):
        raise Invalid(
            "sign-in providers need the registry's own address for their callback URL",
            hint="give --public-url URL (or --allowed-host NAME)",
        )
    url, added = prepare(db, seed=seed)
    _check_blobs(blobs, url)
    if added:
        err(f"seeded {len(added)} example recipe(s): {', '.join(added)}")
    os.environ["LAIR_REGISTRY_DB"] = url
    if public_url:
        os.environ["LAIR_REGISTRY_PUBLIC_URL"] = public_url
    if blobs:
        os.environ["LAIR_REGISTRY_BLOBS"] = blobs
    if names:
        os.environ["LAIR_REGISTRY_ALLOWED_HOSTS"] = ",".join(names)
    if forwarded_allow_ips is not None:
        os.environ["LAIR_REGISTRY_FORWARDED_ALLOW_IPS"] = forwarded_allow_ips
    Settings.from_env()  # a bad setting stops here, not in every worker
    err(
        f"serving {url.split('@')[-1]} on http://{host}:{port} ({workers} worker{'s' if workers > 1 else ''})"
        + (f"; sign-in with {', '.join(providers)}" if providers else "")
    )
    server = Granian(
        "lair.registry.web.app:factory",
        address=host,
        port=port,
        interface=Interfaces.ASGI,
        workers=workers,
        factory=True,
        log_access=False,
        backlog=2048,
    )
    server.serve()
    return 0
