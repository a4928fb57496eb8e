"""The registry client's hints, through the real ``lair`` command against a real ``lair serve``:

- ``lair push`` with no terminal to ask on says to pass ``-y`` (it said "not published", no more);
- ``lair pull`` of a recipe the registry does not hold points at ``lair search``, not at the HTTP API.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from verify_helpers import TINY, lair

from lair.testing.registry import serve_process

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    tmp = tmp_path_factory.mktemp("truth-registry")
    db = f"sqlite:///{tmp / 'registry.sqlite3'}"
    with serve_process(db, log=tmp / "serve.log", seed=False) as base:
        yield base, db


def _env(site: tuple[str, str], name: str) -> dict[str, str]:
    res = lair("registry", "user", "add", name, "--db", site[1], "--json")
    assert res.returncode == 0, res.stderr
    return {"LAIR_REGISTRY": site[0], "LAIR_TOKEN": str(json.loads(res.stdout)["token"])}


def test_push_without_a_terminal_says_to_pass_y(site: tuple[str, str], tmp_path: Path) -> None:
    env = _env(site, "pusher")
    mine = tmp_path / "recipe.toml"
    mine.write_text(TINY.read_text().replace('slug = "tiny-cpu"', 'slug = "tiny-truth"'))
    refused = lair("push", str(mine), env=env)  # stdin is /dev/null: nobody to ask
    assert refused.returncode == 1
    assert "publish a new recipe, tiny-truth: not published, there is no terminal to ask on" in refused.stderr
    assert refused.stderr.rstrip().endswith("hint: pass -y to publish without asking")
    assert "Traceback" not in refused.stderr
    with pytest.raises(urllib.error.HTTPError) as nothing:  # nothing was published
        urllib.request.urlopen(f"{site[0]}/api/v1/recipes/tiny-truth.json", timeout=10)
    assert nothing.value.code == 404
    done = lair("push", str(mine), "-y", "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["slug"] == "tiny-truth"


def test_pull_of_an_unknown_recipe_points_at_lair_search(site: tuple[str, str], tmp_path: Path) -> None:
    env = {"LAIR_REGISTRY": site[0]}
    res = lair("pull", "nosuch", "-o", str(tmp_path / "r.toml"), env=env)
    assert res.returncode != 0 and not (tmp_path / "r.toml").exists()
    assert "error: no recipe 'nosuch'" in res.stderr
    assert res.stderr.rstrip().endswith("hint: find the recipe's slug with `lair search nosuch`")
    assert "/api/v1" not in res.stderr
