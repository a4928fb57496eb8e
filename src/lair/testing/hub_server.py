"""A local server that answers the Hugging Face Hub's routes huggingface_hub uses to read a model, from
folders a test writes: the INPUT of the Hub-facts tests, with the real ``huggingface_hub`` as client
(``HF_ENDPOINT`` = :attr:`HubServer.url`).

    with serve_hub() as hub:
        hub.add_repo("Qwen/Qwen3-30B-A3B", folder)               # every file under folder, one commit
        hub.add_repo("meta-llama/Llama-3.1-8B", other, token="hf_x")   # gated: 401 without the token
        ...
        hub.sent                                                 # one Sent per response: bytes of body

Routes: ``GET /api/models/{repo}[/revision/{rev}]`` (model info: sha, siblings with sizes, gated), and
``HEAD|GET /{repo}/resolve/{rev}/{file}`` with ``X-Repo-Commit``, ``ETag`` / ``X-Linked-Etag``,
``X-Linked-Size``, ``Content-Length`` and single ``Range: bytes=A-B`` requests (206). A gated repo
answers 401 (no token) or 403 (another token) with ``X-Error-Code: GatedRepo``; an unknown repo 401
``RepoNotFound``; an unknown file 404 ``EntryNotFound``; an unknown revision 404 ``RevisionNotFound``.
A body is cut at :attr:`HubServer.max_body` bytes (a client that downloads a weight file fails fast).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

__all__ = ["HubRepo", "HubServer", "Sent", "serve_hub"]

_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


@dataclass
class HubRepo:
    repo_id: str
    folder: Path
    commit: str
    token: str | None = None  # set: a gated repo, readable with this token only

    def files(self) -> dict[str, Path]:
        paths = sorted(p for p in self.folder.rglob("*") if p.is_file())
        return {p.relative_to(self.folder).as_posix(): p for p in paths}


@dataclass(frozen=True)
class Sent:
    method: str
    path: str
    status: int
    body_bytes: int
    range: str | None


@dataclass
class HubServer:
    url: str = ""
    repos: dict[str, HubRepo] = field(default_factory=dict)
    sent: list[Sent] = field(default_factory=list)
    max_body: int = 8 << 20
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add_repo(self, repo_id: str, folder: Path, *, token: str | None = None) -> HubRepo:
        commit = hashlib.sha1(f"{repo_id}:{folder}".encode()).hexdigest()
        self.repos[repo_id] = HubRepo(repo_id, folder, commit, token)
        return self.repos[repo_id]

    def record(self, sent: Sent) -> None:
        with self._lock:
            self.sent.append(sent)

    def bytes_sent(self) -> int:
        return sum(s.body_bytes for s in self.sent)


def _etag(path: Path) -> str:
    st = path.stat()
    return hashlib.sha256(f"{path}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()


def _handler(hub: HubServer) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a: object) -> None:
            pass

        def do_GET(self) -> None:
            self._route()

        def do_HEAD(self) -> None:
            self._route()

        def _route(self) -> None:
            path = unquote(urlsplit(self.path).path)
            if m := re.match(r"^/api/models/([^/]+/[^/]+?)(?:/revision/(.+))?$", path):
                return self._info(m[1], m[2] or "main")
            if m := re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path):
                return self._resolve(m[1], m[2], m[3])
            self._send(404, {"X-Error-Code": "EntryNotFound"}, b'{"error": "no route"}')

        def _repo(self, repo_id: str, rev: str, *, files: bool) -> HubRepo | None:
            repo = hub.repos.get(repo_id)
            if repo is None:
                self._send(401, {"X-Error-Code": "RepoNotFound"}, b'{"error": "Repository not found"}')
                return None
            if rev not in ("main", repo.commit):
                self._send(404, {"X-Error-Code": "RevisionNotFound"}, b'{"error": "Invalid rev id"}')
                return None
            got = self.headers.get("Authorization", "")
            if files and repo.token and got != f"Bearer {repo.token}":
                status = 403 if got else 401
                body = b'{"error": "Access to model is restricted. You must have access to it."}'
                self._send(status, {"X-Error-Code": "GatedRepo"}, body)
                return None
            return repo

        def _info(self, repo_id: str, rev: str) -> None:
            repo = self._repo(repo_id, rev, files=False)
            if repo is None:
                return
            siblings = [
                {"rfilename": name, "size": p.stat().st_size, "blobId": _etag(p)[:40]}
                for name, p in repo.files().items()
            ]
            doc = {
                "id": repo_id,
                "modelId": repo_id,
                "sha": repo.commit,
                "private": False,
                "gated": "manual" if repo.token else False,
                "siblings": siblings,
            }
            self._send(200, {"Content-Type": "application/json"}, json.dumps(doc).encode())

        def _resolve(self, repo_id: str, rev: str, name: str) -> None:
            repo = self._repo(repo_id, rev, files=True)
            if repo is None:
                return
            path = repo.files().get(name)
            if path is None:
                self._send(404, {"X-Error-Code": "EntryNotFound"}, b'{"error": "Entry not found"}')
                return
            size, etag = path.stat().st_size, _etag(path)
            headers = {"X-Repo-Commit": repo.commit, "ETag": f'"{etag}"', "Accept-Ranges": "bytes"}
            headers |= {"X-Linked-Etag": f'"{etag}"', "X-Linked-Size": str(size)}
            start, end, status = 0, size - 1, 200
            rng = self.headers.get("Range")
            if rng and (m := _RANGE.match(rng.strip())):
                start, end, status = int(m[1]), min(int(m[2] or size - 1), size - 1), 206
                headers["Content-Range"] = f"bytes {start}-{end}/{size}"
            with path.open("rb") as f:
                f.seek(start)
                body = f.read(min(end - start + 1, hub.max_body))
            self._send(status, headers, body, length=end - start + 1)

        def _send(self, status: int, headers: dict[str, str], body: bytes, length: int | None = None) -> None:
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body) if length is None else length))
            self.end_headers()
            sent = 0 if self.command == "HEAD" else len(body)
            if sent:
                self.wfile.write(body)
            rng = self.headers.get("Range")
            hub.record(Sent(self.command, self.path, status, sent, rng))
            if length is not None and length != len(body) and self.command != "HEAD":
                self.close_connection = True  # cut at max_body: the client sees a short body

    return Handler


@contextlib.contextmanager
def serve_hub() -> Iterator[HubServer]:
    """A :class:`HubServer` on 127.0.0.1 and a free port, in a thread."""
    hub = HubServer()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    hub.url = f"http://127.0.0.1:{srv.server_address[1]}"
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield hub
    finally:
        srv.shutdown()
        srv.server_close()
        t.join()
