"""pytest fixtures for lair's own tests and for users testing recipes: load with
``pytest_plugins = ["lair.testing.fixtures"]`` in a ``conftest.py``.

Session-scoped (built once, torn down at the end):

- ``lair_home``: ``LAIR_HOME`` set to a temporary folder for the whole session.
- ``ssh_nodes``: 2 :class:`~lair.testing.nodes.NetnsNodes` (netns + sshd, root), written as the
  cluster ``test-nodes`` into ``lair_home``'s clusters file. Needs root.
- ``ssh_nodes_docker``: 2 nodes that each run their own dockerd (``DOCKER_HOST`` set in their SSH
  sessions), cluster ``test-docker-nodes``.
- ``engine_image``: a local image tag with python3 + xllamacpp + lair (``lair.testing.image_fixtures``).
- ``engine_image_on_nodes``: ``engine_image`` loaded into every ``ssh_nodes_docker`` node's dockerd.
- ``engine_image_in_podman``: ``engine_image`` loaded into this machine's podman storage.
- ``slurm_cluster``: a private Slurm cluster (munged, slurmctld, 2 slurmd) written as the lair
  cluster ``test-slurm`` (kind ``slurm``, container ``none``). Needs root and slurm-wlm + munge.
- ``slurm_netns_cluster``: the same with each slurmd in its own network-namespace node (its own
  address), cluster ``test-slurm-netns``.
- ``tiny_model``: path of a tiny random GGUF (its Hugging Face folder is beside it, ``hf/``).
- ``vllm_venv`` / ``sglang_venv``: the cached engine venvs (:mod:`lair.testing.engines`).

Module-scoped:

- ``browser``: headless Chromium (the system ``chromium``, ``LAIR_CHROMIUM`` to point elsewhere)
  driven by Playwright; nothing downloads a browser.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from lair.testing.nodes import NetnsNodes
from lair.testing.slurm_cluster import SlurmCluster

__all__ = [
    "CHROMIUM",
    "browser",
    "engine_image",
    "engine_image_in_podman",
    "engine_image_on_nodes",
    "lair_home",
    "sglang_venv",
    "slurm_cluster",
    "slurm_netns_cluster",
    "ssh_nodes",
    "ssh_nodes_docker",
    "tiny_model",
    "vllm_venv",
]

CHROMIUM = os.environ.get("LAIR_CHROMIUM", "/usr/bin/chromium")


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """Headless Chromium for one test module (``--no-sandbox``: the tests may run as root)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], headless=True)
        yield b
        b.close()


@pytest.fixture(scope="session")
def lair_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("lair-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAIR_HOME", str(home))
        yield home


@pytest.fixture(scope="session")
def ssh_nodes(lair_home: Path) -> Iterator[NetnsNodes]:
    with NetnsNodes(2) as nodes:
        nodes.write_cluster("test-nodes", lair_home / "clusters.toml")
        yield nodes


@pytest.fixture(scope="session")
def ssh_nodes_docker(lair_home: Path) -> Iterator[NetnsNodes]:
    with NetnsNodes(2, dockerd=True) as nodes:
        nodes.write_cluster("test-docker-nodes", lair_home / "clusters.toml")
        yield nodes


@pytest.fixture(scope="session")
def engine_image() -> Iterator[str]:
    from lair.testing.image_fixtures import ENGINE_PACKAGES, build_python_image

    tag = build_python_image(f"lair-test/engine:{os.getpid()}", packages=ENGINE_PACKAGES)
    yield tag
    subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)


@pytest.fixture(scope="session")
def engine_image_on_nodes(ssh_nodes_docker: NetnsNodes, engine_image: str) -> str:
    ssh_nodes_docker.load_image(engine_image)
    return engine_image


@pytest.fixture(scope="session")
def engine_image_in_podman(engine_image: str) -> Iterator[str]:
    from lair.testing.image_fixtures import load_into_podman

    yield load_into_podman(engine_image)
    subprocess.run(["podman", "rmi", "-f", engine_image], capture_output=True)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from lair.testing.tiny_model import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def vllm_venv() -> Path:
    from lair.testing.engines import vllm_venv

    return vllm_venv()


@pytest.fixture(scope="session")
def sglang_venv() -> Path:
    from lair.testing.engines import sglang_venv

    return sglang_venv()


@pytest.fixture(scope="session")
def slurm_cluster(lair_home: Path) -> Iterator[SlurmCluster]:
    import sys

    with SlurmCluster(nodes=2) as sc:
        sc.write_cluster("test-slurm", lair_home / "clusters.toml")
        print(f"slurm up in {sc.up_s:.2f}s", file=sys.stderr)
        yield sc
    print(f"slurm down in {sc.down_s:.2f}s", file=sys.stderr)


@pytest.fixture(scope="session")
def slurm_netns_cluster(lair_home: Path) -> Iterator[SlurmCluster]:
    with NetnsNodes(2) as nodes, SlurmCluster(netns=nodes) as sc:
        sc.write_cluster("test-slurm-netns", lair_home / "clusters.toml")
        yield sc
