"""Generated code runs only in the sandbox: HumanEval-format samples scored through it (one right,
one wrong: 1/2), and hostile samples (a network socket to a listener on this host, a write outside
the work dir) fail there without reaching the host. Both sandboxes: a ``--network none`` container
and namespaces + rlimits."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lair.eval.sandbox import Sandbox, open_sandbox
from lair.testing.answer_server import running_answer_server

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parents[2] / "data" / "eval"
KINDS = [pytest.param("docker", marks=pytest.mark.docker), "process"]


class Listener:
    """A TCP listener on this host's loopback that counts the connections it accepts."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.sock.settimeout(0.2)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._t.join()
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    li = Listener()
    yield li
    li.close()


@pytest.fixture(params=KINDS)
def sandbox(request: pytest.FixtureRequest) -> Sandbox:
    if request.param == "docker":
        return open_sandbox("docker", timeout_s=20)
    return Sandbox("process", timeout_s=20)


def lair(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lair", *args], capture_output=True, text=True, timeout=240)


@pytest.mark.parametrize("kind", KINDS)
def test_humaneval_one_right_one_wrong_scores_half(kind: str, tmp_path: Path) -> None:
    rules = [
        {"contains": "def add(", "reply": "    return a + b\n"},
        {"contains": "def largest(", "reply": "    return min(xs)\n"},  # wrong: fails its asserts
    ]
    data = DATA / "humaneval_two.jsonl"
    with running_answer_server({"rules": rules}) as url:
        res = lair("eval", url, "--suite", "humaneval", "--data", str(data), "--sandbox", kind,
                   "--out", str(tmp_path / "r"), "--json")  # fmt: skip
    assert res.returncode == 0, res.stderr
    (suite,) = json.loads(res.stdout)["suites"]
    assert suite["sandbox"] == kind and suite["n"] == 2 and suite["score"] == pytest.approx(0.5)
    rows = [json.loads(x) for x in (tmp_path / "r" / "eval_samples.jsonl").read_text().splitlines()]
    assert [(r["doc_id"], r["verdict"]) for r in rows] == [(0, "pass"), (1, "fail")]
    assert rows[1]["output"] == "    return min(xs)\n" and "AssertionError" in rows[1]["detail"]


def test_a_socket_to_the_host_fails_and_never_arrives(sandbox: Sandbox, listener: Listener) -> None:
    program = (
        "import socket\n"
        f"s = socket.create_connection(('127.0.0.1', {listener.port}), timeout=3)\n"
        "s.sendall(b'x')\n"
    )
    v = sandbox.run(program)
    assert not v.passed and v.status == "failed"
    assert "Error" in v.detail  # refused / unreachable: no route to the host's loopback
    control = socket.create_connection(("127.0.0.1", listener.port), timeout=3)  # the listener works
    control.close()
    deadline = time.monotonic() + 5
    while listener.accepted < 1 and time.monotonic() < deadline:
        threading.Event().wait(0.02)
    assert listener.accepted == 1  # only the control connection


def test_writes_outside_the_work_dir_fail_and_leave_the_host_alone(sandbox: Sandbox, tmp_path: Path) -> None:
    outside = [tmp_path / "escaped.txt", Path("/etc/lair-escape"), Path("/root/lair-escape")]
    shared_tmp = Path("/tmp") / f"lair-sbx-escape-{os.getpid()}"  # the process sandbox's /tmp is its own
    program = (
        "import pathlib, sys\n"
        "pathlib.Path('inside.txt').write_text('ok')\n"  # its own directory: allowed
        f"try:\n    pathlib.Path({str(shared_tmp)!r}).write_text('x')\nexcept OSError:\n    pass\n"
        "for p in [" + ", ".join(repr(str(x)) for x in outside) + "]:\n"
        "    try:\n"
        "        pathlib.Path(p).write_text('escaped')\n"
        "    except OSError as e:\n"
        "        print('refused', p, file=sys.stderr)\n"
        "    else:\n"
        "        raise SystemExit('wrote ' + p)\n"
        "raise SystemExit(3)\n"
    )
    v = sandbox.run(program)
    assert v.status == "failed" and "wrote" not in v.detail  # exit 3: every outside write refused
    assert v.detail.splitlines() == [f"refused {p}" for p in outside]
    assert not any(p.exists() for p in outside) and not shared_tmp.exists()
    assert sandbox.run("import pathlib; pathlib.Path('x').write_text('ok')").passed


def test_a_program_that_never_ends_is_killed(sandbox: Sandbox) -> None:
    sandbox.timeout_s = 2
    v = sandbox.run("while True:\n    pass\n")
    assert v.status == "timeout" and not v.passed and v.seconds < 10
