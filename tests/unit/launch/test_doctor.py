"""``lair doctor``'s pure parts: the probe's output parsed, each check's rule on hand-made facts, the
driver comparison, redaction; and one real run on this machine (the local runner, no network)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from lair.fit.driver import driver_meets
from lair.launch.doctor import checks as C
from lair.launch.doctor.bundle import redact_text
from lair.launch.doctor.findings import Interface, NodeFacts, Route
from lair.launch.doctor.probe import ProbeSpec, parse, script
from lair.launch.doctor.recipe_checks import RecipeRig, shape_findings
from lair.recipe import load_text

PROBE_OUT = "\n".join(
    [
        "hostname\tgpu-a",
        "kernel\tLinux 6.1.0-18-amd64",
        "os\tDebian GNU/Linux 12 (bookworm)",
        "cpus\t64",
        "mem\t540000000000",
        "shm\t270000000000",
        "disk\t/root/.cache/huggingface\t1073741824\t/",
        "runtime\tdocker\t0\t27.1.1|io.containerd.runc.v2,nvidia,runc,|/var/lib/docker",
        "runtime\tpodman\tmissing",
        "cdi\t/etc/cdi/nvidia.yaml",
        "ctk\tyes",
        "gpu\t0, NVIDIA H100 80GB HBM3, 81559, 80000, 550.54.15, Enabled",
        "gpu\t1, NVIDIA H100 80GB HBM3, 81559, 20000, 550.54.15, Disabled",
        "link\tlo\t65536\t1",
        "link\teth0\t9000\t1",
        "link\tib0\t2044\t0",
        "addr\tlo\t127.0.0.1/8",
        "addr\teth0\t10.0.0.12/24",
        "route\t0\t10.0.0.11 dev eth0 src 10.0.0.12 uid 0",
        "busy\t8000\t4242\t4240\tpython3 -m http.server 8000 ",
    ]
)


def _facts(**kw: object) -> NodeFacts:
    return parse(PROBE_OUT, name="a", address="10.0.0.12", rank=1, head="10.0.0.11").model_copy(update=kw)


def test_the_probe_output_parses_into_facts() -> None:
    f = _facts()
    assert (f.hostname, f.os, f.kernel, f.cpus, f.memory_bytes) == (
        "gpu-a",
        "Debian GNU/Linux 12 (bookworm)",
        "Linux 6.1.0-18-amd64",
        64,
        540000000000,
    )
    docker, podman = f.runtimes
    assert (docker.running, docker.version, docker.runtimes, docker.root_dir) == (
        True,
        "27.1.1",
        ["io.containerd.runc.v2", "nvidia", "runc"],
        "/var/lib/docker",
    )
    assert (podman.installed, podman.running) == (False, False)
    assert [(g.index, g.memory_free_mib, g.driver, g.persistence) for g in f.gpus] == [
        (0, 80000, "550.54.15", "Enabled"),
        (1, 20000, "550.54.15", "Disabled"),
    ]
    assert [(i.name, i.mtu, i.up, i.addresses) for i in f.interfaces] == [
        ("lo", 65536, True, ["127.0.0.1/8"]),
        ("eth0", 9000, True, ["10.0.0.12/24"]),
        ("ib0", 2044, False, []),
    ]
    assert f.route == Route(to="10.0.0.11", dev="eth0", src="10.0.0.12")
    assert [(b.port, b.pid, b.pgid, b.command) for b in f.busy_ports] == [
        (8000, "4242", "4240", "python3 -m http.server 8000")
    ]
    assert f.cdi_specs == ["/etc/cdi/nvidia.yaml"] and f.nvidia_ctk


def test_no_route_and_a_runtime_that_does_not_answer() -> None:
    text = (
        "route\t2\tRTNETLINK answers: No route to host\n"
        "runtime\tdocker\t1\tCannot connect to the Docker daemon at unix:///x.sock. "
        "Is the docker daemon running?"
    )
    f = parse(text, name="b", address="10.0.0.13", rank=1, head="10.0.0.11")
    assert f.route == Route(to="10.0.0.11", error="RTNETLINK answers: No route to host")
    (found,) = C.runtime_findings(f, "docker")
    assert found.check == "runtime.down" and found.what.startswith(
        "the docker engine is not running: Cannot connect to the Docker daemon at unix:///x.sock"
    )


def test_gloo_names_an_interface_exactly_and_nccl_by_prefix() -> None:
    f = _facts()
    assert C.interface_findings(f, {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "eth"}) == []
    assert C.interface_findings(f, {"NCCL_SOCKET_IFNAME": "^docker,lo"}) == []  # an exclusion list
    (gloo,) = C.interface_findings(f, {"GLOO_SOCKET_IFNAME": "eth"})  # gloo: no prefix match
    assert gloo.fix == "set GLOO_SOCKET_IFNAME=eth0 (the interface toward the head) or leave it unset"
    (nccl,) = C.interface_findings(f, {"NCCL_SOCKET_IFNAME": "=eth"})  # "=": exact for NCCL too
    assert nccl.check == "net.interface" and "no interface 'eth'" in nccl.what


def test_mtu_compares_the_interface_toward_the_head_with_the_heads() -> None:
    worker = _facts()  # eth0 at 9000
    head = NodeFacts(
        name="h",
        address="10.0.0.11",
        rank=0,
        reachable=True,
        interfaces=[Interface(name="ens1", mtu=1500, up=True, addresses=["10.0.0.11/24"])],
        route=Route(to="10.0.0.12", dev="ens1"),
    )
    (mtu,) = C.network_findings([head, worker], "10.0.0.11")
    assert mtu.check == "net.mtu" and mtu.node == "a"
    assert mtu.what.startswith("MTU 9000 on eth0 (toward the head) but 1500 on the head's ens1")
    assert mtu.fix.startswith("set one MTU on both ends: `ip link set eth0 mtu 1500`")


@pytest.mark.parametrize(
    ("skew", "unc", "severity"),
    [(1.9, 0.0, None), (2.5, 0.2, "warning"), (2.5, 0.6, None), (-31.0, 0.5, "error"), (300.0, 0.1, "error")],
)
def test_clock_thresholds_allow_for_the_round_trip(skew: float, unc: float, severity: str | None) -> None:
    found = C.clock_findings(_facts(clock_skew_s=skew, clock_uncertainty_s=unc))
    assert [f.severity for f in found] == ([severity] if severity else [])


def test_persistence_and_gpu_runtime() -> None:
    f = _facts()
    (pers,) = C.gpu_runtime_findings(f, "docker", wants_gpus=True)  # nvidia runtime and a CDI spec: fine
    assert pers.check == "gpu.persistence" and "GPU 1" in pers.what
    bare = f.model_copy(
        update={"cdi_specs": [], "runtimes": [f.runtimes[0].model_copy(update={"runtimes": ["runc"]})]}
    )
    assert [x.check for x in C.gpu_runtime_findings(bare, "docker", wants_gpus=True)] == [
        "gpu.runtime",
        "gpu.persistence",
    ]


def _rig(text: str) -> RecipeRig:
    from lair.fit.recipe_facts import recipe_facts

    r = load_text(text)
    return RecipeRig(r, recipe_facts(r), wants_gpus=False)


FACTS = """
[meta.model_facts]
name = "m"
architecture = "llama"
n_layers = {layers}
hidden_size = 4096
n_heads = {heads}
n_kv_heads = {kv}
head_dim = 128
vocab_size = 32000
intermediate_size = 11008
total_params = 7000000000
active_params = 7000000000
weight_bytes = 14000000000
"""


@pytest.mark.parametrize(
    ("tp", "pp", "nodes", "heads", "kv", "layers", "checks"),
    [
        (2, 1, 2, 32, 8, 32, []),
        (8, 1, 1, 32, 4, 32, []),  # 4 KV heads copied over 8 ranks: vLLM replicates them
        (3, 1, 3, 32, 8, 32, ["recipe.heads", "recipe.heads"]),  # 32 % 3, and 8 KV heads vs 3
        (2, 4, 2, 40, 8, 2, ["recipe.heads"]),  # PP 4 > 2 layers
    ],
)
def test_shape_rules(
    tp: int, pp: int, nodes: int, heads: int, kv: int, layers: int, checks: list[str]
) -> None:
    head = (
        'engine = "vllm"\nruntime = "native"\nentrypoint = ["serve"]\nmodel = "m"\n'
        'distributed_backend = "mp"\n'
        f"required_nodes = {nodes}\ntensor_parallel_size = {tp}\npipeline_parallel_size = {pp}\n"
    )
    assert [
        f.check for f in shape_findings(_rig(head + FACTS.format(heads=heads, kv=kv, layers=layers)))
    ] == checks


def test_more_ranks_per_node_than_gpus() -> None:
    from lair.launch.doctor.recipe_checks import recipe_findings

    text = (
        'engine = "vllm"\nruntime = "native"\nentrypoint = ["serve"]\nmodel = "m"\ntensor_parallel_size = 4\n'
    )
    rig = RecipeRig(load_text(text + FACTS.format(heads=32, kv=8, layers=32)), None, wants_gpus=True)
    node = _facts()  # two GPUs
    found = recipe_findings(rig, [node], container=False)
    assert [(f.check, f.node) for f in found] == [("recipe.parallel", "a"), ("gpu.memory", "a")]
    assert found[0].what == "the recipe puts 4 ranks (GPUs) on each node; this node has 2 GPUs"
    # GPU 1: 81559 - 20000 = 61559 MiB used (60.1 GiB of 79.6); GPU 0's 1559 MiB is under a tenth
    assert found[1].what == "GPU 1 (NVIDIA H100 80GB HBM3) has 60.1 GiB of 79.6 GiB in use already"


@pytest.mark.parametrize(
    ("driver", "floor", "ok"),
    [("570.124.06", "570.26", True), ("570.9", "570.26", False), ("535.104.05", "570.26", False),
     ("580.65.06", "580.65.06", True), ("575", "570.26", True)],
)  # fmt: skip
def test_driver_versions_compare_as_numbers(driver: str, floor: str, ok: bool) -> None:
    assert driver_meets(driver, floor) is ok


def test_redaction_of_given_values_and_credential_shapes() -> None:
    """The run's given values as ``***``; every shape the registry's scanner knows (one function:
    tests/unit/test_redaction.py has them all) by its kind."""
    hf = "hf_" + "AbCdEfGhIjKlMnOp" * 2 + "Qr"
    text = (
        f"HF_TOKEN={hf} API_KEY: s3cr3tvalue --api-key=Zq8xLm2Pv9Rt4Wn7 "
        "Authorization: Bearer abc.def.ghi.jkl.mno "
        "xyz-given-value password=hunter22 keep this"
    )
    out = redact_text(text, ["xyz-given-value"])
    assert out == (
        "HF_TOKEN=[REDACTED:Hugging Face Token] API_KEY: [REDACTED:secret assignment] "
        "--api-key=[REDACTED:secret assignment] Authorization: Bearer [REDACTED:Bearer credential] "
        "*** password=[REDACTED:secret assignment] keep this"
    )


def test_the_script_quotes_paths_and_reads_home_on_the_node() -> None:
    s = script(ProbeSpec(head="10.0.0.1", disk_paths=["~/.cache/hf", "/data/it's"], ports=[8000]))
    assert "\"$HOME\"/.cache/hf '/data/it'\"'\"'s'" in s and "ip route get 10.0.0.1" in s
    assert "sport = :$p" in s and "for p in 8000;" in s


def test_doctor_of_this_machine_and_its_bundle(tmp_path: Path, lair_home: Path) -> None:
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "lair",
            "doctor",
            "--nodes",
            "127.0.0.1",
            "--json",
            "--bundle",
            str(tmp_path / "b.tgz"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode in (0, 3), res.stderr
    report = json.loads(res.stdout)
    (node,) = report["nodes"]
    assert node["reachable"] and node["kernel"].startswith("Linux ")
    assert node["hostname"] == subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip()
    assert abs(node["clock_skew_s"]) < 1.0  # the same clock
    assert res.returncode == (0 if report["ok"] else 3)
    with tarfile.open(tmp_path / "b.tgz") as tar:
        names = sorted(m.name for m in tar.getmembers())
    assert names[:3] == [
        "lair-doctor/findings.json",
        "lair-doctor/findings.txt",
        "lair-doctor/nodes/127.0.0.1.txt",
    ]


_FILL_MIB = 100


def _probed_twice(folder: Path) -> tuple[NodeFacts, NodeFacts]:
    """The probe script's facts of ``folder`` run on this machine in a mount namespace of its own where
    ``folder`` is a tmpfs of 2,100 MiB (2.05 GiB): empty, then after :data:`_FILL_MIB` MiB are written
    to it (1.95 GiB left)."""
    probe = script(ProbeSpec(disk_paths=[str(folder)], runtimes=(), gpus=False, clock=False))
    inner = (
        'mount -t tmpfs -o size=2100m tmpfs "$1" && sh -c "$2" && echo ===== && '
        f'dd if=/dev/zero of="$1/fill" bs=1M count={_FILL_MIB} status=none && sh -c "$2"'
    )
    cmd = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", inner, "sh", str(folder), probe]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if "Operation not permitted" in res.stderr and "unshare" in res.stderr:
        pytest.skip(f"no user and mount namespaces here: {res.stderr.strip()}")
    assert res.returncode == 0, res.stderr
    empty, filled = res.stdout.split("=====\n")
    return tuple(parse(out, name="here", address="127.0.0.1", rank=0) for out in (empty, filled))  # type: ignore[return-value]


def test_disk_free_warns_on_a_small_filesystem_and_errs_once_it_is_filled(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    folder.mkdir()
    empty, filled = _probed_twice(folder)
    assert [d.free_bytes for d in empty.disks] == [2100 * 2**20]
    assert [d.free_bytes for d in filled.disks] == [(2100 - _FILL_MIB) * 2**20]
    (warn,) = C.disk_findings(empty)
    assert (warn.check, warn.severity, warn.node) == ("disk.free", "warning", "here")
    assert warn.what == f"2.1 GiB free for {folder} (on {folder})"
    assert warn.fix == f"free space on {folder} or point the cache elsewhere"
    (err,) = C.disk_findings(filled)
    assert (err.check, err.severity) == ("disk.free", "error")
    assert err.what == f"2.0 GiB free for {folder} (on {folder})"  # 1.95 GiB, under the 2 GiB floor


def test_disk_free_says_nothing_of_a_folder_with_room(tmp_path: Path) -> None:
    """The temp folder's own filesystem, its free space read with statvfs: no finding above 20 GiB."""
    facts = parse(
        subprocess.run(
            ["sh", "-c", script(ProbeSpec(disk_paths=[str(tmp_path)], runtimes=(), gpus=False, clock=False))],
            capture_output=True, text=True, check=True, timeout=60,
        ).stdout,
        name="here", address="127.0.0.1", rank=0,
    )  # fmt: skip
    st = os.statvfs(tmp_path)
    free = st.f_bavail * st.f_frsize
    (disk,) = facts.disks
    assert abs(disk.free_bytes - free) < 64 * 2**20  # df's KiB and what others wrote meanwhile
    if free < C.DISK_WARN + 64 * 2**20:
        pytest.skip(f"{tmp_path} has only {free / 2**30:.1f} GiB free: no folder with room here")
    assert C.disk_findings(facts) == []
