"""Hostile uploads against a real ``lair serve`` (SQLite): each archive of
:data:`lair.testing.uploads.HOSTILE` (a 100,000-digit pax header, a 1 GiB pax header, an 8 GiB
``run/../bomb0``, a gzip bomb) is refused within 1 s with its reason, the server's memory (VmRSS of
every process of its session, from /proc) grows by less than 50 MB, and a ``/api/v1/health`` polled
all the while answers within 50 ms at the 99th percentile."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from lair.registry.serve import prepare
from lair.testing.registry import serve_process
from lair.testing.uploads import HOSTILE

pytestmark = pytest.mark.integration
ROUNDS = 3
HEALTH_SAMPLES = 200
"""Uploads go on, round after round, until /health was asked this often while they ran."""


def _user_add(db: str, name: str) -> str:
    argv = [sys.executable, "-m", "lair", "registry", "user", "add", name, "--db", db, "--json"]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return str(json.loads(res.stdout)["token"])


def _session_pids(port: int) -> list[int]:
    """The processes of the server's session: its leader (the ``--port`` command line) and workers."""
    procs = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
    leader = next(p for p in procs if f"\0--port\0{port}\0".encode() in _read(Path(f"/proc/{p}/cmdline")))
    sid = _session(leader)
    return [p for p in procs if _session(p) == sid]


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _session(pid: int) -> int | None:
    """The session id of ``pid`` (/proc/PID/stat: "pid (comm) state ppid pgrp session ...")."""
    fields = _read(Path(f"/proc/{pid}/stat")).decode().rpartition(") ")[2].split()
    return int(fields[3]) if len(fields) > 3 else None


def _memory(pids: list[int], key: str = "VmRSS") -> dict[int, int]:
    """kB of ``key`` per process, from /proc/PID/status."""
    out = {}
    for pid in pids:
        for line in _read(Path(f"/proc/{pid}/status")).decode().splitlines():
            if line.startswith(key + ":"):
                out[pid] = int(line.split()[1])
    return out


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, list[int]]]:
    db = f"sqlite:///{tmp_path_factory.mktemp('hostile') / 'registry.sqlite3'}"
    prepare(db, seed=True)
    token = _user_add(db, "attacker")
    unlimited = {"LAIR_REGISTRY_WRITE_LIMIT": "100000/minute"}  # hundreds of uploads by one account
    with serve_process(db, seed=False, env=unlimited) as base:
        yield base, token, _session_pids(int(base.rsplit(":", 1)[1]))


def _upload(base: str, token: str, data: bytes) -> tuple[int, dict[str, object], float]:
    headers = {"content-type": "application/gzip", "authorization": f"Bearer {token}"}
    req = urllib.request.Request(base + "/api/v1/reports", data=data, method="POST", headers=headers)
    start = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    return status, json.loads(raw), time.monotonic() - start


def _poll_health(base: str, stop: threading.Event, out: list[float]) -> None:
    while not stop.is_set():
        start = time.monotonic()
        with urllib.request.urlopen(base + "/api/v1/health", timeout=30) as r:
            assert r.status == 200
        out.append(time.monotonic() - start)


def test_hostile_uploads_are_refused_fast_while_health_stays_fast(server: tuple[str, str, list[int]]) -> None:
    base, token, pids = server
    archives = {name: build() for name, (build, _, _) in HOSTILE.items()}  # built before measuring
    _upload(base, token, archives["gzip bomb"])  # warm: first-request imports are not the upload's cost
    before = _memory(pids)
    hwm_before = _memory(pids, "VmHWM")
    latencies: list[float] = []
    stop = threading.Event()
    poller = threading.Thread(target=_poll_health, args=(base, stop, latencies))
    poller.start()
    try:
        results = []
        deadline = time.monotonic() + 60
        while len(latencies) < HEALTH_SAMPLES or len(results) < ROUNDS * len(archives):
            assert time.monotonic() < deadline, (len(latencies), len(results))
            results += [(name, *_upload(base, token, archives[name])) for name in archives]
    finally:
        stop.set()
        poller.join(30)
    for name, status, body, took in results:
        _, want_status, needle = HOSTILE[name]
        reasons = body["error"]["reasons"]  # type: ignore[index]
        assert (status, took < 1.0) == (want_status, True), (name, status, took, reasons)
        assert any(needle in r for r in reasons), (name, reasons)  # type: ignore[union-attr]
    after, hwm_after = _memory(pids), _memory(pids, "VmHWM")
    growth = {pid: (after[pid] - before[pid]) / 1024 for pid in before if pid in after}
    peak = {pid: (hwm_after[pid] - hwm_before[pid]) / 1024 for pid in hwm_before if pid in hwm_after}
    assert growth and max(growth.values()) < 50, (growth, peak)
    assert max(peak.values()) < 50, peak  # the high-water mark too: no spike to GBs and back
    latencies.sort()
    assert len(latencies) >= HEALTH_SAMPLES
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
    assert p99 < 0.050, (p99, latencies[-5:])
