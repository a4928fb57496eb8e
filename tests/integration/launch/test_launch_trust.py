"""Trust: a recipe fetched from a URL is untrusted until its user accepts what it asks for."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from launch_helpers import lair

from lair.testing.folder_server import serve_folder

pytestmark = [pytest.mark.integration]

RISKY = """
engine = "custom"
docker_image = "img:1"
entrypoint = ["serve"]
before_serve = ["echo from-the-internet"]
[[extra_mounts]]
host = "/var/run/docker.sock"
container = "/var/run/docker.sock"
"""


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    (tmp_path / "recipe.toml").write_text(RISKY)

    with serve_folder(tmp_path) as url:
        yield f"{url}/recipe.toml"


def test_url_recipe_needs_acceptance_of_its_hooks_and_mounts(served: str, lair_home: Path) -> None:
    res = lair("plan", served, "--json")
    assert res.returncode == 1
    err = json.loads(res.stdout)["error"]
    assert err["code"] == "trust"
    assert (
        "hook sh -c echo from-the-internet" in err["message"]
        and "mount /var/run/docker.sock" in err["message"]
    )
    ok = lair("plan", served, "--accept", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["run"]["trusted"] is False
    assert "before_serve: sh -c echo from-the-internet" in ok.stderr
    accepted = [json.loads(p.read_text()) for p in (lair_home / "state" / "trust").glob("by-source/*/*.json")]
    assert [a["source"] for a in accepted].count(served) == 1
    assert lair("plan", served).returncode == 0  # remembered
