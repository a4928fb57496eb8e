"""An answer at the prompt accepts exactly what was shown: ``lair plan`` of a pulled recipe on a real
terminal (a pseudo-terminal) shows its requests and asks; the file is changed (a hook added) before
the user answers "y": nothing is accepted, the plan is refused, and the next run asks again. The same
answer for an unchanged file accepts it (stored for that content)."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lair.errors import TrustError
from lair.launch import Request, prepare
from lair.launch.trust_store import stamp_pulled, trust_dir
from lair.recipe import load_recipe
from lair.recipe.digest import model_sha256

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "examples" / "tiny-cpu" / "recipe.toml"
HOOK = 'after_stop = ["touch /tmp/never-accepted"]\n\n[placeholders.MODEL_DIR]'


@pytest.fixture
def pulled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LAIR_HOME", str(tmp_path / "home"))
    path = tmp_path / "tiny.toml"
    path.write_text(TINY.read_text())
    stamp_pulled(
        path,
        registry="https://r.example",
        slug="tiny-cpu",
        revision=1,
        sha256=model_sha256(load_recipe(path)),
    )
    return path


def _stored() -> list[Path]:
    return sorted((trust_dir() / "by-source").rglob("*.json")) if trust_dir().exists() else []


def test_a_fingerprint_accepts_that_content_only(pulled: Path) -> None:
    with pytest.raises(TrustError) as shown:
        prepare(Request(recipe=str(pulled), doctor=False), lease=False)
    pulled.write_text(pulled.read_text().replace("[placeholders.MODEL_DIR]", HOOK))
    with pytest.raises(TrustError, match="changed while its requests were shown"):
        prepare(Request(recipe=str(pulled), accept=shown.value.fingerprint, doctor=False), lease=False)
    assert _stored() == []
    with pytest.raises(TrustError) as again:
        prepare(Request(recipe=str(pulled), doctor=False), lease=False)
    assert again.value.fingerprint != shown.value.fingerprint
    prepare(Request(recipe=str(pulled), accept=again.value.fingerprint, doctor=False), lease=False)
    assert len(_stored()) == 1


def _read_until(fd: int, text: bytes, timeout_s: float = 60) -> bytes:
    out, deadline = b"", time.monotonic() + timeout_s
    while text not in out:
        assert time.monotonic() < deadline, out.decode(errors="replace")
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                out += os.read(fd, 4096)
            except OSError:
                break
    return out


def _plan_on_a_terminal(path: Path, between: object) -> tuple[int, str]:
    """``lair plan PATH`` on a pseudo-terminal: at the prompt, call ``between()``, then answer y."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "lair", "plan", str(path)],
        stdin=slave, stdout=subprocess.DEVNULL, stderr=slave, env=os.environ.copy(), close_fds=True,
    )  # fmt: skip
    os.close(slave)
    try:
        said = _read_until(master, b"accept and go on? [y/N]")
        between()  # type: ignore[operator]
        os.write(master, b"y\n")
        rc = proc.wait(60)
        rest = b""
        while select.select([master], [], [], 0.2)[0]:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            rest += chunk
        return rc, (said + rest).decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)


def test_a_file_changed_at_the_prompt_is_refused_not_accepted(pulled: Path) -> None:
    def edit() -> None:
        pulled.write_text(pulled.read_text().replace("[placeholders.MODEL_DIR]", HOOK))

    rc, said = _plan_on_a_terminal(pulled, edit)
    assert rc == 1 and "changed while its requests were shown: nothing was accepted" in said, said
    assert _stored() == []
    rc, said = _plan_on_a_terminal(pulled, lambda: None)  # shown with the hook this time: accepted
    assert rc == 0 and "sh -c touch /tmp/never-accepted" in said, said
    assert len(_stored()) == 1
