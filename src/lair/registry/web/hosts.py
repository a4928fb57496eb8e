"""The host names the registry answers for, and where its absolute URLs come from.

The ``Host`` header is whatever the client sent. It never goes into a link, llms.txt or the OpenAPI
``servers`` on its own word:

- with a public URL (``lair serve --public-url``), every absolute URL starts with it;
- else, with allowed hosts (``--allowed-host``, repeated, or ``LAIR_REGISTRY_ALLOWED_HOSTS``,
  comma-separated; ``lair serve`` bound to a loopback address allows ``localhost``, ``127.0.0.1``
  and ``::1`` too), a request's own scheme and ``Host`` are used, since only those names get through;
- else (no names known, e.g. bound to ``0.0.0.0`` with neither), links are relative (``/recipes/x``)
  and OpenAPI's server is ``/``.

When a public URL or allowed hosts are set, a request for any other host name, or a ``Host`` that is
more than ``host[:port]`` (userinfo, a path), is answered 400 ``bad_host`` before any route runs (the
name is not echoed): DNS rebinding and Host-header
poisoning get nothing. ``/api/v1/health`` answers every name (probes use the pod's address). A name
may start with ``*.`` to allow its subdomains; ``*`` alone allows every name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request

from lair.registry.web.responses import error_response

__all__ = [
    "HEALTH_PATH",
    "LOOPBACK",
    "allowed_hosts",
    "authority_host",
    "base_url",
    "host_allowed",
    "host_name",
    "refuse_host",
]

LOOPBACK = ("localhost", "127.0.0.1", "::1")
_AUTHORITY = re.compile(
    r"(?:\[(?P<ipv6>[0-9A-Fa-f:.]{2,45})\]|(?P<name>[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,252}[A-Za-z0-9_.])?))"
    r"(?::(?P<port>[0-9]{1,5}))?"
)
"""RFC 3986's authority as a Host header carries it (no userinfo): a DNS name or IPv4 address, or an
IPv6 address in brackets, and an optional port."""
HEALTH_PATH = "/api/v1/health"
"""Answered for every host name, without the data version or the cache: it reports the database."""


def host_name(value: str) -> str:
    """The name in a ``Host`` header or URL netloc: lower case, without the port or IPv6 brackets."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def allowed_hosts(public_url: str, names: Iterable[str]) -> frozenset[str]:
    """The names answered: ``names`` (a comma-separated spec each) and the public URL's host."""
    out = {host_name(n) for spec in names for n in spec.split(",") if n.strip()}
    if public_url:
        out.add(host_name(urlsplit(public_url).netloc))
    return frozenset(out)


def authority_host(value: str) -> str | None:
    """The host of a ``Host`` header that is an authority and nothing else: ``host[:port]`` or
    ``[IPv6][:port]``, lower case, without the port or brackets; None for anything more (userinfo:
    ``127.0.0.1:18080@evil.example`` would make every link point at evil.example; a path, spaces,
    two ports, a port over 65535)."""
    m = _AUTHORITY.fullmatch(value)
    if m is None or (m["port"] and int(m["port"]) > 65535):
        return None
    return (m["ipv6"] or m["name"]).lower()


def host_allowed(host: str, allowed: frozenset[str]) -> bool:
    """Whether the ``Host`` header ``host`` is a well-formed authority naming an allowed host (any
    well-formed one when ``allowed`` is empty or holds ``*``)."""
    if not allowed:
        return True
    name = authority_host(host)
    if name is None:
        return False
    if "*" in allowed or name in allowed:
        return True
    return any(a.startswith("*.") and name.endswith(a[1:]) for a in allowed)


def _host(scope: dict[str, Any]) -> str:
    return next((bytes(v).decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")


async def refuse_host(scope: dict[str, Any], receive: Any, send: Any, app: Any) -> bool:
    """Answer a request for a host name this registry does not serve with 400; True if it was one."""
    allowed: frozenset[str] = app.state.allowed_hosts
    if not allowed or scope["path"] == HEALTH_PATH or host_allowed(_host(scope), allowed):
        return False
    hint = {"hint": "use the registry's own address (its public URL)"}
    why = "this server does not answer for that host name"
    resp = error_response(scope["path"], 400, "bad_host", why, hint)
    await resp(scope, receive, send)
    return True


def base_url(request: Request) -> str:
    """The start of every absolute URL: the public URL, the request's own origin when its host was
    checked, else "" (relative links)."""
    public: str = request.app.state.public_url
    if public:
        return public
    if request.app.state.allowed_hosts:
        return f"{request.url.scheme}://{request.url.netloc}"
    return ""
