"""``lair registry migrate|seed|export-static``: the static copy has the API's bytes at the same URLs."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from registry_paths import SEED_000
from starlette.testclient import TestClient

import lair.registry.db.migrations as mig
from lair.cli import main
from lair.registry.web.app import create_app

SLUG_000 = tomllib.loads(SEED_000.read_text())["meta"]["slug"]
HEAD = max(p.name[:4] for p in (Path(mig.__file__).parent / "versions").glob("[0-9][0-9][0-9][0-9]_*.py"))


def test_migrate_seed_and_export_static(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "reg.sqlite3")
    assert main(["registry", "migrate", "--db", db, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["revision"] == HEAD
    assert main(["registry", "seed", "--db", db, "--json"]) == 0
    added = json.loads(capsys.readouterr().out)["added"]
    assert SLUG_000 in added and "tiny-cpu" in added
    out = tmp_path / "site"
    assert (
        main(["registry", "export-static", str(out), "--db", db, "--base-url", "https://recipes.example"])
        == 0
    )
    capsys.readouterr()
    files = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    for want in (
        "index.html",
        "api/v1/recipes/index.json",
        "api/v1/openapi.json",
        "llms.txt",
        "static/style.css",
        f"recipes/{SLUG_000}/index.html",
        f"api/v1/recipes/{SLUG_000}.json",
        f"api/v1/recipes/{SLUG_000}.toml",
        f"api/v1/recipes/{SLUG_000}/revisions/1.json",
        f"recipes/{SLUG_000}/revisions/1/index.html",
    ):
        assert want in files, want
    with TestClient(
        create_app(db, public_url="https://recipes.example"), "https://recipes.example"
    ) as client:
        live = client.get(f"/api/v1/recipes/{SLUG_000}.json").content
    assert (out / f"api/v1/recipes/{SLUG_000}.json").read_bytes() == live
    page = (out / f"recipes/{SLUG_000}/index.html").read_text()
    assert f"curl -fsSL https://recipes.example/api/v1/recipes/{SLUG_000}.json" in page
    assert main(["check", str(out / f"api/v1/recipes/{SLUG_000}.toml")]) == 0
    capsys.readouterr()
    assert main(["registry", "migrate", "--db", db, "--to", "base", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["revision"] is None
