"""``lair doctor`` on two SSH nodes in network namespaces (each with its own dockerd), one fault
injected at a time and undone after: each is found, with its fix, and nothing else is; the clean rig
gives no findings; ``--json`` and ``--bundle`` (no secret in it); ``lair launch`` stops on a failed
fast check before it leases anything.

The faults are real where the machine allows it: an MTU set on the node's interface, an unreachable
route to the head, a process listening on the engine port, the node's dockerd stopped. A clock and a
GPU driver cannot be changed for one namespace, so the node's PATH has a stand-in ``date`` (5 minutes
ahead) or ``nvidia-smi`` (driver 535) in its own bin folder (``TestNode.bin_dir``).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from launch_helpers import lair, runs_dir, wait_for, write_recipe

from lair.inventory import add_cluster, parse_inventory
from lair.testing.nodes import SESSION_PATH, NetnsNodes, TestNode

pytestmark = [pytest.mark.integration]

SECRET = "sk-doctor-0123456789abcdef"
RECIPE = """
engine = "vllm"
runtime = "docker"
docker_image = "{image}"
model = "/models/tiny"
served_model_name = "tiny"
required_nodes = 2
tensor_parallel_size = 2
distributed_backend = "mp"
cluster = "{cluster}"
gpus = "{gpus}"
shm_size = "2g"
port = 8000
entrypoint = ["vllm", "serve", "/models/tiny"]

[env]
VLLM_API_KEY = "{{VLLM_API_KEY}}"
{env}

[placeholders.VLLM_API_KEY]
type = "secret"
description = "the API key the server asks for"

[meta.model_facts]
name = "tiny"
architecture = "llama"
n_layers = 2
hidden_size = 128
n_heads = {heads}
n_kv_heads = {kv_heads}
head_dim = 64
vocab_size = 415
intermediate_size = 256
total_params = 434560
active_params = 434560
weight_bytes = 869120
"""


def _recipe(tmp_path: Path, **kw: object) -> str:
    fields = {
        "image": "lair-test/vllm-cpu:doctor",
        "cluster": "test-docker-nodes",
        "gpus": "none",
        "env": "",
        "heads": 4,
        "kv_heads": 2,
        **kw,
    }
    return write_recipe(tmp_path / "recipe.toml", RECIPE.format(**fields))


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_API_KEY", SECRET)  # the recipe's secret comes from the environment


def doctor(*args: str) -> tuple[int, dict[str, object]]:
    res = lair("doctor", *args, "--json", timeout=120)
    assert res.returncode in (0, 3), res.stderr[-3000:]
    assert SECRET not in res.stdout + res.stderr
    return res.returncode, json.loads(res.stdout)


def findings(report: dict[str, object]) -> list[tuple[str, str | None, str]]:
    return [(f["check"], f["node"], f["severity"]) for f in report["findings"]]  # type: ignore[attr-defined, index]


def fix_of(report: dict[str, object], check: str) -> str:
    return next(f["fix"] for f in report["findings"] if f["check"] == check)  # type: ignore[attr-defined, index]


def what_of(report: dict[str, object], check: str) -> str:
    return next(f["what"] for f in report["findings"] if f["check"] == check)  # type: ignore[attr-defined, index]


def _ns(node: TestNode, *argv: str) -> None:
    subprocess.run(["ip", "-n", node.name, *argv], check=True, capture_output=True)


def test_a_clean_rig_gives_no_findings(ssh_nodes_docker: NetnsNodes, tmp_path: Path) -> None:
    rc, report = doctor(_recipe(tmp_path))
    assert (rc, report["findings"], report["ok"]) == (0, [], True)
    n0, n1 = ssh_nodes_docker.nodes
    nodes = report["nodes"]
    assert [(n["name"], n["address"], n["reachable"]) for n in nodes] == [  # type: ignore[attr-defined, index]
        (n0.name, n0.address, True),
        (n1.name, n1.address, True),
    ]
    for n, own in zip(nodes, ssh_nodes_docker.nodes, strict=True):  # type: ignore[call-overload]
        assert n["hostname"] == own.name and n["route"]["dev"] == "eth0"
        docker = next(r for r in n["runtimes"] if r["name"] == "docker")
        assert docker["running"] and docker["root_dir"] == f"/var/lib/{own.name}-docker"
        assert abs(n["clock_skew_s"]) < 2.0
        assert [i["mtu"] for i in n["interfaces"] if i["name"] == "eth0"] == [1500]
    assert nodes[1]["route"]["to"] == n0.address and nodes[0]["route"]["to"] == n1.address  # type: ignore[index]
    assert nodes[0]["busy_ports"] == []  # type: ignore[index]
    # without a recipe: the cluster's nodes, facts only
    rc, bare = doctor("--cluster", "test-docker-nodes")
    assert (rc, bare["findings"], bare["recipe"]) == (0, [], None)


@pytest.fixture
def head_port_taken(ssh_nodes_docker: NetnsNodes) -> Iterator[int]:
    """A process in the head's namespace listening on the engine's port, its command line carrying
    the secret (as a server started by hand would)."""
    head = ssh_nodes_docker.nodes[0]
    argv = ["nsenter", f"--net={head.netns}", sys.executable, "-m", "http.server", "8000"]
    proc = subprocess.Popen([*argv, "--bind", head.address, "--directory", f"/tmp/--api-key={SECRET}"])
    try:
        wait_for(lambda: _listening(head.address, 8000), timeout=20, what="the squatter")
        yield proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _listening(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1):
            return True
    except OSError:
        return False


def test_busy_engine_port(ssh_nodes_docker: NetnsNodes, head_port_taken: int, tmp_path: Path) -> None:
    rc, report = doctor(_recipe(tmp_path))
    head = ssh_nodes_docker.nodes[0]
    assert rc == 3 and findings(report) == [("port.busy", head.name, "error")]
    assert what_of(report, "port.busy").startswith(
        f"port 8000 on {head.name} is in use by pid {head_port_taken}"
    )
    assert "--api-key=***" in what_of(report, "port.busy")  # the holder's secret is blanked
    assert "another port" in fix_of(report, "port.busy")


def test_bundle_has_findings_versions_and_logs_and_no_secret(
    ssh_nodes_docker: NetnsNodes, head_port_taken: int, tmp_path: Path
) -> None:
    bundle = tmp_path / "doctor.tar.gz"
    res = lair("doctor", _recipe(tmp_path), "--bundle", str(bundle), timeout=120)
    assert res.returncode == 3, res.stderr
    with tarfile.open(bundle) as tar:
        files = {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers()}  # type: ignore[union-attr]
    names = [n.name for n in ssh_nodes_docker.nodes]
    assert {"findings.json", "findings.txt", "versions.json", "recipe.toml"} <= {
        k.removeprefix("lair-doctor/") for k in files
    }
    assert {f"lair-doctor/nodes/{n}.txt" for n in names} <= set(files)
    for text in files.values():
        assert SECRET not in text
    assert "--api-key=***" in files[f"lair-doctor/nodes/{names[0]}.txt"]  # the probe's own ss output
    assert json.loads(files["lair-doctor/findings.json"])["findings"][0]["check"] == "port.busy"
    versions = json.loads(files["lair-doctor/versions.json"])
    assert versions["nodes"][names[0]]["runtimes"]["docker"].startswith("20.10")
    assert files["lair-doctor/findings.txt"] == res.stdout  # what was printed is what is attached


def _mtu(nodes: NetnsNodes) -> Callable[[], None]:
    _ns(nodes.nodes[1], "link", "set", "eth0", "mtu", "1400")
    return lambda: _ns(nodes.nodes[1], "link", "set", "eth0", "mtu", "1500")


def _no_route(nodes: NetnsNodes) -> Callable[[], None]:
    head = f"{nodes.nodes[0].address}/32"
    _ns(nodes.nodes[1], "route", "add", "unreachable", head)
    return lambda: _ns(nodes.nodes[1], "route", "del", "unreachable", head)


def _clock(nodes: NetnsNodes) -> Callable[[], None]:
    fake = nodes.nodes[1].bin_dir / "date"
    fake.write_text(
        '#!/bin/sh\n[ "$1" = "+%s.%N" ] || exec /usr/bin/date "$@"\n'
        "python3 -c \"import time; print(f'{time.time() + 300:.6f}')\"\n"
    )
    fake.chmod(0o755)
    return fake.unlink


def _dockerd_down(nodes: NetnsNodes) -> Callable[[], None]:
    nodes.stop_dockerd(nodes.nodes[1])
    return lambda: nodes.start_dockerd(nodes.nodes[1])


FAULTS: dict[str, tuple[Callable[[NetnsNodes], Callable[[], None]], str, str]] = {
    # fault: (inject, check, a piece of its fix)
    "mtu": (_mtu, "net.mtu", "ip link set eth0 mtu 1500"),
    "no route to the head": (_no_route, "net.route", "ip route add"),
    "clock 5 minutes ahead": (_clock, "clock.skew", "NTP"),
    "dockerd down": (_dockerd_down, "runtime.down", "start Docker on the node"),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_node_fault_is_found_with_its_fix(fault: str, ssh_nodes_docker: NetnsNodes, tmp_path: Path) -> None:
    inject, check, fix = FAULTS[fault]
    recipe = _recipe(tmp_path)
    undo = inject(ssh_nodes_docker)
    try:
        rc, report = doctor(recipe)
    finally:
        undo()
    assert rc == 3, report
    assert findings(report) == [(check, ssh_nodes_docker.nodes[1].name, "error")]
    assert fix in fix_of(report, check)
    if check == "clock.skew":
        assert 299 < report["nodes"][1]["clock_skew_s"] < 302  # type: ignore[index]
    if check == "net.mtu":
        assert "MTU 1400 on eth0" in what_of(report, check)
    assert doctor(recipe)[1]["findings"] == []  # undone: clean again


def test_wrong_interface_name_in_the_recipe_env(ssh_nodes_docker: NetnsNodes, tmp_path: Path) -> None:
    rc, report = doctor(_recipe(tmp_path, env='GLOO_SOCKET_IFNAME = "eth9"'))
    assert rc == 3
    assert findings(report) == [("net.interface", n.name, "error") for n in ssh_nodes_docker.nodes]
    assert "no interface 'eth9' (it has lo, eth0)" in what_of(report, "net.interface")
    assert (
        fix_of(report, "net.interface")
        == "set GLOO_SOCKET_IFNAME=eth0 (the interface toward the head) or leave it unset"
    )
    # NCCL matches a prefix: "eth" names eth0
    assert doctor(_recipe(tmp_path, env='NCCL_SOCKET_IFNAME = "eth"'))[1]["findings"] == []


def test_heads_not_divisible_by_tp(ssh_nodes_docker: NetnsNodes, tmp_path: Path) -> None:
    rc, report = doctor(_recipe(tmp_path, heads=3, kv_heads=1))  # 1 KV head is copied to both ranks: fine
    assert rc == 3 and findings(report) == [("recipe.heads", None, "error")]
    assert (
        what_of(report, "recipe.heads") == "3 attention heads of tiny do not divide by tensor_parallel_size 2"
    )
    assert fix_of(report, "recipe.heads") == "use a TP that divides 3 (1, 3)"


SMI = "#!/bin/sh\necho '0, NVIDIA H100 80GB HBM3, 81559, 81000, 535.104.05, Enabled'\n"


def test_driver_below_the_images_floor(ssh_nodes_docker: NetnsNodes, lair_home: Path, tmp_path: Path) -> None:
    fields = ssh_nodes_docker.cluster_fields()
    fields["capabilities"]["gpus"] = True  # a GPU cluster, as far as planning goes
    cluster = parse_inventory({"clusters": {"test-doctor-gpu": fields}}, "test").get("test-doctor-gpu")
    add_cluster("test-doctor-gpu", cluster, replace=True, path=lair_home / "clusters.toml")
    fakes = [n.bin_dir / "nvidia-smi" for n in ssh_nodes_docker.nodes]
    for f in fakes:
        f.write_text(SMI)
        f.chmod(0o755)
    try:
        image = "vllm/vllm-openai:v0.10.1-cu128"  # CUDA 12.8: driver >= 570.26 (NVIDIA's table)
        rc, report = doctor(_recipe(tmp_path, image=image, cluster="test-doctor-gpu", gpus="all"))
    finally:
        for f in fakes:
            f.unlink()
    names = [n.name for n in ssh_nodes_docker.nodes]
    assert rc == 3
    # the stand-in GPUs come without the NVIDIA container toolkit: that is said too
    assert sorted(findings(report)) == sorted(
        [("driver.floor", n, "error") for n in names] + [("gpu.runtime", n, "error") for n in names]
    )
    assert what_of(report, "driver.floor") == (
        "NVIDIA driver 535.104.05 is below the image's floor >= 570.26 (CUDA 12.8, from the image tag)"
    )
    assert fix_of(report, "driver.floor").startswith("install driver >= 570.26")
    assert report["nodes"][0]["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3"  # type: ignore[index]


def _path_without(name: str, into: Path) -> str:
    """A folder with a link to every command on sshd's default PATH but ``name``: the PATH of a
    node where ``name`` is not installed."""
    into.mkdir()
    for d in SESSION_PATH.split(":"):
        for exe in sorted(Path(d).iterdir()) if Path(d).is_dir() else []:
            if exe.name != name and not (into / exe.name).exists() and exe.is_file():
                (into / exe.name).symlink_to(exe)
    return str(into)


def test_missing_container_runtime(lair_home: Path, tmp_path: Path) -> None:
    paths = {2: _path_without("docker", tmp_path / "no-docker")}
    with NetnsNodes(2, session_paths=paths) as nodes:
        nodes.write_cluster("test-doctor-nodocker", lair_home / "clusters.toml")
        recipe = _recipe(tmp_path, cluster="test-doctor-nodocker")
        rc, report = doctor(recipe)
        res = lair("launch", recipe, "--detach", timeout=120)
        node = nodes.nodes[1]
    assert rc == 3 and findings(report) == [("runtime.missing", node.name, "error")]
    assert (
        what_of(report, "runtime.missing")
        == "docker is not installed (the recipe runs in a docker container)"
    )
    assert "apt-get install docker.io" in fix_of(report, "runtime.missing")
    assert res.returncode == 1 and "[doctor check runtime.missing]" in res.stderr  # launch: before leases


def test_launch_stops_on_a_failed_fast_check_before_leasing(
    ssh_nodes_docker: NetnsNodes, lair_home: Path, tmp_path: Path
) -> None:
    recipe = _recipe(tmp_path)
    before = set(runs_dir(lair_home).glob("*")) if runs_dir(lair_home).exists() else set()
    undo = _mtu(ssh_nodes_docker)
    try:
        res = lair("launch", recipe, "--detach", timeout=120)
    finally:
        undo()
    n1 = ssh_nodes_docker.nodes[1]
    assert res.returncode == 1
    assert f"error: {n1.name}: MTU 1400 on eth0 (toward the head)" in res.stderr
    assert "[doctor check net.mtu]" in res.stderr and "hint: set one MTU on both ends" in res.stderr
    assert "nothing was leased" in res.stderr
    after = set(runs_dir(lair_home).glob("*")) if runs_dir(lair_home).exists() else set()
    assert after == before  # no run was made, so nothing was leased
    table = json.loads(lair("nodes", "--cluster", "test-docker-nodes", "--json", check=True).stdout)
    assert [r["lease"] for r in table["clusters"]["test-docker-nodes"]] == [None, None]
