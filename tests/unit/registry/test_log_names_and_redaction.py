"""A report's logs, through the registry in process (SQLite and PostgreSQL): every secret shape of
:data:`lair.testing.fake_secrets.SHAPES` is redacted in the log served (``--api-key VALUE`` was served
as uploaded), also from a log stored before it was redacted; a published note holding any of them
but the log-only ones is refused (a Google ``AIza`` key was published); a log's name over the bound
is a 422 naming it (300 characters was a 500), and a non-ASCII name is stored and served (it was
a 404)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import sqlalchemy as sa
from upload_site import Site, site  # noqa: F401  (the fixture)

from lair.registry.service.blobs import report_key
from lair.registry.web.auth import reset_limits
from lair.testing.fake_secrets import SHAPES

ROOT = Path(__file__).resolve().parents[3]
LLAMA = ROOT / "tests" / "data" / "registry" / "llama31-8b.toml"
LLAMA_SLUG = tomllib.loads(LLAMA.read_text())["meta"]["slug"]
LOG = ("\n".join(s.line for s in SHAPES.values()) + "\n").encode()


def _uploaded(site: Site, logs: dict[str, bytes]) -> str:  # noqa: F811
    files = site.report() | {f"logs/{name}": data for name, data in logs.items()}
    r = site.upload(files)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def test_a_served_log_holds_no_secret_of_any_shape(site: Site) -> None:  # noqa: F811
    rid = _uploaded(site, {"server.log": LOG})
    served = site.client.get(f"/reports/{rid}/files/logs/server.log")
    assert served.status_code == 200
    assert [n for n, s in SHAPES.items() if s.secret in served.text] == []
    assert served.text.count("[REDACTED:") >= len(SHAPES)


def test_a_log_stored_unredacted_is_redacted_when_served(site: Site) -> None:  # noqa: F811
    rid = _uploaded(site, {"server.log": b"starting\n"})
    site.client.app.app.state.blobs.put(
        report_key(rid, "logs/server.log"), LOG
    )  # as a registry before this one stored it
    served = site.client.get(f"/reports/{rid}/files/logs/server.log").text
    assert [n for n, s in SHAPES.items() if s.secret in served] == []


def test_a_note_holding_a_published_shape_is_refused(site: Site) -> None:  # noqa: F811
    toml = LLAMA.read_text()
    for name, shape in SHAPES.items():
        if not shape.published:
            continue
        reset_limits()
        r = site.client.post("/api/v1/recipes", json={"toml": toml, "notes": shape.line})
        assert r.status_code == 422 and r.json()["error"]["code"] == "secret", (name, r.text)
        assert shape.secret not in r.text, name
    assert site.client.get(f"/api/v1/recipes/{LLAMA_SLUG}.json").status_code == 404  # none published


def test_a_log_name_over_the_bound_is_refused_by_its_path(site: Site) -> None:  # noqa: F811
    name = "a" * 300 + ".log"
    r = site.upload(site.report() | {f"logs/{name}": b"x\n"})
    assert r.status_code == 422, r.text
    reasons = r.json()["error"]["reasons"]
    assert reasons == [f"logs/{name[:55]}...: a log's name of 304 bytes (UTF-8); the limit is 80"]
    with site.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM reports")).scalar() == 0


def test_a_non_ascii_log_name_is_stored_and_served(site: Site) -> None:  # noqa: F811
    name = "moteur-\u00e9t\u00e9-\u63a8\u7406.log"
    rid = _uploaded(site, {name: "r\u00e9sum\u00e9\n".encode()})
    listed = site.client.get(f"/api/v1/reports/{rid}").json()["files"]
    assert f"logs/{name}" in listed
    served = site.client.get(f"/reports/{rid}/files/logs/{name}")
    assert served.status_code == 200 and served.content == "r\u00e9sum\u00e9\n".encode()
