"""The registry client raises the typed error of each answer (httpx's per-status exception classes):
callers catch ``NotFound`` or ``Unauthorized``, never compare a status number. Checked against a
small HTTP server answering the registry's error envelope (the input of the thing under test), and
over the source: no ``RegistryError(status, code, ...)`` is built anywhere but lair/errors.py."""

from __future__ import annotations

import ast
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from lair.client.api import Client, Credentials
from lair.errors import (
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    RateLimited,
    RegistryError,
    TooLarge,
    Unauthorized,
    Unavailable,
    Unreachable,
    error_for,
)

SRC = Path(__file__).resolve().parents[2] / "src" / "lair"

ANSWERS = {  # path -> (status, code)
    "/api/v1/recipes/nosuch.json": (404, "not_found"),
    "/api/v1/me": (401, "unauthorized"),
    "/api/v1/health": (503, "unavailable"),
}


class _Envelope(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status, code = ANSWERS.get(self.path, (418, "teapot"))
        body = json.dumps({"error": {"code": code, "message": f"{code} at {self.path}"}}).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def registry() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Envelope)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    ("status", "kind"),
    [(422, Invalid), (401, Unauthorized), (403, Forbidden), (404, NotFound), (409, Conflict),
     (413, TooLarge), (429, RateLimited), (503, Unavailable), (0, Unreachable)],
)  # fmt: skip
def test_each_status_has_its_class_and_keeps_the_servers_code(status: int, kind: type[RegistryError]) -> None:
    got = error_for(status, "their-code", "a message", hint="a hint")
    assert type(got) is kind
    assert (got.status, got.code, got.message, got.hint) == (status, "their-code", "a message", "a hint")


def test_a_status_no_class_names_stays_a_plain_registry_error() -> None:
    got = error_for(418, "teapot", "short and stout")
    assert type(got) is RegistryError and (got.status, got.code, got.exit_code) == (418, "teapot", 1)


def test_the_client_raises_the_typed_error_of_each_answer(registry: str) -> None:
    client = Client(Credentials(url=registry, token=None))
    with pytest.raises(NotFound) as missing:
        client.recipe("nosuch")
    assert missing.value.hint == "find the recipe's slug with `lair search nosuch`"  # the CLI's hint
    with pytest.raises(Unauthorized) as anonymous:
        client.me()
    assert anonymous.value.hint.startswith(f"log in with a token: lair login {registry}")
    assert anonymous.value.exit_code == 5
    with pytest.raises(Unavailable):
        client.health()


def test_no_answer_is_unreachable_with_its_exit_code() -> None:
    with socket.socket() as s:  # a port nobody listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        with pytest.raises(Unreachable) as down:
            Client(Credentials(url=url, token=None), timeout_s=5).health()
    assert (down.value.status, down.value.code, down.value.exit_code) == (0, "unreachable", 6)


def test_no_untyped_registry_error_is_built_outside_lair_errors() -> None:
    untyped = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "errors.py" and path.parent == SRC:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "RegistryError"
            ):
                untyped.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert untyped == []
