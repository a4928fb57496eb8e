"""``lair mcp``: the MCP server for agents (stdio, or streamable HTTP with ``--http``)."""

from __future__ import annotations

import argparse

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "mcp",
        help="serve the registry to agents over the Model Context Protocol (read-only tools: search, "
        "show, fit, plan, certificate, compare)",
        description="An MCP server over a registry (LAIR_REGISTRY, `lair login`, or --registry). Its "
        "tools only read: nothing launches, and an untrusted recipe's plan says what it asks for and "
        "how a person accepts it. stdio by default (an agent starts `lair mcp`); --http serves the "
        "streamable HTTP transport at http://HOST:PORT/mcp.",
    )
    p.add_argument("--registry", metavar="URL", help="the registry (default: LAIR_REGISTRY or the login)")
    p.add_argument("--http", action="store_true", help="streamable HTTP instead of stdio")
    p.add_argument("--host", default="127.0.0.1", help="HTTP address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8790, help="HTTP port (default 8790)")
    p.set_defaults(handler=cmd_mcp)


def cmd_mcp(args: argparse.Namespace) -> int:
    # in-function: the mcp SDK is the `mcp` extra, and `lair --help` must not pay for it
    from lair.client.api import Client, Credentials
    from lair.mcp_server import build_server

    creds = Credentials.load()
    if args.registry:
        creds.url = args.registry.rstrip("/")
    server = build_server(Client(creds))
    if args.http:
        server.run("streamable-http", host=args.host, port=args.port)
    else:
        server.run("stdio")
    return 0
