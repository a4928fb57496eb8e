"""The tiny CPU engine for the evaluation tests: llama.cpp's server (xllamacpp) on the tiny random
model, on an ephemeral port, stopped at the end of the module."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from lair.testing.tiny_model import make_tiny_model


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _serve(root: Path, gguf: Path) -> Iterator[str]:
    port = _free_port()
    cmd = [sys.executable, "-m", "lair.engines.xllamacpp_server", "--model", str(gguf), "--port", str(port)]
    cmd += ["--parallel", "2", "--threads", "1", "--ctx", "2048", "--alias", "tiny"]
    with (root / "engine.log").open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, close_fds=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not _healthy(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"engine not healthy: {(root / 'engine.log').read_text()[-2000:]}")
            time.sleep(0.05)  # poll interval, bounded by the deadline above
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def tiny_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("tiny-engine")
    yield from _serve(root, make_tiny_model(root / "model"))


@pytest.fixture(scope="module")
def scripted_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The same engine on a tiny model scripted to answer "69" to every prompt (right for one
    lair_arith document in eight)."""
    root = tmp_path_factory.mktemp("scripted-engine")
    yield from _serve(root, make_tiny_model(root / "model", answer="69"))
