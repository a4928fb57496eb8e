"""What runs is what was shown: ``lair reproduce`` runs their run's image only by a digest of the
recipe's own image repository, as the exact reference the plan runs and the acceptance binds; a
report's digest of another repository is never pulled, and nothing is re-tagged."""

from __future__ import annotations

from pathlib import Path

import pytest

from lair.cli._reproduce import pin_image
from lair.errors import ConfigError, TrustError
from lair.launch import Request, prepare
from lair.launch.trust_store import stamp_pulled
from lair.plan import Stage
from lair.recipe import load_recipe
from lair.recipe.digest import model_sha256
from lair.recipe.images import digest_of, pinned_reference, repository, same_repository

D = "sha256:" + "ab" * 32
RECIPE = """engine = "vllm"
runtime = "docker"
docker_image = "vllm/vllm-openai:v0.11.0"
model = "Qwen/Qwen3-0.6B"
name = "pinned image"
"""


def test_repositories_as_docker_reads_them() -> None:
    # Docker's reference grammar: docker.io and library/ are implied; a host needs a dot, colon or localhost
    assert repository("vllm/vllm-openai:v0.11.0") == "docker.io/vllm/vllm-openai"
    assert repository("nginx") == repository("docker.io/library/nginx:1.27") == "docker.io/library/nginx"
    assert repository("index.docker.io/vllm/vllm-openai@" + D) == "docker.io/vllm/vllm-openai"
    assert repository("localhost:5000/team/img:tag") == "localhost:5000/team/img"
    assert repository("ghcr.io/org/img@" + D) == "ghcr.io/org/img"
    assert not same_repository("vllm/vllm-openai:v0.11.0", "attacker/not-vllm@" + D)
    assert not same_repository("vllm/vllm-openai", "vllm/vllm-openai-evil")
    assert not same_repository("vllm/vllm-openai", "ghcr.io/vllm/vllm-openai")
    assert digest_of("x@sha256:" + "0" * 63) is None and digest_of("x@" + D) == D


def test_only_a_digest_of_the_recipes_own_repository_is_pinned(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text(RECIPE)
    recipe = load_recipe(path)
    forged = {"image": {"digests": ["attacker/not-vllm@" + D, "docker.io/vllm/vllm-openai@" + D]}}
    assert pin_image(recipe, forged) == "vllm/vllm-openai@" + D  # the second: the recipe's repository
    assert pin_image(recipe, {"image": {"digests": ["attacker/not-vllm@" + D]}}) is None
    assert pin_image(recipe, {"image": {"digests": ["vllm/vllm-openai@sha256:short"]}}) is None
    assert pinned_reference("vllm/vllm-openai:v0.11.0", "vllm/vllm-openai:v0.11.0") is None  # no digest


def test_the_plan_runs_the_pinned_reference_and_the_acceptance_binds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAIR_HOME", str(tmp_path / "home"))
    path = tmp_path / "r.toml"
    path.write_text(RECIPE)
    stamp_pulled(
        path, registry="https://r.example", slug="p", revision=1, sha256=model_sha256(load_recipe(path))
    )
    pinned = "vllm/vllm-openai@" + D
    # accepted as pulled (the tag): a pinned run asks again, showing the pinned image
    prepare(Request(recipe=str(path), accept=True, doctor=False), lease=False)
    with pytest.raises(TrustError) as exc:
        prepare(Request(recipe=str(path), image=pinned, doctor=False), lease=False)
    assert f"image {pinned}: its code runs with everything below" in exc.value.risks
    assert f"+ image: {pinned}" in exc.value.diff and "- image: vllm/vllm-openai:v0.11.0" in exc.value.diff
    prep = prepare(Request(recipe=str(path), image=pinned, accept=True, doctor=False), lease=False)
    assert prep.acceptance is not None and prep.acceptance.requests["image"] == [pinned]
    steps = [s for s in prep.plan.head.steps if s.stage in (Stage.PREPARE, Stage.START)]
    argvs = [s.argv for s in steps if s.argv]
    assert ["docker", "pull", pinned] in argvs
    assert any(a[0] == "docker" and a[1] == "run" and pinned in a for a in argvs)
    assert not any(a[:2] == ["docker", "tag"] for a in argvs)
    with pytest.raises(ConfigError, match="not of the recipe's image repository"):
        prepare(
            Request(recipe=str(path), image="attacker/not-vllm@" + D, accept=True, doctor=False), lease=False
        )
