"""Credentials, the HTTP calls, and report packing (see the package docstring)."""

from __future__ import annotations

import io
import json
import os
import tarfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lair.errors import Invalid, NotFound, RegistryError, Unauthorized, Unreachable, error_for

__all__ = ["DEFAULT_URL", "Client", "Credentials", "pack_report"]

DEFAULT_URL = "http://127.0.0.1:8780"  # `lair serve`'s default
_FILE = "registry.json"


def _config_file() -> Path:
    from lair import config

    return config.home() / _FILE


@dataclass
class Credentials:
    """Where the registry is and the API token to use (the token is never printed)."""

    url: str = DEFAULT_URL
    token: str | None = None

    @classmethod
    def load(cls) -> Credentials:
        stored: dict[str, Any] = {}
        path = _config_file()
        if path.is_file():
            try:
                stored = json.loads(path.read_text(encoding="utf-8"))
            except ValueError:
                stored = {}
        env = os.environ  # set (even empty: no token) wins over the stored login
        url = env.get("LAIR_REGISTRY") or stored.get("url") or DEFAULT_URL
        token = env["LAIR_TOKEN"] if "LAIR_TOKEN" in env else stored.get("token")
        return cls(str(url).rstrip("/"), token or None)

    def save(self) -> Path:
        """Write the login, readable by its owner only (created 0600, never wider)."""
        path = _config_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"url": self.url, "token": self.token}, f)
        os.chmod(path, 0o600)
        return path


def _error(status: int, body: bytes, url: str) -> RegistryError:
    try:
        err = json.loads(body)["error"]
        code, reasons = str(err.get("code", "error")), [str(r) for r in err.get("reasons") or []]
        message = str(err.get("message", ""))
        if reasons:
            message = f"the registry refused it (HTTP {status}, {code}):" + "".join(
                f"\n  - {r}" for r in reasons
            )
        return error_for(status, code, message, hint=str(err.get("hint", "")), reasons=reasons)
    except (ValueError, KeyError, TypeError, AttributeError):
        return error_for(status, "http", f"{url} answered HTTP {status}")


def _not_found_hint(slug: str, revision: int | None, message: str) -> str:
    if revision is not None and message.startswith("no revision"):
        return f"`lair pull {slug}` takes its latest revision; its page lists the others"
    return f"find the recipe's slug with `lair search {slug}`"


class Client:
    """Calls to one registry. ``opener`` is the seam for tests (a urllib opener)."""

    def __init__(
        self, creds: Credentials | None = None, *, timeout_s: float = 60.0, opener: Any = None
    ) -> None:
        self.creds = creds or Credentials.load()
        self.timeout_s = timeout_s
        self.opener = opener or urllib.request.build_opener()

    def _call(self, method: str, path: str, body: bytes | None = None, ctype: str = "") -> tuple[int, bytes]:
        url = self.creds.url + path
        req = urllib.request.Request(url, data=body, method=method)
        if self.creds.token:
            req.add_header("Authorization", f"Bearer {self.creds.token}")
        if ctype:
            req.add_header("Content-Type", ctype)
        try:
            with self.opener.open(req, timeout=self.timeout_s) as resp:
                return int(resp.status), bytes(resp.read())
        except urllib.error.HTTPError as exc:
            error = _error(exc.code, exc.read(), url)
            if isinstance(error, Unauthorized) and not self.creds.token:  # the server hints HTTP clients
                base = self.creds.url
                error.hint = f"log in with a token: lair login {base} (create one at {base}/account)"
            raise error from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise Unreachable(
                f"cannot reach the registry at {self.creds.url}: {reason}",
                hint="start one with `lair serve`, or set LAIR_REGISTRY / run `lair login URL`",
            ) from None  # fmt: skip

    def _json(self, method: str, path: str, body: bytes | None = None, ctype: str = "") -> dict[str, Any]:
        _, data = self._call(method, path, body, ctype)
        out: dict[str, Any] = json.loads(data)
        return out

    def health(self) -> dict[str, Any]:
        return self._json("GET", "/api/v1/health")

    def efficiencies(self) -> dict[str, Any]:
        """The registry's verified rows as efficiencies: ``{"ok", "rows": [...]}`` (lair.fit.predict)."""
        return self._json("GET", "/api/v1/efficiencies")

    def me(self) -> dict[str, Any]:
        """The account the token acts as: ``{"name", "admin", "scopes"}`` (401 for a bad token)."""
        return self._json("GET", "/api/v1/me")

    def search(self, query: str = "", **filters: Any) -> dict[str, Any]:
        params = [("q", query)] if query else []
        for k, v in filters.items():
            for item in v if isinstance(v, list | tuple) else [v]:
                if item not in (None, "", False):
                    params.append((k, "1" if item is True else str(item)))
        return self._json("GET", "/api/v1/recipes?" + urllib.parse.urlencode(params))

    def recipe(self, slug: str, revision: int | None = None) -> dict[str, Any]:
        q = urllib.parse.quote(slug)
        path = f"/api/v1/recipes/{q}/revisions/{revision}.json" if revision else f"/api/v1/recipes/{q}.json"
        try:
            return self._json("GET", path)
        except NotFound as exc:  # the server's hint names its HTTP API; a CLI user searches with lair
            exc.hint = _not_found_hint(slug, revision, exc.message)
            raise

    def fit(self, slug: str, gpu: str, gpus: int = 1, context: int | None = None) -> dict[str, Any]:
        """The recipe's memory fit on ``gpus`` x ``gpu`` (the page's fit widget, as JSON)."""
        query = {"gpu": gpu, "gpus": str(gpus)} | ({"context": str(context)} if context else {})
        path = f"/api/v1/recipes/{urllib.parse.quote(slug)}/fit?" + urllib.parse.urlencode(query)
        return self._json("GET", path)

    def recipe_toml(self, slug: str, revision: int | None = None) -> str:
        q = urllib.parse.quote(slug)
        path = f"/api/v1/recipes/{q}/revisions/{revision}.toml" if revision else f"/api/v1/recipes/{q}.toml"
        return self._call("GET", path)[1].decode("utf-8")

    def push(self, toml_text: str, notes: str, slug: str | None = None) -> dict[str, Any]:
        """A new recipe (no ``slug``) or a new revision of ``slug``."""
        body = json.dumps({"toml": toml_text, "notes": notes}).encode()
        path = f"/api/v1/recipes/{urllib.parse.quote(slug)}/revisions" if slug else "/api/v1/recipes"
        return self._json("POST", path, body, "application/json")

    def submit(self, archive: bytes, replicates: str | None = None) -> dict[str, Any]:
        """Upload a report archive; returns the server's 201 document (id, slug, revision, rows).
        ``replicates``: the row id (``SLUG@REV#ROW``) the report is a replication attempt of."""
        query = "?" + urllib.parse.urlencode({"replicates": replicates}) if replicates else ""
        return self._json("POST", "/api/v1/reports" + query, archive, "application/gzip")

    def report(self, report_id: str) -> dict[str, Any]:
        """A stored report's summary: revision, rig fingerprint, fingerprint, file names."""
        return self._json("GET", f"/api/v1/reports/{urllib.parse.quote(report_id)}")

    def report_file(self, report_id: str, name: str) -> bytes:
        """One raw file of a stored report (``results.json``, ``requests.jsonl``...)."""
        return self._call(
            "GET", f"/reports/{urllib.parse.quote(report_id)}/files/{urllib.parse.quote(name)}"
        )[1]


def pack_report(folder: str | Path) -> bytes:
    """A report folder as ``.tar.gz`` bytes: regular files only, under the folder's own name."""
    root = Path(folder)
    if not (root / "results.json").is_file():
        raise Invalid(f"{root} is not a run report folder (no results.json)")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path in sorted(root.rglob("*")):
            if path.is_file() and not path.is_symlink():
                tar.add(path, arcname=f"{root.name}/{path.relative_to(root).as_posix()}", recursive=False)
    return buf.getvalue()
