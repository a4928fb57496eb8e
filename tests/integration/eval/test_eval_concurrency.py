"""``lair eval --concurrency C`` through the real CLI and the real lm-eval: the answer server holds
each reply 0.3 s and records the most completions it was ever answering at once, so its own record
says how many requests ``lair eval`` kept in flight."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from lair.testing.answer_server import running_answer_server

pytestmark = pytest.mark.integration

LIMIT = 12  # samples of the bundled tiny task (lair_arith)


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def _eval(url: str, concurrency: int, out: Path) -> dict[str, Any]:
    argv = ["eval", url, "--suite", "lair_arith", "--limit", str(LIMIT), "--concurrency", str(concurrency)]
    res = subprocess.run(
        [sys.executable, "-m", "lair", *argv, "--out", str(out), "--json"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert res.returncode == 0, res.stderr
    return {
        "server": _get(url + "/inflight"),
        "sent": len(_get(url + "/requests")),
        "doc": json.loads(res.stdout),
    }


@pytest.mark.parametrize(("concurrency", "lo", "hi"), [(1, 1, 1), (4, 2, 4)])
def test_requests_in_flight_follow_concurrency(tmp_path: Path, concurrency: int, lo: int, hi: int) -> None:
    with running_answer_server({"rules": [], "default": " 0", "delay_s": 0.3}) as url:
        got = _eval(url, concurrency, tmp_path / "rep")
    assert got["sent"] == LIMIT and got["server"]["now"] == 0
    assert lo <= got["server"]["max"] <= hi, got["server"]
    (suite,) = got["doc"]["suites"]
    assert suite["n"] == LIMIT
