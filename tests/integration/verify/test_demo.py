"""``lair demo``: one command serves a registry, launches and benchmarks the tiny recipe, submits its
report and keeps the site up with its row (reported-by-report: a CPU-only rig) beside the seeded
examples; Ctrl-C (SIGINT to the demo's process group, as a terminal sends it) stops everything: no
process, no open port, no folder."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pytest

from lair.testing.registry import free_port
from lair.vocabulary import TIERS

pytestmark = [pytest.mark.integration]

ENGINE_PORT = 8091  # examples/tiny-cpu/recipe.toml's port
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _get(url: str) -> str | None:
    try:
        with OPENER.open(url, timeout=5) as resp:
            return str(resp.read().decode())
    except OSError:
        return None


def _wait_verified(base: str, proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 240) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the demo exited early:\n{log.read_text()}"
        page = _get(f"{base}/recipes/tiny-cpu")
        if page and 'data-tier="reported-by-report"' in page:  # a CPU-only rig: not physically checked
            return page
        time.sleep(0.5)
    raise TimeoutError(f"the report's row never appeared:\n{log.read_text()}")


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for cmd in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmd.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in argv and str(os.getpid()) != cmd.parent.name:
            found.append(argv)
    return found


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _start_demo(port: int, log: Path, *, sigint_ignored: bool = False) -> subprocess.Popen[bytes]:
    with log.open("w") as errors:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "lair", "demo", "--port", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errors,
            start_new_session=True,
            preexec_fn=_ignore_sigint if sigint_ignored else None,
        )


def _listeners(port: int) -> set[int]:
    """The pids holding a TCP socket that listens on ``port`` (from /proc/net/tcp{,6} and every fd)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            cols = row.split()
            if cols[1].rsplit(":", 1)[1] == f"{port:04X}" and cols[3] == "0A":  # 0A: LISTEN
                inodes.add(f"socket:[{cols[9]}]")
    pids = set()
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        try:
            if os.readlink(fd) in inodes:
                pids.add(int(fd.parent.parent.name))
        except OSError:
            continue
    return pids


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/status").exists() and "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()


def test_demo_serves_the_verified_row_and_ctrl_c_leaves_nothing(lair_home: Path, tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "demo.log"
    # started the way a script's background job is, with SIGINT ignored: Ctrl-C must still stop it
    proc = _start_demo(port, log, sigint_ignored=True)
    base = f"http://127.0.0.1:{port}"
    try:
        page = _wait_verified(base, proc, log)
        listed = json.loads(_get(f"{base}/api/v1/recipes") or "{}")["items"]
        assert {i["slug"] for i in listed} >= {"tiny-cpu", *_seeded(tmp_path)}
        assert re.search(r'<tr class="[^"]*" data-provenance="reported-by-report">', page)
        _tier_words_match_the_stored_tiers(base, log.read_text())
    except BaseException:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=120)
        raise
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C on the terminal: the whole foreground group
    proc.wait(timeout=60)
    err = log.read_text()
    assert proc.returncode == 0, err
    folder = re.search(r"demo folder: (\S+)", err)
    assert folder and "stored: report" in err and "nothing left running" in err, err
    assert not Path(folder.group(1)).exists(), err
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0  # the registry no longer listens
    left = _processes_mentioning(f"--port {port}") + _processes_mentioning(folder.group(1))
    assert left == [], (left, err)


def test_sigterm_to_the_demo_alone_mid_launch_stops_the_engine_and_the_registry(
    lair_home: Path, tmp_path: Path
) -> None:
    """``kill PID`` of the demo while its launch serves the engine: the launch hears it too, so the
    engine, the launch and the registry all end; nothing listens, nothing is left."""
    port = free_port()
    log = tmp_path / "demo.log"
    proc = _start_demo(port, log)
    engine: set[int] = set()
    try:
        deadline = time.monotonic() + 180
        while "ready in" not in log.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.2)
        engine = _listeners(ENGINE_PORT)  # the launch said ready: its engine listens there
        registry = _listeners(port)
        assert engine and registry, f"engine {engine}, registry {registry}:\n{log.read_text()}"
    finally:
        proc.send_signal(signal.SIGTERM)  # the demo's own pid only, not its group
    proc.wait(timeout=150)
    err = log.read_text()
    assert proc.returncode == 0, err
    assert "nothing left running" in err, err
    assert [p for p in engine | registry if _alive(p)] == [], err
    for listening in (port, ENGINE_PORT):
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", listening)) != 0, (listening, err)
    folder = re.search(r"demo folder: (\S+)", err)
    assert folder and not Path(folder.group(1)).exists(), err


_TIER_WORD = re.compile(
    r"(?<![\w-])(?<!not )(reported-by-report|reported|verified|replicated)(?![\w-])", re.I
)
"""A tier word stated of a row ("not verified: why" states none)."""


class _Claims(HTMLParser):
    """The text of every element of a page that states a tier (the tier cell of a row, a report's
    tier summary, a chart's legend), by the tier its row says it has (``data-tier``/``data-provenance``
    of the nearest row; None outside a row). Legends that define every tier are not claims."""

    CLAIMS = ("tier", "tier-summary", "verified-speed")

    def __init__(self) -> None:
        super().__init__()
        self.claims: list[tuple[str | None, str]] = []
        self._row: list[str | None] = []
        self._open: list[bool] = []
        self._text: list[str] = []
        self._legend = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "tr":
            self._row.append(a.get("data-tier") or a.get("data-provenance"))
        classes = set((a.get("class") or "").split())
        claim = bool(classes & set(self.CLAIMS)) or a.get("data-part") == "legend"
        self._open.append(claim)
        if claim:
            self._text = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr" and self._row:
            self._row.pop()
        if self._open and self._open.pop():
            self.claims.append((self._row[-1] if self._row else None, " ".join(self._text)))

    def handle_data(self, data: str) -> None:
        self._text.append(data)


def _tier_words_match_the_stored_tiers(base: str, cli_output: str) -> None:
    """Every tier word a page or the CLI states is the tier the registry stored for that row (issue:
    "verified" for reported-by-report rows in the demo, the report page and the chart legend)."""
    doc = json.loads(_get(f"{base}/api/v1/recipes/tiny-cpu.json") or "{}")
    stored = {str(m["tier"]) for m in doc["measurements"]}
    assert stored and stored <= set(TIERS), stored
    reports = {m["report_id"] for m in doc["measurements"] if m.get("report_id")}
    pages = [f"{base}/recipes/tiny-cpu", *(f"{base}/reports/{r}" for r in reports)]
    for url in pages:
        parser = _Claims()
        parser.feed(_get(url) or "")
        assert parser.claims, f"{url} states no tier"
        for row_tier, text in parser.claims:
            words = {w.lower() for w in _TIER_WORD.findall(text)}
            if row_tier is not None:
                assert row_tier in stored and text.strip().lower().startswith(row_tier), (url, row_tier, text)
            assert words <= stored, (url, text, stored)  # never a tier no row of the recipe has
        assert "Verified for" not in (_get(url) or "")
    for line in cli_output.splitlines():
        if line.startswith("stored: report"):
            assert {w.lower() for w in _TIER_WORD.findall(line)} <= stored, line
            assert "reported-by-report" in line, line


def _seeded(tmp_path: Path) -> list[str]:
    """The slugs ``lair serve`` seeds, from the seeding itself on a database of the test's own."""
    from lair.registry.db.engine import make_engine, migrate
    from lair.registry.service.publish import seed_examples

    engine = make_engine(f"sqlite:///{tmp_path / 'seeded.sqlite3'}")
    migrate(engine)
    with engine.begin() as conn:
        slugs = seed_examples(conn)
    engine.dispose()
    return slugs
