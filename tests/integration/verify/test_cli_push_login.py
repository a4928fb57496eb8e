"""``lair login`` and ``lair push`` through the real command against a real ``lair serve`` (SQLite):

- login checks the token with the registry (``GET /api/v1/me``), reads a piped token from stdin,
  reports the account and its scopes, and refuses a bad token (exit 5, nothing saved);
- the second push of a file made by ``lair new`` is a new revision of the pusher's recipe: the first
  push writes the slug back into the file (its comments kept), an unchanged file is no change, and a
  recipe of another account under that slug is refused without touching it;
- the account page's token form defaults to the publish scope.

What the registry holds is read with urllib from its own JSON API, not through lair's client.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from verify_helpers import lair

from lair.testing.registry import serve_process

pytestmark = [pytest.mark.integration]

TITLE_SLUG = "my-model-on-vllm-docker-1-node"  # `lair new`'s default title, slugified as the site does


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    tmp = tmp_path_factory.mktemp("push-login")
    db = f"sqlite:///{tmp / 'registry.sqlite3'}"
    with serve_process(db, log=tmp / "serve.log", seed=False) as base:
        yield base, db


def _token(db: str, name: str, scopes: str = "read,publish") -> str:
    """An account and a token for it, made the way an operator makes them."""
    res = lair("registry", "user", "add", name, "--scopes", scopes, "--db", db, "--json")
    assert res.returncode == 0, res.stderr
    return str(json.loads(res.stdout)["token"])


def _get(url: str, token: str | None = None) -> dict[str, object]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(req, timeout=10) as r:
        return dict(json.load(r))


def _login(home: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``lair login`` with its input piped (``echo TOKEN | lair login URL``) or from /dev/null."""
    import os

    env = {**os.environ, "LAIR_HOME": str(home)}
    env.pop("LAIR_TOKEN", None)
    env.pop("LAIR_REGISTRY", None)
    return subprocess.run(
        [sys.executable, "-m", "lair", "login", *args], input=stdin or "", capture_output=True, text=True,
        timeout=60, env=env,
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# login


def test_login_reads_a_piped_token_checks_it_and_reports_its_scopes(
    site: tuple[str, str], tmp_path: Path
) -> None:
    base, db = site
    token = _token(db, "piper")
    res = _login(tmp_path, base, stdin=token + "\n")
    assert res.returncode == 0, res.stderr
    me = _get(f"{base}/api/v1/me", token)  # the server's own answer for that token
    assert me == {"ok": True, "name": "piper", "admin": False, "scopes": ["read", "publish"]}
    stored = tmp_path / "registry.json"
    assert json.loads(stored.read_text()) == {"url": base, "token": token}
    assert stored.stat().st_mode & 0o777 == 0o600
    assert f"logged in to {base} as piper (scopes: read, publish); saved in {stored}" in res.stderr
    res = _login(tmp_path, base, "--json", stdin=token)
    doc = json.loads(res.stdout)
    assert (doc["user"], doc["scopes"], doc["token"]) == ("piper", ["read", "publish"], True)


def test_login_refuses_a_bad_token_and_saves_nothing(site: tuple[str, str], tmp_path: Path) -> None:
    base, db = site
    good = _token(db, "keeper")
    assert _login(tmp_path, base, "--token", good).returncode == 0
    stored = tmp_path / "registry.json"
    before = stored.read_bytes()
    for args, stdin in ((["--token", "bogus"], None), ([], "lair_not-a-real-token\n")):
        res = _login(tmp_path, base, *args, stdin=stdin)
        assert res.returncode == 5, res.stderr
        assert f"error: {base} refused the token: invalid or revoked token; nothing was saved" in res.stderr
        assert f"hint: create a token at {base}/account" in res.stderr and "logged in" not in res.stderr
        assert stored.read_bytes() == before  # the earlier login is still the stored one
    fresh = tmp_path / "fresh"
    assert _login(fresh, base, "--token", "bogus").returncode == 5 and not (fresh / "registry.json").exists()


def test_login_with_a_read_token_warns_that_it_cannot_push(site: tuple[str, str], tmp_path: Path) -> None:
    base, db = site
    res = _login(tmp_path, base, "--token", _token(db, "reader", "read"))
    assert res.returncode == 0, res.stderr
    assert f"as reader (scopes: read); saved in {tmp_path / 'registry.json'}" in res.stderr
    assert f"warning: this token cannot push or submit; create one with scope publish at {base}/account" in (
        res.stderr
    )


def test_login_without_a_token_says_so(site: tuple[str, str], tmp_path: Path) -> None:
    base, _ = site
    res = _login(tmp_path, base)  # stdin is empty: no token
    assert res.returncode == 0 and f"logged in to {base} without a token (read only)" in res.stderr
    assert json.loads((tmp_path / "registry.json").read_text())["token"] is None


# ---------------------------------------------------------------------------------------------
# push


def test_second_push_of_a_new_file_is_a_new_revision(site: tuple[str, str], tmp_path: Path) -> None:
    base, db = site
    env = {"LAIR_REGISTRY": base, "LAIR_TOKEN": _token(db, "alice"), "LAIR_HOME": str(tmp_path)}
    mine = tmp_path / "my.toml"
    assert lair("new", str(mine), env=env).returncode == 0
    scaffold = mine.read_text()

    first = lair("push", str(mine), "-y", "--json", env=env)
    assert first.returncode == 0, first.stderr
    doc = json.loads(first.stdout)
    assert (doc["slug"], doc["revision"], doc["slug_written"]) == (TITLE_SLUG, 1, True)
    assert "---" not in first.stderr  # a new recipe: no diff against nothing
    # the slug went into the file under [meta]; everything else, comments first, is as `lair new` wrote it
    assert mine.read_text() == scaffold.rstrip("\n") + f'\nslug = "{TITLE_SLUG}"\n'
    assert scaffold.startswith("# ") and mine.read_text().startswith(scaffold.splitlines()[0])

    again = lair("push", str(mine), "-y", env=env)
    assert again.returncode == 0, again.stderr
    assert f"no change against the latest revision of {TITLE_SLUG}" in again.stderr
    assert _get(f"{base}/api/v1/recipes/{TITLE_SLUG}.json")["revision"] == 1

    assert lair("set", str(mine), "port=9001", env=env).returncode == 0
    res = lair("push", str(mine), "-y", "--notes", "port 9001", env=env)
    assert res.returncode == 0, res.stderr
    assert "-port = 8000\n" in res.stderr and "+port = 9001\n" in res.stderr
    assert f"published {TITLE_SLUG} revision 2" in res.stderr
    latest = _get(f"{base}/api/v1/recipes/{TITLE_SLUG}.json")
    assert (latest["revision"], latest["owner"]) == (2, "alice")
    assert latest["recipe"]["port"] == 9001 and latest["recipe"]["meta"]["slug"] == TITLE_SLUG  # type: ignore[index]


def test_push_to_another_accounts_slug_is_refused(site: tuple[str, str], tmp_path: Path) -> None:
    base, db = site
    owner = {"LAIR_REGISTRY": base, "LAIR_TOKEN": _token(db, "carol"), "LAIR_HOME": str(tmp_path)}
    theirs = tmp_path / "theirs.toml"
    assert lair("new", str(theirs), "--title", "Carol's recipe", env=owner).returncode == 0
    assert lair("push", str(theirs), "-y", env=owner).returncode == 0
    assert lair("set", str(theirs), "port=9100", env=owner).returncode == 0
    before = theirs.read_text()

    other = owner | {"LAIR_TOKEN": _token(db, "dave")}
    res = lair("push", str(theirs), "-y", env=other)
    assert res.returncode == 4, res.stderr
    assert f"error: {base} has a recipe 'carol-s-recipe' by carol; you are dave" in res.stderr
    assert f"hint: fork it at {base}/recipes/carol-s-recipe" in res.stderr
    assert (
        _get(f"{base}/api/v1/recipes/carol-s-recipe.json")["revision"] == 1 and theirs.read_text() == before
    )


def test_push_without_a_slug_finds_the_pushers_recipe_by_its_title(
    site: tuple[str, str], tmp_path: Path
) -> None:
    """A file pushed before its slug was written back (or whose slug line was removed): its title's
    slug names the pusher's recipe, so the push is a revision of it, not a clash."""
    base, db = site
    env = {"LAIR_REGISTRY": base, "LAIR_TOKEN": _token(db, "erin"), "LAIR_HOME": str(tmp_path)}
    f = tmp_path / "e.toml"
    assert lair("new", str(f), "--title", "Erin tries", env=env).returncode == 0
    assert lair("push", str(f), "-y", env=env).returncode == 0
    f.write_text(f.read_text().replace('slug = "erin-tries"\n', "").replace("port = 8000", "port = 8100"))
    res = lair("push", str(f), "-y", "--json", env=env)
    assert res.returncode == 0, res.stderr
    assert "has no meta.slug; its title names your recipe erin-tries: a new revision of it" in res.stderr
    assert (
        json.loads(res.stdout)["revision"] == 2 == _get(f"{base}/api/v1/recipes/erin-tries.json")["revision"]
    )


# ---------------------------------------------------------------------------------------------
# the account page


def test_account_token_form_defaults_to_publish(site: tuple[str, str]) -> None:
    base, _ = site
    body = json.dumps({"name": "frank", "password": "correct horse battery"}).encode()
    req = urllib.request.Request(
        f"{base}/api/v1/users", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        cookie = r.headers["Set-Cookie"].split(";", 1)[0]
    with urllib.request.urlopen(urllib.request.Request(f"{base}/account", headers={"Cookie": cookie})) as r:
        page = r.read().decode()
    options = page[page.index('<select name="scope">') : page.index("</select>")]
    assert '<option value="read">read</option>' in options
    assert '<option value="publish" selected>publish</option>' in options


def test_push_without_a_token_says_how_to_log_in(site: tuple[str, str], tmp_path: Path) -> None:
    base, _ = site
    env = {"LAIR_REGISTRY": base, "LAIR_TOKEN": "", "LAIR_HOME": str(tmp_path)}
    f = tmp_path / "anon.toml"
    assert lair("new", str(f), "--title", "Nobody's", env=env).returncode == 0
    before = f.read_text()
    res = lair("push", str(f), "-y", env=env)
    assert res.returncode == 5 and "error: sign in first" in res.stderr, res.stderr
    assert f"hint: log in with a token: lair login {base} (create one at {base}/account)" in res.stderr
    assert f.read_text() == before  # no slug written: nothing was published
    with pytest.raises(urllib.error.HTTPError) as gone:
        _get(f"{base}/api/v1/recipes/nobody-s.json")
    gone.value.close()
    assert gone.value.code == 404
