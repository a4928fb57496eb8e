"""Trust against a corpus of hostile recipes (tests/data/hostile/, one escape each, its expected
risk line in a ``# risk:`` comment), served by a real HTTP server: each is refused when planned from
its URL without acceptance, with its risk in the prompt; accepted, a changed recipe asks again and
shows what changed; a file marked as pulled stays untrusted, in place and copied."""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from launch_helpers import LAIR

from lair.cli import main
from lair.testing.folder_server import serve_folder

pytestmark = [pytest.mark.integration]

CORPUS = Path(__file__).resolve().parents[2] / "data" / "hostile"
CASES = sorted(CORPUS.glob("*.toml"))


def _risk(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# risk: "), path
    return first.removeprefix("# risk: ")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """A directory served over HTTP on an ephemeral port: (folder, base URL)."""
    root = tmp_path_factory.mktemp("site")
    for case in CASES:
        shutil.copy(case, root / case.name)

    with serve_folder(root) as url:
        yield root, url


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, object], str]:
    rc = main(["plan", *args, "--json"])
    cap = capsys.readouterr()
    return rc, json.loads(cap.out), cap.err


def test_corpus_has_one_escape_per_file() -> None:
    assert len(CASES) >= 25
    risks = [_risk(c) for c in CASES]
    assert len(set(risks)) == len(risks)


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_each_hostile_recipe_is_refused_from_a_url_naming_its_risk(
    case: Path, site: tuple[Path, str], lair_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, doc, _ = _plan(capsys, f"{site[1]}/{case.name}")
    assert rc == 1
    error = doc["error"]
    assert isinstance(error, dict) and error["code"] == "trust"
    risk = _risk(case)
    assert any(line.startswith(risk) for line in error["risks"]), (risk, error["risks"])
    assert risk in error["message"]  # the text the prompt shows
    rc, doc, err = _plan(capsys, f"{site[1]}/{case.name}", "--accept")
    assert rc == 0, err
    assert doc["run"]["trusted"] is False  # type: ignore[index]


def test_a_changed_recipe_asks_again_and_shows_the_diff(
    site: tuple[Path, str], lair_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, base = site
    text = (CORPUS / "04_mount_var_run.toml").read_text().replace("/var/run", "/srv/models")
    text = text.replace('"/m"', '"/changing"')  # requests of its own (acceptances are by content)
    (root / "changing.toml").write_text(text)
    url = f"{base}/changing.toml"
    assert _plan(capsys, url, "--accept")[0] == 0
    assert _plan(capsys, url)[0] == 0  # the same requests: accepted already
    (root / "changing.toml").write_text(text.replace("/srv/models", "/var/run/docker.sock"))
    rc, doc, _ = _plan(capsys, url)
    error = doc["error"]
    assert rc == 1 and isinstance(error, dict)
    assert error["diff"] == [
        "- mounts: /srv/models:/changing:ro",
        "+ mounts: /var/run/docker.sock:/changing:ro",
    ]
    assert "changed since you accepted it on " in error["message"]
    assert "+ mounts: /var/run/docker.sock:/changing:ro" in error["message"]
    assert _plan(capsys, url, "--accept")[0] == 0


def test_the_prompt_on_a_terminal_shows_the_risks_and_accepts_on_yes(
    site: tuple[Path, str], lair_home: Path
) -> None:
    root, base = site
    (root / "prompted.toml").write_text(
        (CORPUS / "21_cap_add.toml").read_text().replace("SYS_ADMIN", "NET_ADMIN")
    )
    pid, fd = pty.fork()
    if pid == 0:  # the child: lair plan on a terminal
        os.execvpe(LAIR[0], [*LAIR, "plan", f"{base}/prompted.toml"], os.environ)
    out = b""
    deadline = time.monotonic() + 60
    while b"[y/N]" not in out and time.monotonic() < deadline:
        if select.select([fd], [], [], 1)[0]:
            out += os.read(fd, 4096)
    os.write(fd, b"y\n")
    while time.monotonic() < deadline:
        try:
            if select.select([fd], [], [], 1)[0]:
                chunk = os.read(fd, 4096)
                if not chunk:
                    break
                out += chunk
        except OSError:  # the child closed the terminal
            break
    _, status = os.waitpid(pid, 0)
    text = out.decode(errors="replace")
    assert "cap-add NET_ADMIN (a kernel capability beyond the default set)" in text
    assert "image lair-test/plain:1: its code runs with everything below" in text
    assert os.waitstatus_to_exitcode(status) == 0, text
    assert "untrusted recipe (accepted)" in text  # the plan was printed after "y"


def test_a_file_marked_as_pulled_stays_untrusted_in_place_and_copied(
    tmp_path: Path, lair_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lair.launch.trust_store import mark_untrusted

    pulled = tmp_path / "pulled" / "recipe.toml"
    pulled.parent.mkdir()
    pulled.write_text((CORPUS / "20_privileged.toml").read_text() + 'cap_add = ["SYS_PTRACE"]\n')
    assert _plan(capsys, str(pulled))[0] == 0  # the user's own file: trusted
    mark_untrusted(pulled, "registry:lair.example/r/42")
    rc, doc, _ = _plan(capsys, str(pulled))
    assert rc == 1 and "privileged mode" in str(doc["error"])
    copy = tmp_path / "copy.toml"
    shutil.copy(pulled, copy)  # no sidecar: found by content
    assert _plan(capsys, str(copy))[0] == 1
    pulled.write_text(pulled.read_text() + "# edited in place\n")  # the sidecar still says where from
    assert _plan(capsys, str(pulled))[0] == 1
    res = subprocess.run([*LAIR, "plan", str(pulled), "--accept"], capture_output=True, text=True)
    assert res.returncode == 0 and "untrusted recipe from registry:lair.example/r/42" in res.stderr
