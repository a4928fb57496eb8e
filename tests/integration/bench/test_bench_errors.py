"""Failed requests and over-long prompts, through the real ``lair`` CLI against the calibrated
server made to fail as input: a cell with failed requests is an error carrying the server's own
messages, the exit code is 1, and a prompt above the server's listed context is refused unsent."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import urllib.request
from typing import Any

import pytest

from lair.bench import BenchOptions, run_bench
from lair.bench.metrics import parse_prometheus
from lair.testing.calibrated_server import running_server

pytestmark = pytest.mark.integration

LIMIT = 1000
MESSAGE = re.compile(r"request \((\d+) tokens\) exceeds the available context size \(1000 tokens\)")


def _lair(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lair", *args], capture_output=True, text=True, timeout=120, check=False
    )


def _bench(url: str, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    args = ["bench", url, "--contexts", "64,2000,3000", "--concurrency", "1,2", "--decode-tokens", "8"]
    proc = _lair(*args, "--repeat", "1", "--timeout", "30", "--json", *extra)
    return proc, json.loads(proc.stdout)


def _served(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        return parse_prometheus(r.read().decode())


def test_failed_requests_fail_the_bench_with_the_server_message() -> None:
    with running_server("--ttft-ms", "5", "--token-ms", "1", "--reject-above", str(LIMIT)) as url:
        proc, out = _bench(url, "--order", "fixed")
    assert proc.returncode == 1, proc.stderr
    assert out["ok"] is False and out["complete"] is False
    cells = out["cells"]
    assert [(c["context"], c["concurrency"]) for c in cells] == [(64, 1), (64, 2), (2000, 1)]
    assert all(c["errors"] == 0 for c in cells[:2])
    failed = cells[2]
    assert (
        failed["errors"] == 1 and failed["ttft_ms_p50"] is None and failed["decode_tok_s_per_stream"] is None
    )
    (msg,) = failed["error_messages"]
    m = MESSAGE.search(msg["message"])
    assert m and int(m.group(1)) > LIMIT and msg["count"] == 1 and msg["message"].startswith("HTTP 400: ")
    assert MESSAGE.search(proc.stderr) and "--keep-going" in proc.stderr
    assert "ttft 0.0" not in proc.stderr and "every request failed" in proc.stderr
    assert MESSAGE.search(out["error"]["message"])


def test_a_shuffled_bench_stops_at_its_first_failed_cell_in_the_order_it_ran() -> None:
    with running_server("--ttft-ms", "5", "--token-ms", "1", "--reject-above", str(LIMIT)) as url:
        proc, out = _bench(url, "--seed", "7")
    assert proc.returncode == 1, proc.stderr
    cert = out["certificate"]
    assert cert["order"] == "shuffled" and cert["seed"] == 7
    pairs = [(64, 1), (64, 2), (2000, 1), (2000, 2), (3000, 1), (3000, 2)]
    random.Random(7).shuffle(pairs)  # the order is replayable from the recorded seed
    first_failed = next(i for i, (ctx, _) in enumerate(pairs) if ctx > LIMIT)
    assert [tuple(p) for p in cert["cells_in_order"]] == pairs
    ran = sorted(pairs[: first_failed + 1])
    assert [(c["context"], c["concurrency"]) for c in out["cells"]] == ran
    positions = {(c["context"], c["concurrency"]): c["certificate"]["position"] for c in out["cells"]}
    assert positions == {p: pairs.index(p) for p in ran}


def test_keep_going_runs_every_cell_and_still_exits_1() -> None:
    with running_server("--ttft-ms", "5", "--token-ms", "1", "--reject-above", str(LIMIT)) as url:
        proc, out = _bench(url, "--keep-going")
    assert proc.returncode == 1, proc.stderr
    assert out["complete"] is True and len(out["cells"]) == 6
    for c in out["cells"]:
        want = 0 if c["context"] == 64 else c["concurrency"]
        assert c["errors"] == want, c
        assert sum(m["count"] for m in c["error_messages"]) == want
        assert all(MESSAGE.search(m["message"]) for m in c["error_messages"])
        assert ("errors" in c["flags"]) == bool(want)


def test_a_context_above_the_listed_maximum_is_refused_unsent() -> None:
    with running_server("--ttft-ms", "5", "--token-ms", "1", "--max-model-len", "1024") as url:
        proc = _lair("bench", url, "--contexts", "512,1020", "--decode-tokens", "8", "--repeat", "1")
        served = _served(url)
    assert proc.returncode == 1
    assert "context 1,020 + 8 output tokens exceeds the server's maximum of 1,024 tokens" in proc.stderr
    assert "/v1/models max_model_len" in proc.stderr and "--contexts up to 1,016" in proc.stderr
    assert served["calibrated:requests_total"] == 0  # not even a probe


def test_api_key_on_the_command_line_is_refused() -> None:
    proc = _lair("bench", "http://127.0.0.1:9", "--api-key", "sk-visible-in-ps")
    assert proc.returncode == 1
    assert "--api-key-env" in proc.stderr and "--api-key-file" in proc.stderr
    assert "sk-visible-in-ps" not in proc.stderr + proc.stdout


def test_short_cells_sample_kv_use_while_requests_run() -> None:
    """A 4-stream cell of ~0.1 s: the server's KV gauge is 4/256 while the 4 requests run (its own
    formula: running / 256), 0 before and after. Sampling once a second never saw it."""
    with running_server("--ttft-ms", "60", "--token-ms", "2") as url:
        res = run_bench(url, BenchOptions(contexts=[64], concurrency=[4], decode_tokens=40, repeat=2))
    cell = res.cells[0]
    assert cell.errors == 0
    assert [m["kv_cache_usage_max"] for m in cell.engine_metrics] == [pytest.approx(4 / 256, abs=1e-4)] * 2
