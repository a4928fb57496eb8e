"""Data sets from the user's local Hugging Face cache, offline: a hub cache laid out as ``hf download
openai/gsm8k --repo-type dataset`` leaves it (``lair.testing.hf_cache``: blobs named by their sha256,
a snapshot of links, ``refs/main``, parquet files written by pyarrow, the README's configs), checked
with huggingface_hub's own cache scanner, is what ``lair eval --suite gsm8k`` reads with
``HF_HUB_OFFLINE=1`` and ``HF_DATASETS_OFFLINE=1``: the server is sent this cache's questions and the
score is the one worked out by hand. Without the data set, the error names the command that fetches
it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from lair.testing.answer_server import running_answer_server
from lair.testing.hf_cache import GSM8K_TEST, REVISION, tiny_gsm8k

pytestmark = pytest.mark.integration

RULES = [  # gsm8k's strict-match takes the number after "#### ": 18 right, 14 right, 2,000 wrong
    {"contains": GSM8K_TEST[0][0], "reply": " 3*6 = 18\n#### 18"},
    {"contains": GSM8K_TEST[1][0], "reply": " It is $14.\n#### 14"},
    {"contains": GSM8K_TEST[2][0], "reply": " 2,400 pages, so\n#### 2,000"},
]


def offline_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    return env | {"HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def _lair(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lair", "eval", *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=offline_env(home),
    )


def _sent(url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(url + "/requests", timeout=10) as r:
        data: list[dict[str, Any]] = json.loads(r.read())
        return data


def test_gsm8k_is_read_offline_from_the_hub_cache(tmp_path: Path) -> None:
    from huggingface_hub import scan_cache_dir

    home = tmp_path / "hf"
    tiny_gsm8k(home / "hub")
    (repo,) = scan_cache_dir(home / "hub").repos  # the hub client's own reading of the layout
    assert (repo.repo_id, repo.repo_type, [r.commit_hash for r in repo.revisions]) == (
        "openai/gsm8k",
        "dataset",
        [REVISION],
    )
    assert repo.nb_files == 3
    with running_answer_server({"rules": RULES, "default": "?"}) as url:
        res = _lair(home, url, "--suite", "gsm8k", "--num-fewshot", "0", "--json")
        sent = _sent(url)
    assert res.returncode == 0, res.stderr
    asked = sorted(q for q, _ in GSM8K_TEST if any(q in str(b.get("prompt")) for b in sent))
    assert asked == sorted(q for q, _ in GSM8K_TEST) and len(sent) == 3
    (suite,) = json.loads(res.stdout)["suites"]
    assert (suite["metric"], suite["n"], suite["score"]) == (
        "exact_match,strict-match",
        3,
        pytest.approx(2 / 3),
    )


def test_a_data_set_missing_from_the_cache_names_the_command_that_fetches_it(tmp_path: Path) -> None:
    (tmp_path / "hf" / "hub").mkdir(parents=True)
    res = _lair(tmp_path / "hf", "http://127.0.0.1:9", "--suite", "gsm8k", "--model", "m")
    assert res.returncode != 0
    assert "data set openai/gsm8k is not in the local Hugging Face cache" in res.stderr, res.stderr
    assert "hf download openai/gsm8k --repo-type dataset" in res.stderr
