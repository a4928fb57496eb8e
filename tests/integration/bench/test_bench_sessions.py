"""``lair bench --sessions`` end to end against the calibrated server with a longest-prefix cache:
every later turn of a session starts with the whole previous prompt, so the server's cached tokens
for it are exactly that prompt's tokens (the turn's declared reuse, by hand from the rows); the
responses' hit rate equals the server's own counter; the cell is labelled warm and kept apart from
the cold cells, and its rows go to ``sessions.jsonl``. Without a prefix cache the same workload is
flagged ``little-reuse`` (the responses and the counter agree: nothing was reused)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lair.bench.warm import warm_figures
from lair.cli import main
from lair.testing.calibrated_server import running_server

pytestmark = pytest.mark.integration

SESSIONS = ["--sessions", "3", "--turns", "4", "--turn-tokens", "16", "--contexts", "96"]


def _bench(capsys: pytest.CaptureFixture[str], url: str, out: Path) -> dict[str, Any]:
    argv = ["bench", url, *SESSIONS, "--decode-tokens", "8", "--out", str(out), "--json"]
    assert main(argv) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def _rows(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "sessions.jsonl").read_text().splitlines()]


def test_a_warm_cell_declares_its_reuse_and_the_server_counter_confirms_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "report"
    with running_server("--ttft-ms", "10", "--token-ms", "2", "--prefix-cache-longest") as url:
        doc = _bench(capsys, url, out)
    assert doc["cells"] == []  # no cold cell
    (cell,) = doc["sessions"]["cells"]
    rows = _rows(out)
    assert (cell["cache"], cell["requests"], cell["completed"], len(rows)) == ("warm", 12, 12, 12)
    prev: dict[int, int] = {}
    for r in sorted(rows, key=lambda r: (r["turn"], r["session"])):
        if r["turn"]:  # the whole previous prompt is a prefix of this one
            assert r["declared_reuse_tokens"] == prev[r["session"]] == r["cached_tokens"]
        prev[r["session"]] = r["prompt_tokens"]
    first = sorted(r["cached_tokens"] for r in rows if r["turn"] == 0)
    # the shared system prompt, after the first (which shares only the message mark with the warm-up)
    assert first[0] <= 1 and first[1] == first[2] > 96
    prompt = sum(r["prompt_tokens"] for r in rows)
    cached = sum(r["cached_tokens"] for r in rows)
    assert cell["prompt_tokens"] == prompt and cell["response_cached_tokens"] == cached
    assert (
        cell["counter_hit_tokens"] == cached
        and cell["counter_metric"] == "calibrated:prefix_cache_hits_total"
    )
    assert cell["response_hit_rate"] == cell["counter_hit_rate"] == pytest.approx(cached / prompt, abs=1e-6)
    assert cell["hit_rates_agree"] is True and cell["flags"] == []
    assert {k: v for k, v in warm_figures(rows, cached).items()} == {
        k: cell[k] for k in warm_figures(rows, cached)
    }
    results = json.loads((out / "results.json").read_text())
    assert results["bench"]["sessions"] == doc["sessions"]


def test_without_a_prefix_cache_the_cell_says_little_was_reused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with running_server("--ttft-ms", "10", "--token-ms", "2") as url:
        doc = _bench(capsys, url, tmp_path / "report")
    (cell,) = doc["sessions"]["cells"]
    assert cell["response_hit_rate"] == 0 and cell["declared_hit_rate"] > 0.5
    assert cell["counter_hit_rate"] == 0 and cell["flags"] == ["little-reuse"]  # the counter agrees: none
