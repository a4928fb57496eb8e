"""Data sets from the user's local Hugging Face cache, offline: a hub cache laid out as ``hf download
openai/gsm8k --repo-type dataset`` leaves it (blobs named by their sha256, a snapshot of links,
``refs/main``; parquet files written by pyarrow, the README's configs), checked with
huggingface_hub's own cache scanner, is what ``lair eval --suite gsm8k`` reads with
``HF_HUB_OFFLINE=1`` and ``HF_DATASETS_OFFLINE=1``: the server is sent this cache's questions and the
score is the one worked out by hand. Without the data set, the error names the command that fetches
it."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lair.testing.answer_server import running_answer_server

pytestmark = pytest.mark.integration

REV = "e53f048856ff4f594e959d75785d2c2d37b678ee"
README = """---
configs:
- config_name: main
  data_files:
  - split: train
    path: main/train-*
  - split: test
    path: main/test-*
---
# gsm8k (three test problems, two few-shot ones)
"""
TEST = [
    ("Tom has 3 bags of 6 apples. How many apples?", "3 bags of 6 is 3*6 = 18 apples.\n#### 18"),
    ("A pen costs $2. What do 7 pens cost?", "7 pens cost 7*2 = $14.\n#### 14"),
    ("Ann reads 1,200 pages a week. How many in 2 weeks?", "2*1,200 = 2,400 pages.\n#### 2,400"),
]
TRAIN = [("What is 1 + 1?", "1 + 1 = 2\n#### 2"), ("What is 2 + 3?", "2 + 3 = 5\n#### 5")]


def _parquet(rows: list[tuple[str, str]]) -> bytes:
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"gsm8k-{os.getpid()}-{len(rows)}.parquet"
    pq.write_table(pa.table({"question": [q for q, _ in rows], "answer": [a for _, a in rows]}), path)
    data = path.read_bytes()
    path.unlink()
    return data


def _hub_cache(home: Path) -> Path:
    """``home``/hub/datasets--openai--gsm8k as the hub client lays it out; returns the snapshot."""
    repo = home / "hub" / "datasets--openai--gsm8k"
    snap = repo / "snapshots" / REV
    files = {"README.md": README.encode(), "main/train-00000-of-00001.parquet": _parquet(TRAIN)}
    files["main/test-00000-of-00001.parquet"] = _parquet(TEST)
    (repo / "blobs").mkdir(parents=True)
    for name, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snap / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REV)
    return snap


def _lair(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env |= {"HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "lair", "eval", *args], capture_output=True, text=True, timeout=240, env=env
    )


def _sent(url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(url + "/requests", timeout=10) as r:
        data: list[dict[str, Any]] = json.loads(r.read())
        return data


def test_gsm8k_is_read_offline_from_the_hub_cache(tmp_path: Path) -> None:
    from huggingface_hub import scan_cache_dir

    home = tmp_path / "hf"
    _hub_cache(home)
    (repo,) = scan_cache_dir(home / "hub").repos  # the hub client's own reading of the layout
    assert (repo.repo_id, repo.repo_type, [r.commit_hash for r in repo.revisions]) == (
        "openai/gsm8k",
        "dataset",
        [REV],
    )
    assert repo.nb_files == 3
    rules = [  # strict-match takes the number after "#### ": 18 right, 14 right, 2400 wrong
        {"contains": TEST[0][0], "reply": " 3*6 = 18\n#### 18"},
        {"contains": TEST[1][0], "reply": " It is $14.\n#### 14"},
        {"contains": TEST[2][0], "reply": " 2,400 pages, so\n#### 2,000"},
    ]
    with running_answer_server({"rules": rules, "default": "?"}) as url:
        res = _lair(home, url, "--suite", "gsm8k", "--num-fewshot", "0", "--json")
        sent = _sent(url)
    assert res.returncode == 0, res.stderr
    asked = sorted(q for q, _ in TEST if any(q in str(b.get("prompt")) for b in sent))
    assert asked == sorted(q for q, _ in TEST) and len(sent) == 3
    (suite,) = [s for s in json.loads(res.stdout)["suites"] if s["metric"] == "exact_match,strict-match"]
    assert (suite["n"], suite["score"]) == (3, pytest.approx(2 / 3))


def test_a_data_set_missing_from_the_cache_names_the_command_that_fetches_it(tmp_path: Path) -> None:
    (tmp_path / "hf" / "hub").mkdir(parents=True)
    res = _lair(tmp_path / "hf", "http://127.0.0.1:9", "--suite", "gsm8k", "--model", "m")
    assert res.returncode != 0
    assert "data set openai/gsm8k is not in the local Hugging Face cache" in res.stderr, res.stderr
    assert "hf download openai/gsm8k --repo-type dataset" in res.stderr
