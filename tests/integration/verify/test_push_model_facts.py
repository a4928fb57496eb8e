"""``lair push`` fills ``[meta.model_facts]`` from what ``lair fit`` reads, through the real command
against a real ``lair serve`` (SQLite, no seeded examples): a copy of the seed-000 example without its
facts, beside its bundled ``fit/config.json`` and ``fit/layout.toml``, is published with the facts and
the placement, the file gets the same tables (its comments kept), a second push is no change, and the
site's fit widget and % of roofline use them. Expected values: the shapes in ``fit/config.json``
itself, and ``lair fit``'s own output for the example on 2x RTX PRO 6000 (FITS-WITH-OFFLOAD, decode
163.0 tok/s = 18.6% of 875.5)."""

from __future__ import annotations

import json
import re
import shutil
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from verify_helpers import lair

from lair.testing.registry import serve_process

pytestmark = [pytest.mark.integration]

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "dsv41-1017-engram-ssd"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    tmp = tmp_path_factory.mktemp("push-facts")
    db = f"sqlite:///{tmp / 'registry.sqlite3'}"
    with serve_process(db, log=tmp / "serve.log", seed=False) as base:
        yield base, db


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return str(r.read().decode())


def test_push_fills_the_model_facts_from_the_bundled_config(site: tuple[str, str], tmp_path: Path) -> None:
    base, db = site
    made = lair("registry", "user", "add", "yash", "--scopes", "read,publish", "--db", db, "--json")
    env = {"LAIR_REGISTRY": base, "LAIR_TOKEN": json.loads(made.stdout)["token"], "LAIR_HOME": str(tmp_path)}
    folder = tmp_path / "recipe"
    shutil.copytree(EXAMPLE, folder)
    mine = folder / "recipe.toml"
    text = mine.read_text()
    bare = text[: text.index("\n# Model facts for lair fit")] + "\n"  # the example as it was before
    mine.write_text(bare)
    assert "model_facts" not in tomllib.loads(bare)["meta"]

    res = lair("push", str(mine), "-y", "--json", env=env)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["model_facts_written"] is True and doc["revision"] == 1
    written = mine.read_text()
    assert written.startswith(bare.rstrip("\n"))  # comments and layout kept, the tables added
    facts = tomllib.loads(written)["meta"]["model_facts"]
    config = json.loads((folder / "fit" / "config.json").read_text())
    assert (facts["n_layers"], facts["hidden_size"], facts["n_heads"], facts["vocab_size"]) == (
        config["num_hidden_layers"], config["hidden_size"], config["num_attention_heads"],
        config["vocab_size"],
    )  # fmt: skip
    assert (facts["n_experts"], facts["experts_per_token"], facts["kv_lora_rank"]) == (
        config["n_routed_experts"], config["num_experts_per_tok"], config["kv_lora_rank"],
    )  # fmt: skip
    layout = tomllib.loads((folder / "fit" / "layout.toml").read_text())
    placed = tomllib.loads(written)["meta"]["fit_layout"]
    assert {k: placed[k] for k in ("kv_cache_dtype", "spec_tokens", "expert_cache_slots")} == {
        k: layout[k] for k in ("kv_cache_dtype", "spec_tokens", "expert_cache_slots")
    }
    slug = doc["slug"]
    stored = json.loads(_get(f"{base}/api/v1/recipes/{slug}.json"))["recipe"]["meta"]
    assert stored["model_facts"] == facts and stored["fit_layout"] == placed

    again = lair("push", str(mine), "-y", env=env)
    assert again.returncode == 0 and f"no change against the latest revision of {slug}" in again.stderr

    fit = json.loads(_get(f"{base}/api/v1/recipes/{slug}/fit?gpu=rtx-pro-6000&gpus=2"))
    assert fit["verdict"] == "fits-with-offload"
    page = _get(f"{base}/recipes/{slug}")
    first = re.search(r'<tr class="[^"]*" data-provenance="reported">(.*?)</tr>', page, re.S)
    assert first and "decode 18.6%" in first.group(1)
