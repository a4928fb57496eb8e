"""The recipe as run of a pulled revision carries lair pull's ``[meta.source]`` stamp: it is the
revision still (its sha256 leaves the stamp out), while any other change to ``meta`` is not."""

from __future__ import annotations

from pathlib import Path

from lair.launch.trust_store import stamp_pulled
from lair.recipe import load_recipe
from lair.recipe.digest import model_sha256
from lair.registry.service.asrun import check_as_run
from lair.registry.service.canonical import canonical

TINY = Path(__file__).resolve().parents[3] / "examples" / "tiny-cpu" / "recipe.toml"


def test_a_pulled_copy_is_its_revision_and_other_meta_edits_are_not(tmp_path: Path) -> None:
    revision, _sha = canonical(load_recipe(TINY))
    pulled = tmp_path / "tiny-cpu.toml"
    pulled.write_text(revision, encoding="utf-8")
    sha = model_sha256(load_recipe(pulled))
    stamp_pulled(pulled, registry="http://127.0.0.1:1", slug="tiny-cpu", revision=1, sha256=sha)
    text = pulled.read_text(encoding="utf-8")
    assert "[meta.source]" in text and model_sha256(load_recipe(pulled)) == sha
    assert check_as_run(revision, text) == []
    edited = text.replace('tags = ["demo", "cpu"]', 'tags = ["demo"]')
    assert check_as_run(revision, edited) == [
        "recipe as run: meta.tags is ['demo']; the revision has ['demo', 'cpu']"
    ]
