"""``lair registry import-git`` on a real git repository made here (two authors, a lair recipe edited
twice, a sparkrun recipe, a file that is no recipe, a merge) into SQLite and PostgreSQL: each commit
that changed a recipe is one revision by its author; importing again adds nothing; a new commit adds
one revision; the page and the JSON document link the revision to its file and commit; a slug the
registry already has from elsewhere is never written to."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from registry_paths import ROOT, TINY
from starlette.testclient import TestClient

from lair.cli import main
from lair.registry.db.tables import GIT_SOURCES, USERS
from lair.registry.web.app import create_app

SPARKRUN = ROOT / "tests" / "data" / "interop" / "sparkrun" / "qwen3-sglang-solo.yaml"


def _git(repo: Path, *args: str, who: str = "Alice Smith") -> str:
    env = {"GIT_AUTHOR_NAME": who, "GIT_AUTHOR_EMAIL": f"{who.split()[0].lower()}@example.org"}
    env |= {"GIT_COMMITTER_NAME": who, "GIT_COMMITTER_EMAIL": "ci@example.org", "HOME": str(repo.parent)}
    env |= {"GIT_CONFIG_NOSYSTEM": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True
    )
    return done.stdout.strip()


def _commit(repo: Path, message: str, who: str, **files: str) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message, who=who)
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, list[str]]:
    """A repository of recipes and the commits that changed them, oldest first."""
    repo = tmp_path / "recipes"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    tiny = TINY.read_text().replace('slug = "tiny-cpu"', 'slug = "tiny-git"')
    c1 = _commit(repo, "add the tiny recipe", "Alice Smith", **{"tiny/recipe.toml": tiny})
    c2 = _commit(
        repo,
        "tune the summary",
        "Bob Jones",
        **{"tiny/recipe.toml": tiny.replace("in seconds.", "in seconds, on a small box.")},
    )
    c3 = _commit(repo, "a sparkrun recipe", "Bob Jones", **{"qwen3.yaml": SPARKRUN.read_text()})
    _commit(repo, "notes", "Alice Smith", **{"README.md": "# recipes\n", "broken.toml": "engine = [\n"})
    _git(repo, "checkout", "-q", "-b", "side")
    c5 = _commit(
        repo,
        "side branch edit",
        "Carol",
        **{"qwen3.yaml": SPARKRUN.read_text().replace("one node", "one node, side branch")},
    )
    _git(repo, "checkout", "-q", "main")
    _git(repo, "merge", "-q", "--no-ff", "-m", "merge side", "side", who="Alice Smith")
    return repo, [c1, c2, c3, c5]


def _import(capsys: pytest.CaptureFixture[str], repo: Path, db_url: str) -> dict[str, Any]:
    assert main(["registry", "import-git", str(repo), "--db", db_url, "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_a_repository_history_becomes_revisions_by_their_authors_once(
    capsys: pytest.CaptureFixture[str], repo: tuple[Path, list[str]], db_url: str
) -> None:
    where, (c1, c2, c3, c5) = repo
    got = _import(capsys, where, db_url)
    assert [(w["slug"], w["revision"], w["commit"]) for w in got["written"]] == [
        ("tiny-git", 1, c1),
        ("tiny-git", 2, c2),
        ("qwen3", 1, c3),
        ("qwen3", 2, c5),  # the side branch's commit, once (the merge commit itself is skipped)
    ]
    (skip,) = got["skipped"]  # README.md is no recipe file; broken.toml does not parse
    assert skip["path"] == "broken.toml" and skip["why"].startswith("broken.toml:2:1: invalid TOML"), skip
    again = _import(capsys, where, db_url)
    assert again["written"] == []  # the same history: nothing new
    assert again["skipped"] == got["skipped"]  # skips are not stored: a file still broken is told again
    c6 = _commit(where, "more context", "Bob Jones", **{"tiny/recipe.toml": (where / "tiny/recipe.toml")
                 .read_text().replace("small box.", "small box, again.")})  # fmt: skip
    third = _import(capsys, where, db_url)
    assert [(w["slug"], w["revision"], w["commit"]) for w in third["written"]] == [("tiny-git", 3, c6)]
    with TestClient(create_app(db_url)) as c:
        doc = c.get("/api/v1/recipes/tiny-git.json").json()
        assert doc["revision"] == 3 and doc["owner"] == "git-alice-smith"
        assert doc["source"]["commit"] == c6 and doc["source"]["path"] == "tiny/recipe.toml"
        assert doc["source"]["repo"] == str(where.resolve()) and doc["source"]["link"] is None
        rev2 = c.get("/api/v1/recipes/tiny-git/revisions/2.json").json()
        assert (rev2["author"], rev2["source"]["commit"]) == ("git-bob-jones", c2)
        page = c.get("/recipes/tiny-git").text
        assert f"at commit <code>{c6[:12]}</code>" in page and "<code>tiny/recipe.toml</code>" in page
        assert c.get("/api/v1/recipes/qwen3.json").json()["recipe"]["engine"] == "sglang"
    eng = sa.create_engine(db_url)
    with eng.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(GIT_SOURCES)).scalar_one() == 5
        emails = conn.execute(sa.select(USERS.c.name, USERS.c.link)).all()
    eng.dispose()
    assert not [r for r in emails if "example.org" in f"{r.name}{r.link}"]  # no e-mail stored


def test_a_slug_the_registry_has_from_elsewhere_is_never_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, db_url: str
) -> None:
    assert main(["registry", "seed", "--db", db_url, "--json"]) == 0  # tiny-cpu, published by lair
    capsys.readouterr()
    repo = tmp_path / "hostile"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    c1 = _commit(
        repo, "take over", "Mallory", **{"recipe.toml": TINY.read_text().replace("in seconds.", "pwned.")}
    )
    got = _import(capsys, repo, db_url)
    assert got["written"] == []
    assert got["skipped"] == [
        {
            "path": "recipe.toml",
            "commit": c1,
            "why": "the registry has a recipe 'tiny-cpu' that was not imported from this repository",
        }
    ]
    with TestClient(create_app(db_url)) as c:
        assert c.get("/api/v1/recipes/tiny-cpu.json").json()["revision"] == 1
