"""The registry client's hints, through the real ``lair`` command against a real ``lair serve``:

- ``lair push`` with no terminal to ask on says to pass ``-y`` (it said "not published", no more);
- ``lair pull`` of a recipe the registry does not hold points at ``lair search``, not at the HTTP API;
- ``lair show`` gives the driver floor the recipe's page gives (one function computes it);
- the page's GPU list names each GPU's memory once.
"""

from __future__ import annotations

import html
import json
import re
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from verify_helpers import ROOT, TINY, lair

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
    nothing.value.close()
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


ENGRAM = ROOT / "examples" / "dsv41-1017-engram-ssd" / "recipe.toml"


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("truth-seeded")
    with serve_process(f"sqlite:///{tmp / 'registry.sqlite3'}", log=tmp / "serve.log") as base:
        yield base


def test_show_and_the_site_give_one_driver_floor(seeded: str) -> None:
    """The recipe states CUDA >= 13 (and an out-of-date "unknown" floor); NVIDIA's release notes give
    CUDA 13.0 GA's Linux driver floor as 580.65.06. lair show said "unknown" where the page said it."""
    slug = tomllib.loads(ENGRAM.read_text())["meta"]["slug"]
    with urllib.request.urlopen(f"{seeded}/api/v1/recipes/{slug}.json", timeout=30) as r:
        site = json.loads(r.read())["driver_floor"]["text"]
    assert site.startswith(">= 580.65.06 ")
    shown = lair("show", str(ENGRAM))
    assert shown.returncode == 0, shown.stderr
    (line,) = [ln.strip() for ln in shown.stdout.splitlines() if ln.strip().startswith("driver_floor:")]
    assert line == f"driver_floor: {site}"


def test_the_fit_widget_names_each_gpu_memory_once(seeded: str) -> None:
    """Apple's Mac Studio specifications: M3 Ultra up to 512 GB, M4 Max 128 GB; the page read
    'Apple M3 Ultra (512 GB) (512 GB)'."""
    with urllib.request.urlopen(f"{seeded}/recipes/tiny-cpu", timeout=30) as r:
        page = r.read().decode()
    labels = [html.unescape(o) for o in re.findall(r"<option [^>]*>([^<]*)</option>", page)]
    assert "Apple M3 Ultra (512 GB)" in labels and "Apple M4 Max (128 GB)" in labels
    assert not [x for x in labels if len(re.findall(r"\(\d+ GB\)", x)) > 1]
