"""Where generated code runs: never in lair's own process, never with network access.

- ``docker``: one throw-away container per program (``--network none``, read-only root, a private
  tmpfs work dir, user 65534, no capabilities, pid/memory/CPU limits). The image is built locally
  from this machine's Python (``lair.runners.image_build``), so no registry is needed.
- ``process``: when Docker is absent and lair runs as root, a child in fresh network, mount and pid
  namespaces (``unshare``: only a loopback with nothing on it), with fresh tmpfs over every
  world-writable directory (``/tmp`` is its private work dir), dropped to user 65534 with no
  capabilities (``setpriv``), and rlimits on CPU time, memory, file size, open files and processes.

Without either, :func:`open_sandbox` refuses: code is never run unsandboxed.

    with open_sandbox("auto") as sb:
        verdict = sb.run("assert 1 + 1 == 2")
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from lair.errors import EvalError

__all__ = ["Sandbox", "SandboxKind", "Verdict", "current", "docker_available", "open_sandbox", "using"]

SandboxKind = Literal["auto", "docker", "process"]
NOBODY = 65534
MEMORY_BYTES = 512 * 2**20
FILE_BYTES = 16 * 2**20
WRITABLE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
"""World-writable places on a Debian host: each gets a fresh tmpfs inside the process sandbox."""


@dataclass(frozen=True)
class Verdict:
    """What one program did: ``passed`` when it exited 0 within its time."""

    passed: bool
    status: str  # passed | failed | timeout
    detail: str = ""  # the last lines of its stderr
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _tail(text: str, lines: int = 3) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])[-500:]


def docker_available() -> bool:
    if not shutil.which("docker"):
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _python() -> str:
    """The real interpreter (not a venv's link): the sandboxed program needs only its stdlib."""
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    return os.path.realpath(base if base.exists() else sys.executable)


@dataclass
class Sandbox:
    """Runs programs with :meth:`run`; verdicts are kept by program hash (see :meth:`verdict_of`)."""

    kind: Literal["docker", "process"]
    image: str = ""
    timeout_s: float = 10.0
    concurrency: int = 2
    _verdicts: dict[str, Verdict] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def run(self, program: str) -> Verdict:
        import time

        t0 = time.monotonic()
        status, stderr = self._docker(program) if self.kind == "docker" else self._process(program)
        v = Verdict(status == "passed", status, _tail(stderr), round(time.monotonic() - t0, 3))
        with self._lock:
            self._verdicts[_key(program)] = v
        return v

    def run_many(self, programs: Sequence[str], concurrency: int | None = None) -> list[Verdict]:
        with ThreadPoolExecutor(max_workers=max(1, concurrency or self.concurrency)) as pool:
            return list(pool.map(self.run, programs))

    def verdict_of(self, program: str) -> Verdict | None:
        with self._lock:
            return self._verdicts.get(_key(program))

    def _docker(self, program: str) -> tuple[str, str]:
        name = f"lair-sbx-{uuid.uuid4().hex[:12]}"
        argv = ["docker", "run", "--rm", "-i", "--name", name, "--label", "lair.sandbox=1"]
        argv += [
            "--network",
            "none",
            "--read-only",
            "--tmpfs",
            f"/sandbox:rw,size=64m,uid={NOBODY},gid={NOBODY}",
        ]
        argv += ["--workdir", "/sandbox", "--user", f"{NOBODY}:{NOBODY}", "--cap-drop", "ALL"]
        argv += ["--security-opt", "no-new-privileges", "--pids-limit", "64", "--cpus", "1"]
        argv += ["--memory", str(MEMORY_BYTES), "--memory-swap", str(MEMORY_BYTES)]
        argv += ["-e", "PYTHONDONTWRITEBYTECODE=1", self.image, "python3", "-I", "-"]
        try:
            p = subprocess.run(argv, input=program, capture_output=True, text=True, timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            subprocess.run(["docker", "kill", name], capture_output=True)
            return "timeout", f"killed after {self.timeout_s:g} s"
        if p.returncode == 125:  # docker itself failed: not the program's fault
            raise EvalError(f"the sandbox container did not start: {_tail(p.stderr)}")
        return ("passed" if p.returncode == 0 else "failed"), p.stderr

    def _process(self, program: str) -> tuple[str, str]:
        mounts = " ".join(
            f"[ -d {d} ] && mount -t tmpfs -o size=64m,mode=1777,nosuid,nodev tmpfs {d};"
            for d in WRITABLE_DIRS
        )
        drop = f"setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups --no-new-privs"
        drop += " --inh-caps=-all --bounding-set=-all"
        script = f'{mounts} cd /tmp && exec {drop} -- "$0" -I -'
        argv = ["unshare", "--net", "--mount", "--pid", "--fork", "--kill-child", "--propagation", "private"]
        argv += ["--", "sh", "-c", script, _python()]
        env = {"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}
        p = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd="/",
            start_new_session=True,
            preexec_fn=lambda: _limits(self.timeout_s),
        )
        try:
            _, stderr = p.communicate(program, timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            return "timeout", f"killed after {self.timeout_s:g} s"
        return ("passed" if p.returncode == 0 else "failed"), stderr


def _limits(timeout_s: float) -> None:
    """rlimits of the process sandbox (set in the child before ``unshare`` runs)."""
    cpu = int(timeout_s) + 1
    for res, value in (
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_AS, MEMORY_BYTES * 2),
        (resource.RLIMIT_FSIZE, FILE_BYTES),
        (resource.RLIMIT_NOFILE, 64),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(res, (value, value))


def _key(program: str) -> str:
    return hashlib.sha256(program.encode()).hexdigest()


def _image() -> str:
    """``lair-sandbox/python:<version>-<hash>``, built once from this interpreter (about 3 s)."""
    from lair.runners.image_build import build_python_image, image_exists

    exe = _python()
    tag = f"lair-sandbox/python:{sys.version_info.major}.{sys.version_info.minor}-"
    tag += hashlib.sha256(exe.encode()).hexdigest()[:8]
    if not image_exists(tag):
        try:
            build_python_image(tag)
        except RuntimeError as exc:
            raise EvalError(f"cannot build the sandbox image {tag}: {exc}") from exc
    return tag


def open_sandbox(kind: SandboxKind = "auto", timeout_s: float = 10.0) -> Sandbox:
    """A sandbox of ``kind``; ``auto`` takes Docker when its engine answers, else the process one."""
    if kind in ("auto", "docker") and docker_available():
        return Sandbox("docker", image=_image(), timeout_s=timeout_s)
    if kind == "docker":
        raise EvalError("--sandbox docker: no Docker engine answers `docker info`", hint="start dockerd")
    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("setpriv")):
        raise EvalError(
            "no sandbox for generated code: Docker is not available and the process sandbox needs root "
            "(unshare, setpriv)",
            hint="start a Docker engine, or run lair as root; generated code never runs unsandboxed",
        )
    return Sandbox("process", timeout_s=timeout_s)


_CURRENT: list[Sandbox] = []


@contextlib.contextmanager
def using(sb: Sandbox) -> Iterator[Sandbox]:
    """Make ``sb`` the sandbox that task code (:func:`current`) runs programs in."""
    _CURRENT.append(sb)
    try:
        yield sb
    finally:
        _CURRENT.remove(sb)


def current() -> Sandbox:
    if not _CURRENT:
        raise EvalError("no sandbox is active", hint="run code-executing tasks through `lair eval`")
    return _CURRENT[-1]
