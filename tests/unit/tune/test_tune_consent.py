"""Tune's consent gate, on a recipe marked as pulled from a registry (its ``[meta.source]`` stamp, as
``lair pull`` writes it): nothing of it is planned for running before it is accepted; ``--accept``
stores the acceptance of the starting recipe's content only, never of a candidate's; a candidate
keeps the start's origin (a copy with other bytes never becomes the user's own); the candidates'
files are created under random names, so a planted link at a guessable name is never followed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lair.errors import TrustError
from lair.launch import Request, prepare
from lair.launch.trust_store import provenance, stamp_pulled, trust_dir
from lair.recipe import load_recipe
from lair.recipe.digest import model_sha256
from lair.tune import TuneOptions, parse_objective, parse_params
from lair.tune.search_loop import Search, gate

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "examples" / "tiny-cpu" / "recipe.toml"
ORIGIN = "https://registry.example/recipes/tiny-cpu@1"


@pytest.fixture
def pulled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LAIR_HOME", str(tmp_path / "home"))
    path = tmp_path / "pulled" / "tiny.toml"
    path.parent.mkdir()
    path.write_text(TINY.read_text())
    digest = model_sha256(load_recipe(path))
    origin = stamp_pulled(
        path, registry="https://registry.example", slug="tiny-cpu", revision=1, sha256=digest
    )
    assert origin == ORIGIN and provenance(path) == ORIGIN
    return path


def _opts(path: Path, accept: bool) -> TuneOptions:
    return TuneOptions(
        recipe=path,
        space=parse_params(["--parallel=1,2"]),
        objectives=[parse_objective("max decode_tok_s_per_stream@ctx=256,c=1")],
        accept=accept,
    )


def _stored() -> list[Path]:
    return sorted((trust_dir() / "by-source").rglob("*.json")) if trust_dir().exists() else []


def test_tune_refuses_an_unaccepted_recipe_before_anything(pulled: Path) -> None:
    with pytest.raises(TrustError) as exc:
        gate(_opts(pulled, accept=False))
    assert f"this recipe from {ORIGIN} is not trusted" in exc.value.message
    assert any(r.startswith("hook script make_tiny_model") for r in exc.value.risks)
    assert _stored() == []


def test_accept_stores_the_start_only_and_candidates_keep_its_origin(pulled: Path, tmp_path: Path) -> None:
    opts = _opts(pulled, accept=True)
    consent = gate(opts)
    assert (consent.trusted, consent.source) == (False, ORIGIN)
    first = _stored()
    assert len(first) == 1  # the start's content, as shown

    import optuna

    study = optuna.create_study(storage=None)
    s = Search(opts, study, tmp_path / "study", pulled.read_text(), consent)
    text = pulled.read_text().replace('"--parallel", "2"', '"--parallel", "1"')
    recipe, plan = s._plan(text, "t1")
    assert plan.run.trusted is False
    assert (
        "--parallel" in recipe.entrypoint
        and recipe.entrypoint[recipe.entrypoint.index("--parallel") + 1] == "1"
    )
    assert _stored() == first  # the candidate's acceptance lived in memory only
    assert list(pulled.parent.glob(".tiny.tune-*")) == []  # its file is gone

    # the same candidate's bytes as a file of their own, without the start's consent: refused
    copy = tmp_path / "candidate.toml"
    copy.write_text(text)
    with pytest.raises(TrustError):
        prepare(Request(recipe=str(copy), doctor=False), lease=False)


def test_candidate_files_never_follow_a_planted_link(pulled: Path, tmp_path: Path) -> None:
    target = tmp_path / "victim.txt"
    target.write_text("keep me")
    for tag in ("t1", "p0", "r1"):  # every name the old code used
        os.symlink(target, pulled.parent / f".tiny.tune-{tag}.toml")
    opts = _opts(pulled, accept=True)
    import optuna

    s = Search(opts, optuna.create_study(), tmp_path / "study", pulled.read_text(), gate(opts))
    s._plan(pulled.read_text(), "t1")
    path = s._tmp("t1", "x = 1\n")
    assert not path.is_symlink() and path.read_text() == "x = 1\n"
    assert target.read_text() == "keep me"
