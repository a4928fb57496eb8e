"""The quiet-machine certificate against a real engine: llama.cpp's server (the xllamacpp wheel) on the
tiny model, benchmarked by the real bench on a quiet machine and beside a busy loop on every core.
The quiet cell is not noisy; the loaded one is, with other processes' CPU above the limit; the
registry stores the loaded cell's row as reported-by-report with the reason; and ``lair reproduce``
and ``lair rebench`` beside the loops exit 9 and submit nothing.

The loops hold every core only while a test needs them and are always killed (``_hogs``); run these
tests under the machine's shared lock, as every test run here is."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from verify_helpers import TINY, lair, tiny_copy

from lair.bench import BenchOptions, BenchResult, EngineProcesses, run_bench
from lair.bench.definitions import OTHER_CPU_NOISY_FRACTION
from lair.report import write_run_report
from lair.testing.registry import free_port, serve_process
from lair.testing.tiny_model import make_tiny_model
from lair.testing.uploads import tar_gz

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

CPUS = len(os.sched_getaffinity(0))
BENCH = ["--bench", "--bench-contexts", "256", "--bench-decode-tokens", "64", "--bench-repeat", "3"]


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], deadline_s: float = 60.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        assert proc.poll() is None, f"engine exited with {proc.returncode}"
        with contextlib.suppress(OSError), urllib.request.urlopen(url + "/health", timeout=2) as r:
            if r.status == 200:
                return
        time.sleep(0.05)  # poll interval, bounded by the deadline above
    raise TimeoutError(f"{url} not healthy in {deadline_s} s")


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int, Path, Path]]:
    """(URL, the engine's PID, the tiny-cpu recipe copy, its MODEL_DIR)."""
    root = tmp_path_factory.mktemp("noise")
    model_dir = root / "model"
    gguf = make_tiny_model(model_dir)
    port = free_port()
    cmd = [sys.executable, "-m", "lair.engines.xllamacpp_server", "--model", str(gguf), "--alias", "tiny"]
    cmd += ["--port", str(port), "--metrics", "--parallel", "2", "--threads", "1", "--ctx", "2048"]
    with (root / "engine.log").open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_healthy(url, proc)
            yield url, proc.pid, tiny_copy(root / "recipe"), model_dir
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def _cpu_ticks(pid: int) -> int:
    rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(rest[11]) + int(rest[12])


@contextlib.contextmanager
def _hogs() -> Iterator[None]:
    """A ``while True: pass`` loop per core, running (each has used CPU) before the body starts, and
    killed whatever happens."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(CPUS)]
    try:
        deadline = time.monotonic() + 30
        while any(_cpu_ticks(p.pid) == 0 for p in procs):
            assert time.monotonic() < deadline, "the busy loops never ran"
            time.sleep(0.01)  # poll interval, bounded by the deadline above
        yield
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def _bench(engine: tuple[str, int, Path, Path]) -> BenchResult:
    url, pid, _, _ = engine
    opts = BenchOptions(
        contexts=[256], decode_tokens=64, repeat=3, order="fixed", telemetry="none",
        engine=EngineProcesses(pids=[pid]),
    )  # fmt: skip
    return run_bench(url, opts)


def _machine(result: BenchResult) -> dict[str, Any]:
    (cell,) = result.as_dict()["cells"]
    m: dict[str, Any] = cell["certificate"]["machine"]
    return m


def test_a_quiet_cell_is_not_noisy(engine: tuple[str, int, Path, Path]) -> None:
    result, tries = _bench(engine), 1
    while result.noisy_cells and tries < 3:  # someone else's job on the shared machine: measure again
        result, tries = _bench(engine), tries + 1
    m = _machine(result)
    assert not m["noisy"] and m["reasons"] == [], m
    assert "noisy" not in result.cells[0].flags
    cpu = m["cpu"]
    assert cpu["cpus"] == os.cpu_count() and cpu["other_cpu_fraction"] <= OTHER_CPU_NOISY_FRACTION
    assert cpu["engine_cpu_cores"] > 0 and m["engine_cpu"].startswith(f"process tree of {engine[1]}")
    assert set(m["repeat_spread"]) == {"prefill_tok_s", "decode_tok_s_aggregate"}
    assert m["limits"]["other_cpu_fraction"] == OTHER_CPU_NOISY_FRACTION


@pytest.fixture(scope="module")
def loaded(engine: tuple[str, int, Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report of a bench beside a busy loop on every core."""
    _, _, recipe, model_dir = engine
    with _hogs():
        result = _bench(engine)
    out = tmp_path_factory.mktemp("loaded") / "loaded"
    write_run_report(recipe, "loaded", result, values={"MODEL_DIR": str(model_dir)}, out_dir=out)
    return out


def test_a_cell_beside_busy_loops_is_noisy_with_its_figures(loaded: Path) -> None:
    (cell,) = json.loads((loaded / "results.json").read_text())["bench"]["cells"]
    m = cell["certificate"]["machine"]
    assert "noisy" in cell["flags"] and m["noisy"], m
    cpu = m["cpu"]
    # the loops ran on every core: other processes = busy - engine - client, far over the limit
    other = cpu["system_busy_cores"] - cpu["engine_cpu_cores"] - cpu["client_cpu_cores"]
    assert cpu["other_cpu_cores"] == pytest.approx(other, abs=1e-3)
    assert cpu["other_cpu_fraction"] > OTHER_CPU_NOISY_FRACTION
    assert m["reasons"][0] == (
        f"other processes used {cpu['other_cpu_cores']:.2f} of {cpu['cpus']} cores "
        f"({cpu['other_cpu_fraction']:.0%}, limit 25%)"
    )
    assert "NOISY: other processes used" in (loaded / "report.md").read_text()


def test_the_registry_stores_a_noisy_cell_as_reported_by_report_with_the_reason(
    site: Any, loaded: Path
) -> None:
    c = site[0]
    files = {p.name: p.read_bytes() for p in loaded.iterdir() if p.is_file()}
    r = c.post("/api/v1/reports", content=tar_gz(files), headers={"content-type": "application/gzip"})
    assert r.status_code == 201, r.text
    (row,) = r.json()["rows"]
    assert row["provenance"] == "reported-by-report"
    assert "cell ctx 256 x1: noisy: other processes used" in row["note"], row["note"]


def test_lair_bench_warns_of_a_noisy_cell(engine: tuple[str, int, Path, Path]) -> None:
    url, pid, _, _ = engine
    args = [
        "bench",
        url,
        "--contexts",
        "256",
        "--decode-tokens",
        "64",
        "--repeat",
        "3",
        "--telemetry",
        "none",
    ]
    with _hogs():
        res = lair(*args, "--engine-pid", str(pid))
    assert res.returncode == 0, res.stderr
    assert "warning: noisy cell ctx 256 x1: other processes used" in res.stderr
    assert "NOISY: other processes used" in res.stdout  # the certificate's machine column


# -- lair reproduce / lair rebench beside the loops ------------------------------------------------


@pytest.fixture
def registry(tmp_path: Path, lair_home: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """A lair serve and the environment of a signed-in uploader."""
    db = f"sqlite:///{tmp_path / 'registry.sqlite3'}"
    with serve_process(db, log=tmp_path / "serve.log") as base:
        res = lair("registry", "user", "add", "rig-owner", "--db", db, "--json")
        assert res.returncode == 0, res.stderr
        yield base, {"LAIR_REGISTRY": base, "LAIR_TOKEN": json.loads(res.stdout)["token"]}


def _own_copy(where: Path) -> Path:
    """The tiny-cpu example on a free port, as a recipe of its own (the example's port is shared)."""
    text = TINY.read_text()
    for old, new in (("port = 8091", f"port = {free_port()}"), ('slug = "tiny-cpu"', 'slug = "tiny-noise"')):
        assert old in text
        text = text.replace(old, new)
    recipe = where / "tiny-noise" / "recipe.toml"
    recipe.parent.mkdir(parents=True)
    recipe.write_text(text)
    return recipe


def _row(base: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{base}/api/v1/recipes/tiny-noise.json") as r:
        (row,) = json.loads(r.read())["measurements"]
    return dict(row)


def _published(recipe: Path, env: dict[str, str]) -> dict[str, Any]:
    """A row of ``recipe`` from a quiet run (a run the registry refuses as client-bound is run again)."""
    for _ in range(3):
        res = lair("launch", str(recipe), *BENCH, "--submit", "--json", env=env, timeout=240)
        if res.returncode == 0:
            return dict(json.loads(res.stdout))
        assert res.returncode == 3 and "client-bound" in res.stderr, res.stderr
    raise AssertionError("no run accepted in 3 tries")


def test_reproduce_and_rebench_beside_busy_loops_submit_nothing(
    registry: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    base, env = registry
    recipe = _own_copy(tmp_path)
    pushed = lair("push", str(recipe), "-y", "--json", env=env)
    assert pushed.returncode == 0, pushed.stderr
    _published(recipe, env)
    row = _row(base)
    assert row["replication"]["attempts"] == []
    with _hogs():
        rep = lair("reproduce", row["row_id"], "-y", "--dir", str(tmp_path / "rep"), "--submit", "--json",
                   env=env, timeout=240)  # fmt: skip
        rebench = lair("rebench", f"tiny-noise@{row['revision']}", "-y", "--dir", str(tmp_path / "reb"),
                       "--json", env=env, timeout=240)  # fmt: skip
    assert rep.returncode == 9, rep.stderr
    out = json.loads(rep.stdout)
    assert out["outcome"] == "noisy" and out["error"]["code"] == "bench.noisy" and out["submitted"] is None
    assert "ctx 256 x1: other processes used" in out["error"]["message"]
    assert rebench.returncode == 9, rebench.stderr
    (one,) = json.loads(rebench.stdout)["recipes"]
    assert one["exit"] == 9 and one["outcome"]["outcome"] == "noisy" and one["outcome"]["submitted"] is None
    assert _row(base)["replication"]["attempts"] == []  # nothing reached the registry
