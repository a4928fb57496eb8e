"""End to end: a real llama.cpp server (the xllamacpp wheel) on a tiny generated model, benchmarked
through the real ``lair`` CLI, writing a complete report folder that ``lair report show`` renders."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from lair.report import REPORT_FILES
from lair.testing.tiny_model import make_tiny_model

pytestmark = pytest.mark.integration

SECRET = "sk-e2e-do-not-leak-4711"

RECIPE = """\
# tiny llama.cpp demo (comment kept in the report copy)
engine = "xllamacpp"
runtime = "native"
model = "{MODEL}"
name = "tiny-e2e"
entrypoint = ["python", "-m", "lair.engines.xllamacpp_server"]
args = ["--model", "{MODEL}", "--metrics"]

[env]
API_KEY = "{API_KEY}"

[placeholders.MODEL]
type = "path"
description = "the GGUF"

[placeholders.API_KEY]
type = "secret"
description = "bearer token"
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], deadline_s: float = 60.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"engine exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)  # poll interval, bounded by the deadline above
    raise TimeoutError(f"{url} not healthy in {deadline_s} s")


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path]]:
    root = tmp_path_factory.mktemp("engine")
    gguf = make_tiny_model(root / "model")
    port = _free_port()
    log = (root / "engine.log").open("wb")
    cmd = [sys.executable, "-m", "lair.engines.xllamacpp_server", "--model", str(gguf), "--port", str(port)]
    cmd += ["--metrics", "--parallel", "2", "--threads", "1", "--ctx", "2048"]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc)
        yield url, gguf, root / "model" / "hf" / "tokenizer.json"
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def _lair(*args: str, env_key: str | None = None) -> subprocess.CompletedProcess[str]:
    import os

    env = {**os.environ, **({"LAIR_API_KEY": env_key} if env_key else {})}
    return subprocess.run(
        [sys.executable, "-m", "lair", *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        check=False,
    )


def _check_aggregate_per_repeat(rows: list[dict[str, Any]], cells: list[dict[str, Any]]) -> None:
    """Each repeat's aggregate, recomputed by hand from the per-request rows: decode tokens of every
    stream over first-to-last content chunk, never above the sum of that repeat's per-stream rates."""
    for cell in cells:
        reps: dict[int, list[dict[str, Any]]] = {}
        for r in rows:
            if (r["context"], r["concurrency"]) == (cell["context"], cell["concurrency"]):
                reps.setdefault(r["repeat"], []).append(r)
        aggs = []
        for rep in reps.values():
            tokens = sum(r["completion_tokens"] - r["chunk_tokens"][0] for r in rep)
            span = (
                max(r["chunk_ms"][-1] + r["send_ms"] for r in rep)
                - min(r["chunk_ms"][0] + r["send_ms"] for r in rep)
            ) / 1000
            if span <= 0:  # every content chunk in one read: no decode span (the bench says None too)
                continue
            aggs.append(tokens / span)
            assert aggs[-1] <= sum(r["decode_tok_s"] or 0.0 for r in rep) * (1 + 1e-3)
        if cell["concurrency"] > 1 and aggs:
            assert cell["stats"]["decode_tok_s_aggregate"]["min"] == pytest.approx(min(aggs), rel=1e-3)
            assert cell["stats"]["decode_tok_s_aggregate"]["max"] == pytest.approx(max(aggs), rel=1e-3)


def test_bench_writes_a_complete_report_that_show_renders(
    engine: tuple[str, Path, Path], tmp_path: Path
) -> None:
    url, gguf, tokenizer = engine
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(RECIPE)
    args = ["bench", url, "--contexts", "64,256", "--concurrency", "1,2", "--decode-tokens", "16"]
    args += ["--repeat", "2", "--tokenizer", str(tokenizer), "--needle", "--recipe", str(recipe)]
    args += ["--set", f"MODEL={gguf}", "--set", f"API_KEY={SECRET}", "--read-interval-ms", "5", "--json"]
    bench = _lair(*args, env_key=SECRET)
    assert bench.returncode == 0, bench.stderr
    out = json.loads(bench.stdout)
    assert SECRET not in bench.stdout + bench.stderr
    cells = out["cells"]
    assert [(c["context"], c["concurrency"]) for c in cells] == [(64, 1), (64, 2), (256, 1), (256, 2)]
    for c in cells:
        assert c["errors"] == 0 and c["completion_tokens"] == 16 and c["output_length_ok"]
        # the aggregate can never exceed concurrency x the fastest stream of the cell
        fastest = c["stats"]["decode_tok_s_per_stream"]["max"]
        assert c["decode_tok_s_aggregate"] <= c["concurrency"] * fastest * (1 + 1e-9), c
        assert c["decode_tok_s_aggregate"] <= c["stats"]["decode_tok_s_aggregate"]["max"]
        # sized exactly through the server's /tokenize: within 1% (at least 1 token), plus the nonce's jitter
        assert c["prompt_tokens"] and abs(c["prompt_tokens"] - c["context"]) <= max(2, 0.02 * c["context"])
        assert c["ttft_ms_p50"] > 0 and c["prefill_tok_s"] > 0 and c["decode_tok_s_per_stream"] > 0
        assert not c["cache_hit"], c
    assert out["needle"]["prompt_tokens"] > 200 and out["needle"]["time_s"] > 0

    folder = Path(out["report"])
    assert folder.parent == tmp_path / "reports" and folder.name.endswith("_tiny-e2e")
    for name in (*REPORT_FILES, "tiny.recipe.toml"):
        assert (folder / name).is_file(), name
    copy = (folder / "tiny.recipe.toml").read_text()
    assert str(gguf) in copy and "# tiny llama.cpp demo" in copy
    assert not any(SECRET in p.read_text() for p in folder.rglob("*") if p.is_file())
    results = json.loads((folder / "results.json").read_text())
    assert results["schema_version"] == 1 and results["fingerprint"]["recipe_sha256"]
    assert results["bench"]["metrics_endpoint"] is True
    assert results["bench"]["options"]["read_interval_ms"] == 5.0
    rows = [json.loads(line) for line in (folder / "requests.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * (1 + 2 + 1 + 2) and all(len(r["chunk_ms"]) >= 1 for r in rows)
    _check_aggregate_per_repeat(rows, results["bench"]["cells"])
    assert results["bench"]["server"]["engine"] == "llama.cpp"
    assert results["bench"]["server"]["max_context"] == 1024  # --ctx 2048 over 2 slots, from /props
    # llama.cpp's /props says build b0-unknown: the version is the xllamacpp wheel's that served it
    assert results["fingerprint"]["engine"]["version"] == metadata.version("xllamacpp")
    assert "b0-unknown" not in (folder / "report.html").read_text()
    assert "<svg" in (folder / "report.html").read_text()

    show = _lair("report", "show", str(folder))
    assert show.returncode == 0, show.stderr
    assert "| 256 | 2 |" in show.stdout and "tiny" in show.stdout
    shown = json.loads(_lair("report", "show", str(folder), "--json").stdout)
    assert shown["bench"]["cells"] == results["bench"]["cells"]
    compared = json.loads(_lair("report", "compare", str(folder), str(folder), "--json").stdout)
    assert all(r["ttft_ms_p50"]["delta_pct"] == 0.0 for r in compared["rows"])


def test_a_context_above_the_slot_context_is_refused_with_the_engine_limit(
    engine: tuple[str, Path, Path],
) -> None:
    url, _, _ = engine
    bench = _lair("bench", url, "--contexts", "64,2000", "--decode-tokens", "16", "--repeat", "1")
    assert bench.returncode == 1
    assert "context 2,000 + 16 output tokens exceeds the server's maximum of 1,024 tokens" in bench.stderr
    assert "/props n_ctx (per slot)" in bench.stderr


def test_the_key_comes_from_a_file_or_a_named_variable(
    engine: tuple[str, Path, Path], tmp_path: Path
) -> None:
    url, _, tokenizer = engine
    key = tmp_path / "key"
    key.write_text(SECRET + "\n")
    key.chmod(0o600)
    common = ["bench", url, "--contexts", "64", "--decode-tokens", "4", "--repeat", "1", "--json"]
    by_file = _lair(*common, "--api-key-file", str(key), "--tokenizer", str(tokenizer))
    assert by_file.returncode == 0, by_file.stderr
    assert json.loads(by_file.stdout)["ok"] is True
    unset = _lair(*common, "--api-key-env", "LAIR_TEST_UNSET_KEY_VARIABLE")
    assert unset.returncode == 1 and "$LAIR_TEST_UNSET_KEY_VARIABLE is not set" in unset.stderr
