"""SSH-only behaviour: one connection per node, host-key policies, unreachable nodes, fan-out."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from lair.errors import RunnerError
from lair.inventory import Node, load_inventory
from lair.runners import EnvVia, SshOptions, SshRunner, raise_for_errors, run_all, runner_for
from lair.testing.nodes import NetnsNodes

pytestmark = pytest.mark.integration


def cluster_nodes(nodes: NetnsNodes) -> list[Node]:
    return load_inventory().get(str(nodes.cluster_name)).nodes


def test_commands_share_one_connection_and_run_on_the_node(ssh_nodes: NetnsNodes) -> None:
    node = cluster_nodes(ssh_nodes)[0]

    async def main() -> tuple[set[str], str]:
        async with runner_for(node) as r:
            results = await asyncio.gather(*(r.run("echo $SSH_CONNECTION") for _ in range(12)))
            where = (await r.run("hostname; ip -4 -o addr show eth0")).stdout
        return {res.stdout for res in results}, where

    connections, where = asyncio.run(main())
    assert len(connections) == 1  # same client port: one TCP connection, many channels
    assert where.startswith(f"{node.name}\n") and f"inet {node.address}/24" in where


def test_all_nodes_in_parallel(ssh_nodes: NetnsNodes) -> None:
    runners = [runner_for(n) for n in cluster_nodes(ssh_nodes)]

    async def main() -> list[str]:
        await run_all(runners, lambda r: r.run("true"))  # connect first
        start = time.monotonic()
        outcomes = await run_all(runners, lambda r: r.run("sleep 1; hostname"))
        assert time.monotonic() - start < 1.8  # both at once, not 2 s
        for r in runners:
            await r.close()
        return [res.stdout.strip() for res in raise_for_errors(outcomes)]

    assert asyncio.run(main()) == [n.name for n in ssh_nodes.nodes]


def test_accept_new_records_then_pins_the_host_key(ssh_nodes: NetnsNodes, tmp_path: Path) -> None:
    node = cluster_nodes(ssh_nodes)[1]
    known = tmp_path / "known_hosts"
    opts = SshOptions(known_hosts="accept-new", known_hosts_file=str(known))

    async def hostname() -> str:
        async with SshRunner(node, opts) as r:
            return (await r.run("hostname")).stdout.strip()

    assert asyncio.run(hostname()) == node.name
    pinned = ssh_nodes.known_hosts_path.read_text().splitlines()[1].split()[:3]
    assert known.read_text().split() == pinned[:1] + pinned[1:3]  # the node's real key, recorded
    assert asyncio.run(hostname()) == node.name  # known now: checked, accepted
    other_key = ssh_nodes.known_hosts_path.read_text().splitlines()[0].split()[1:3]
    known.write_text(f"{node.address} {' '.join(other_key)}\n")  # someone else's key
    with pytest.raises(RunnerError, match="cannot connect"):
        asyncio.run(hostname())


def test_strict_refuses_an_unknown_host(ssh_nodes: NetnsNodes, tmp_path: Path) -> None:
    node = cluster_nodes(ssh_nodes)[0]
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")

    async def main() -> None:
        async with SshRunner(node, SshOptions(known_hosts="strict", known_hosts_file=str(empty))) as r:
            await r.run("true")

    with pytest.raises(RunnerError, match="cannot connect") as info:
        asyncio.run(main())
    assert info.value.host == node.name


def test_unreachable_node_fails_fast_with_a_runner_error(ssh_nodes: NetnsNodes) -> None:
    ghost = Node(name="ghost", address=f"{ssh_nodes.subnet}.250", rank=9, key=str(ssh_nodes.key_path))

    async def main() -> None:
        async with SshRunner(ghost, SshOptions(known_hosts="off", connect_timeout_s=2)) as r:
            await r.run("true")

    start = time.monotonic()
    with pytest.raises(RunnerError, match="cannot connect to root@") as info:
        asyncio.run(main())
    assert info.value.host == "ghost" and time.monotonic() - start < 10


@pytest.mark.parametrize("env_via", ["stdin", "file", "accept-env"])
def test_env_values_never_reach_a_command_line(ssh_nodes: NetnsNodes, env_via: EnvVia) -> None:
    node = cluster_nodes(ssh_nodes)[0]
    secret = "tok-'quoted' $dollar `tick` \\ end"
    env = {"LAIR_TOKEN": secret, "LAIR_PLAIN": "plain"}

    async def main() -> tuple[str, str, str]:
        async with SshRunner(node, SshOptions(known_hosts="off", env_via=env_via)) as r:
            seen = (
                await r.run('printf "%s|%s|" "$LAIR_TOKEN" "$LAIR_PLAIN"; cat', env=env, stdin=b"in")
            ).stdout
            cmdlines = (
                await r.run("cat /proc/$$/cmdline /proc/$PPID/cmdline | tr '\\0' ' '", env=env)
            ).stdout
            leftovers = (await r.run("ls -a ~ | grep -c '^.lair-env-' || true")).stdout.strip()
        return seen, cmdlines, leftovers

    seen, cmdlines, leftovers = asyncio.run(main())
    assert seen == f"{secret}|plain|in"  # the command's own stdin is intact
    assert "tok-" not in cmdlines and "plain" not in cmdlines and "@lair-pgid" in cmdlines
    assert leftovers == "0"  # the env file is deleted before the command runs


def test_invalid_env_names_are_refused(ssh_nodes: NetnsNodes) -> None:
    node = cluster_nodes(ssh_nodes)[0]

    async def main() -> None:
        async with runner_for(node) as r:
            await r.run("true", env={"BAD-NAME": "x"})

    with pytest.raises(RunnerError, match="invalid environment variable name"):
        asyncio.run(main())
