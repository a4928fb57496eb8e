"""The needle suite through ``lair eval``: lair's own needle test (lair.bench) at each depth, against
the calibrated server whose reply is chosen: then the passphrase of one depth, so the score is 1/2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lair.testing.calibrated_server import running_server

pytestmark = pytest.mark.integration


def _needle(reply: str, out: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    with running_server("--ttft-ms", "5", "--token-ms", "1", "--reply", reply) as url:
        argv = [sys.executable, "-m", "lair", "eval", url, "--suite", "needle", "--needle-context", "256"]
        argv += ["--needle-depths", "0.2,0.8", "--seed", "5", "--out", str(out), "--json"]
        res = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    (suite,) = json.loads(res.stdout)["suites"]
    rows = [json.loads(x) for x in (out / "eval_samples.jsonl").read_text().splitlines()]
    return suite, rows


def test_needle_scores_the_depths_whose_passphrase_came_back(tmp_path: Path) -> None:
    first, rows = _needle("no idea", tmp_path / "a")
    assert first["n"] == 2 and first["score"] == 0.0 and [r["verdict"] for r in rows] == ["fail", "fail"]
    secrets = [r["target"] for r in rows]
    assert len(set(secrets)) == 2 and all("idea" in r["output"] for r in rows)
    second, rows = _needle(secrets[0], tmp_path / "b")  # same seed: the same passphrases
    assert [r["target"] for r in rows] == secrets and [r["verdict"] for r in rows] == ["pass", "fail"]
    assert second["score"] == pytest.approx(0.5) and second["stderr"] == pytest.approx(0.5)
