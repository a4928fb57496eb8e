"""A folder served over HTTP on an ephemeral loopback port, in a thread (URL-trust tests, the pages of
a foreign site in the CSRF browser tests)."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

__all__ = ["serve_folder"]


@contextlib.contextmanager
def serve_folder(root: Path) -> Iterator[str]:
    """Serve ``root`` on 127.0.0.1 and a free port; yields the base URL (``http://127.0.0.1:PORT``)."""

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a: object, **kw: object) -> None:
            super().__init__(*a, directory=str(root), **kw)  # type: ignore[arg-type]

        def log_message(self, *a: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()
        t.join()
