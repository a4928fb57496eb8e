"""Helpers for the launcher's integration tests: run ``lair`` as a real subprocess, wait for files and
run states with a deadline, and check that a run left nothing behind on its nodes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lair.testing.nodes import NetnsNodes

LAIR = [sys.executable, "-m", "lair"]


def lair(*args: str, timeout: float = 120, check: bool = False) -> subprocess.CompletedProcess[str]:
    """Run ``lair ARGS`` to completion (LAIR_HOME comes from the session's ``lair_home``)."""
    res = subprocess.run([*LAIR, *args], capture_output=True, text=True, timeout=timeout)
    if check and res.returncode != 0:
        raise AssertionError(f"lair {' '.join(args)} -> {res.returncode}\n{res.stdout}\n{res.stderr}")
    return res


def start_lair(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``lair ARGS`` in the background (foreground launches that a test signals); ``env`` is added."""
    return subprocess.Popen(
        [*LAIR, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def wait_for(cond: Callable[[], Any], timeout: float = 60, what: str = "condition") -> Any:
    """Poll ``cond`` until it returns something truthy, or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def runs_dir(home: Path) -> Path:
    return home / "runs"


def run_record(home: Path, run_id: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((runs_dir(home) / run_id / "run.json").read_text())
    return data


def newest_run(home: Path, before: set[str]) -> str | None:
    d = runs_dir(home)
    new = (
        [p.name for p in d.iterdir() if (p / "run.json").exists() and p.name not in before]
        if d.is_dir()
        else []
    )
    return new[0] if len(new) == 1 else None


def run_ids(home: Path) -> set[str]:
    d = runs_dir(home)
    return {p.name for p in d.iterdir()} if d.is_dir() else set()


def pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@dataclass
class Leftovers:
    """What a run may leave: its containers (per node), processes, run folders, leases."""

    containers: list[str]
    processes: list[int]
    workdirs: list[str]
    leases: list[str]


def leftovers(home: Path, run_id: str, nodes: NetnsNodes | None, docker: bool) -> Leftovers:
    from lair.inventory import leases

    rec = run_record(home, run_id)
    containers: list[str] = []
    if docker and nodes is None:
        containers += [f"local:{c}" for c in local_containers(run_id).split()]
    elif docker and nodes is not None:
        for n in nodes.nodes:
            env = {**os.environ, "DOCKER_HOST": n.docker_host or ""}
            containers += [f"{n.name}:{c}" for c in local_containers(run_id, env).split()]
    pids = [int(n["pid"]) for n in rec["nodes"] if n.get("pid")]
    workdirs = [str(p) for p in Path("/tmp").glob(f"lair-{run_id}-r*")]
    held = [f"{k}:{lease.run_id}" for k, lease in leases().items() if lease.run_id == run_id]
    return Leftovers(containers, [p for p in pids if pid_alive(p)], workdirs, held)


def local_containers(run_id: str, env: dict[str, str] | None = None, *, binary: str = "docker") -> str:
    """IDs of the run's containers (running or not) on this machine's Docker engine (or ``env``'s),
    or in its podman storage (``binary="podman"``)."""
    return subprocess.run(
        [binary, "ps", "-aq", "--filter", f"label=lair.run={run_id}"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout.strip()


def assert_clean(home: Path, run_id: str, nodes: NetnsNodes | None = None, *, docker: bool = False) -> None:
    left = leftovers(home, run_id, nodes, docker)
    assert left == Leftovers([], [], [], []), f"run {run_id} left {left}"


def start_foreground(
    recipe: str, home: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], str]:
    """``lair launch RECIPE ARGS`` in the foreground, once its run journal exists: (process, run id)."""
    before = run_ids(home)
    proc = start_lair("launch", recipe, *args, env=env)
    run_id = wait_for(lambda: newest_run(home, before), what="the run journal")
    return proc, run_id


def events(home: Path, run_id: str) -> str:
    """The run's progress lines so far (``events.log``)."""
    p = runs_dir(home) / run_id / "events.log"
    return p.read_text() if p.exists() else ""


def signal_and_wait(proc: subprocess.Popen[str], sig: int, timeout: float = 120) -> tuple[int, str]:
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def hub_repo(root: Path, gguf: Path) -> Path:
    """A Hugging Face hub cache repo under ``root`` whose snapshot links ``sub/tiny-llama.gguf`` into
    ``blobs/`` (relative symlink), as the hub lays it out."""
    repo = root / "hub" / "models--lair--tiny"
    (repo / "refs").mkdir(parents=True)
    (repo / "blobs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    snap = repo / "snapshots" / "abc123" / "sub"
    snap.mkdir(parents=True)
    shutil.copyfile(gguf, repo / "blobs" / "sha256-gguf")
    (snap / "tiny-llama.gguf").symlink_to("../../../blobs/sha256-gguf")
    return repo


def assert_after_stop_ran(markers: Path, ranks: tuple[int, ...] = (0, 1)) -> None:
    """The recipe's ``after_stop`` hook (``touch MARKERS/after-stop-$LAIR_NODE_RANK``) ran on ``ranks``."""
    assert sorted(p.name for p in markers.glob("after-stop-*")) == [f"after-stop-{r}" for r in ranks]


def write_recipe(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def python_rig(home: Path, name: str, values: dict[str, str]) -> str:
    from lair.rig import set_rig_values

    set_rig_values(name, values)
    return name


__all__ = [
    "LAIR",
    "assert_after_stop_ran",
    "assert_clean",
    "events",
    "free_port",
    "hub_repo",
    "lair",
    "local_containers",
    "newest_run",
    "pid_alive",
    "python_rig",
    "run_ids",
    "run_record",
    "signal_and_wait",
    "start_foreground",
    "start_lair",
    "wait_for",
    "write_recipe",
]
