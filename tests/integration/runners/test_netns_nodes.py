"""The throwaway SSH nodes themselves: own addresses and hostnames, node-to-node traffic over the
bridge, a Docker engine per node reached through SSH, and a teardown that leaves nothing behind."""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
from pathlib import Path

import pytest

from lair.inventory import load_inventory
from lair.runners import Runner, runner_for
from lair.testing.nodes import NetnsNodes

pytestmark = pytest.mark.integration


def node_runners(nodes: NetnsNodes) -> list[Runner]:
    return [runner_for(n) for n in load_inventory().get(str(nodes.cluster_name)).nodes]


async def poll_ok(r: Runner, script: str, deadline_s: float = 15.0) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if (await r.run(script, check=False, timeout=10)).returncode == 0:
            return True
        await asyncio.sleep(0.1)
    return False


def test_nodes_reach_each_other_over_the_bridge(ssh_nodes: NetnsNodes, tmp_path: Path) -> None:
    first, second = ssh_nodes.nodes
    fetch = (
        f"python3 -c \"import urllib.request as u; u.urlopen('http://{second.address}:8765/', timeout=2)\""
    )

    async def main() -> None:
        a, b = node_runners(ssh_nodes)
        assert [(await r.run("hostname")).stdout.strip() for r in (a, b)] == [first.name, second.name]
        server = await b.start(
            ["python3", "-m", "http.server", "8765", "--bind", second.address],
            log_path=str(tmp_path / "http.log"),
            cwd=str(tmp_path),
        )
        try:
            assert await poll_ok(a, fetch), await b.tail(server.log_path, 20)
        finally:
            await b.kill(server.pid)
            await a.close()
            await b.close()

    asyncio.run(main())


def test_each_node_has_its_own_docker_engine(
    ssh_nodes_docker: NetnsNodes, engine_image_on_nodes: str
) -> None:
    probe = (
        "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
        f"s.connect(('{ssh_nodes_docker.subnet}.1', 9)); print(s.getsockname()[0])"
    )

    async def main() -> list[tuple[str, str, str]]:
        out = []
        for node, r in zip(ssh_nodes_docker.nodes, node_runners(ssh_nodes_docker), strict=True):
            docker_host = (await r.run("echo $DOCKER_HOST")).stdout.strip()
            root = (await r.run(["docker", "info", "--format", "{{.DockerRootDir}}"])).stdout.strip()
            run = [
                "docker",
                "run",
                "--rm",
                "--network",
                "host",
                engine_image_on_nodes,
                "python3",
                "-c",
                probe,
            ]
            seen = (await r.run(run, timeout=120)).stdout.strip()
            await r.close()
            assert docker_host == node.docker_host
            out.append((node.name, root, seen))
        return out

    for (name, root, seen), node in zip(asyncio.run(main()), ssh_nodes_docker.nodes, strict=True):
        assert root == f"/var/lib/{name}-docker"
        assert seen == node.address  # --network host = the node's own network namespace


def test_teardown_leaves_nothing(tmp_path: Path) -> None:
    nodes = NetnsNodes(1, dockerd=True)
    with nodes:
        nodes.write_cluster("gone", tmp_path / "clusters.toml")
        node = nodes.nodes[0]
        argv = nodes.ssh_argv(node, "setsid", "sleep", "600", ">/dev/null", "2>&1", "</dev/null", "&")
        subprocess.run(argv, check=True, timeout=30)  # a stray process inside the node
    assert nodes.prefix not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert nodes.prefix not in links and nodes.bridge not in links
    rules = subprocess.run(["iptables", "-S", "FORWARD"], capture_output=True, text=True).stdout
    assert nodes.bridge not in rules
    assert nodes.prefix not in Path("/proc/mounts").read_text()
    assert not nodes.base.exists() and not Path(f"/var/lib/{node.name}-docker").exists()
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout.splitlines()
    # the node's docker data is deleted by a detached rm of its moved-away folder (``.NAME.trash``),
    # which may still be running: that one, and no other process of the nodes
    trash = re.compile(rf"/(var/lib|run)/\.{re.escape(nodes.prefix)}\d+-docker\.[0-9.]+\.trash$")
    left = [a for a in ps if (nodes.prefix in a and not trash.search(a)) or "sleep 600" in a]
    assert left == []
    deadline = time.monotonic() + 120
    while [t for top in ("/var/lib", "/run") for t in Path(top).glob(f".{nodes.prefix}*.trash")]:
        assert time.monotonic() < deadline, "the detached rm of the node's docker data did not finish"
        time.sleep(0.5)


def test_engine_image_serves_the_tiny_model_to_the_other_node(
    ssh_nodes_docker: NetnsNodes, engine_image_on_nodes: str, tiny_model: Path
) -> None:
    """The fixtures together: the engine in a container on node 1, reached from node 2."""
    head, _ = ssh_nodes_docker.nodes
    name = f"lair-test-engine-{head.name}"
    run = ["docker", "run", "-d", "--name", name, "--network", "host"]
    run += ["-v", f"{tiny_model.parent}:{tiny_model.parent}:ro", engine_image_on_nodes]
    run += ["python3", "-m", "lair.engines.xllamacpp_server", "--model", str(tiny_model)]
    run += ["--host", head.address, "--port", "18080", "--alias", "tiny", "--threads", "1"]
    health = f"python3 -c \"import urllib.request as u; u.urlopen('http://{head.address}:18080/health')\""

    async def main() -> None:
        a, b = node_runners(ssh_nodes_docker)
        await a.run(run, timeout=60)
        try:
            assert await poll_ok(b, health, deadline_s=60), (await a.run(["docker", "logs", name])).stderr
        finally:
            await a.run(["docker", "rm", "-f", name], timeout=60)
        left = await a.run(["docker", "ps", "-aq", "--filter", f"name={name}"])
        assert left.stdout == ""
        await a.close()
        await b.close()

    asyncio.run(main())
