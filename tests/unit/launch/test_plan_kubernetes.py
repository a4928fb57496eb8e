"""``lair plan --target kubernetes``: manifests checked against the Kubernetes API schemas offline
(kubernetes-validate, two API versions), against hand-written expectations, and for secrets."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from lair.cli import main

VERSIONS = ("1.29.0", "1.33.0")
HF_TOKEN = "hf_k8s-test-5ecret-9f2c"
API_KEY = "sk-k8s-test-4a7e-value"

RECIPE = """
engine = "vllm"
docker_image = "vllm/vllm-openai:v0.11.0"
model = "/models/qwen"
served_model_name = "qwen"
required_nodes = {nodes}
tensor_parallel_size = 2
distributed_backend = "mp"
shm_size = "2g"
gpus = "all"
memory_limit = "64g"
cpus = 8
ipc = "host"
port = 8000
health_path = "/health"
ready_timeout_s = 600
args = ["--api-key", "{{API_KEY}}"]
before_serve = ["echo staging $LAIR_NODE_RANK", {{ script = "make_tiny_model", args = ["/models/tiny"] }}]
after_stop = ["echo done"]
env = {{ HF_TOKEN = "{{HF_TOKEN}}", VLLM_LOGGING_LEVEL = "INFO", API_KEY = "{{API_KEY}}" }}

[[extra_mounts]]
host = "/srv/models"
container = "/models"
read_only = true

[[extra_mounts]]
host = "/srv/cache"
container = "/root/.cache"

[placeholders.HF_TOKEN]
type = "secret"
[placeholders.API_KEY]
type = "secret"

[meta]
slug = "qwen-tp2"
[meta.hardware]
gpu_count = {gpus}
"""


@pytest.fixture(autouse=True)
def _secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", HF_TOKEN)
    monkeypatch.setenv("API_KEY", API_KEY)


def _recipe(tmp_path: Path, nodes: int = 2) -> Path:
    p = tmp_path / "qwen" / "recipe.toml"
    p.parent.mkdir(exist_ok=True)
    p.write_text(RECIPE.format(nodes=nodes, gpus=2 * nodes))
    return p


def _render(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str, nodes: int = 2) -> Any:
    out = tmp_path / "manifests"
    assert main(["plan", str(_recipe(tmp_path, nodes)), "--target", "kubernetes", "-o", str(out), *args]) == 0
    files = sorted(out.iterdir())
    docs = [yaml.safe_load(f.read_text()) for f in files]
    return files, docs, capsys.readouterr()


def _validate(doc: dict[str, Any], version: str) -> None:
    """Strict schema check; a LeaderWorkerSet (a CRD) is checked through its two pod templates."""
    if doc["kind"] != "LeaderWorkerSet":
        kubernetes_validate.validate(doc, version, strict=True)
        return
    for t in ("leaderTemplate", "workerTemplate"):
        template = doc["spec"]["leaderWorkerTemplate"][t]
        pt = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": t.lower()},
            "template": template,
        }
        kubernetes_validate.validate(pt, version, strict=True)


def _by_name(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in docs}


@pytest.mark.parametrize("workload", ["statefulset", "leaderworkerset"])
def test_manifests_validate_on_two_api_versions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], workload: str
) -> None:
    _, docs, _ = _render(tmp_path, capsys, "--workload", workload)
    kinds = sorted(d["kind"] for d in docs)
    if workload == "statefulset":
        assert kinds == ["ConfigMap", "Service", "Service", "StatefulSet", "StatefulSet"]
    else:
        assert kinds == ["ConfigMap", "LeaderWorkerSet", "Service"]
    for version in VERSIONS:
        for doc in docs:
            _validate(doc, version)
    # the validator does reject what the API would: an unknown field, a string where an int goes
    bad = json.loads(json.dumps(next(d for d in docs if d["kind"] != "ConfigMap")))
    spec = bad["spec"]
    spec["replicaz" if "replicas" in spec else "portz"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(bad, VERSIONS[0])


def test_secret_values_never_appear_only_secret_refs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for workload in ("statefulset", "leaderworkerset"):
        files, _, cap = _render(tmp_path, capsys, "--workload", workload)
        text = "".join(f.read_text() for f in files) + cap.out + cap.err
        assert HF_TOKEN not in text and API_KEY not in text
        assert (
            "kubectl create secret generic qwen-tp2-env"
            " --from-literal=API_KEY=... --from-literal=HF_TOKEN=... --from-literal=VLLM_API_KEY=..."
            in cap.err
        )
    assert main(["plan", str(_recipe(tmp_path)), "--target", "kubernetes", "--json"]) == 0
    printed = capsys.readouterr()
    assert HF_TOKEN not in printed.out + printed.err and API_KEY not in printed.out + printed.err
    head = _by_name(json.loads(printed.out))["StatefulSet/qwen-tp2-head"]
    c = head["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in c["env"]}
    assert env["HF_TOKEN"] == {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "qwen-tp2-env", "key": "HF_TOKEN"}},
    }
    assert env["VLLM_LOGGING_LEVEL"] == {"name": "VLLM_LOGGING_LEVEL", "value": "INFO"}
    # --api-key {API_KEY} leaves the command line: vLLM reads the key from VLLM_API_KEY (Secret-backed)
    assert "--api-key" not in c["command"]
    assert env["VLLM_API_KEY"]["valueFrom"] == {
        "secretKeyRef": {"name": "qwen-tp2-env", "key": "VLLM_API_KEY"}
    }


def test_statefulset_fields_match_hand_written_expectations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, docs, cap = _render(tmp_path, capsys)
    objs = _by_name(docs)
    assert "left out after_stop hooks (1)" in cap.err
    headless = objs["Service/qwen-tp2"]["spec"]
    assert headless["clusterIP"] == "None" and headless["publishNotReadyAddresses"] is True
    assert headless["selector"] == {"app.kubernetes.io/name": "qwen-tp2"}
    assert {p["port"] for p in headless["ports"]} == {8000, 29501}
    assert objs["Service/qwen-tp2-api"]["spec"]["selector"] == {
        "app.kubernetes.io/name": "qwen-tp2",
        "lair.role": "head",
    }
    head, worker = objs["StatefulSet/qwen-tp2-head"]["spec"], objs["StatefulSet/qwen-tp2-worker"]["spec"]
    assert (head["replicas"], worker["replicas"]) == (1, 1)
    assert head["serviceName"] == worker["serviceName"] == "qwen-tp2"
    pod = head["template"]["spec"]
    c = pod["containers"][0]
    assert c["image"] == "vllm/vllm-openai:v0.11.0"
    # 64g memory_limit = 65536 MiB; gpu_count 4 over 2 nodes = 2 per pod; cpus 8
    limits = {"nvidia.com/gpu": "2", "memory": "65536Mi", "cpu": "8"}
    assert c["resources"] == {"limits": limits, "requests": limits}
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": 8000}
    assert c["startupProbe"]["failureThreshold"] * c["startupProbe"]["periodSeconds"] == 600
    assert pod["hostIPC"] is True
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["m0-models"] == {"name": "m0-models", "hostPath": {"path": "/srv/models"}}
    assert vols["shm"] == {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "2048Mi"}}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts["/models"]["readOnly"] is True and "readOnly" not in mounts["/root/.cache"]
    assert mounts["/dev/shm"]["name"] == "shm"
    cmd = " ".join(c["command"])
    assert "--nnodes 2 --node-rank 0 --master-addr qwen-tp2-head-0.qwen-tp2 --master-port 29501" in cmd
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["LAIR_MASTER_ADDR"] == "qwen-tp2-head-0.qwen-tp2" and env["LAIR_NODE_RANK"] == "0"
    init = pod["initContainers"]
    assert [i["command"] for i in init] == [
        ["sh", "/lair/hooks/0-inline.sh"],
        ["/lair/hooks/1-make_tiny_model.sh", "/models/tiny"],
    ]
    assert "resources" not in init[0] and "ports" not in worker["template"]["spec"]["containers"][0]
    hooks = objs["ConfigMap/qwen-tp2-hooks"]["data"]
    assert hooks["0-inline.sh"] == "echo staging $LAIR_NODE_RANK"
    assert hooks["1-make_tiny_model.sh"].startswith("#!/bin/sh")


def _kubelet_expand(arg: str, env: dict[str, str]) -> str:
    """What the kubelet does to a command: $(NAME) from the container env, $$ to $."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: "$" if m[0] == "$$" else env[m[1]], arg)


def test_worker_pod_script_execs_its_ranks_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The worker template's script, run with a shell as its pod would run it, execs rank 1's command."""
    _, docs, _ = _render(tmp_path, capsys, "--name", "qw")
    c = _by_name(docs)["StatefulSet/qw-worker"]["spec"]["template"]["spec"]["containers"][0]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").write_text('#!/bin/sh\necho "rank=$LAIR_NODE_RANK args=$*"\n')
    (bin_dir / "vllm").chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "API_KEY": "k1", "HOSTNAME": "qw-worker-0"}
    argv = [_kubelet_expand(a, env) for a in c["command"]]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("rank=1 args=serve /models/qwen --host 0.0.0.0 ")  # no --api-key: env
    assert "--node-rank 1 --master-addr qw-head-0.qw --master-port 29501 --headless" in out.stdout
    env["HOSTNAME"] = "qw-worker-1"  # a pod beyond the plan's ranks refuses to start
    bad = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=10)
    assert bad.returncode == 1 and "no rank 2 in this plan" in bad.stderr


def test_leaderworkerset_wiring(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, docs, _ = _render(tmp_path, capsys, "--workload", "leaderworkerset")
    lws = _by_name(docs)["LeaderWorkerSet/qwen-tp2"]
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    t = lws["spec"]["leaderWorkerTemplate"]
    assert t["size"] == 2
    leader = t["leaderTemplate"]["spec"]["containers"][0]
    assert "--master-addr qwen-tp2-0.qwen-tp2" in " ".join(leader["command"]) and "readinessProbe" in leader
    worker = t["workerTemplate"]["spec"]["containers"][0]
    rank = next(e for e in worker["env"] if e["name"] == "LAIR_NODE_RANK")
    assert (
        rank["valueFrom"]["fieldRef"]["fieldPath"]
        == "metadata.labels['leaderworkerset.sigs.k8s.io/worker-index']"
    )
    assert "readinessProbe" not in worker


def test_one_node_pvc_mounts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, docs, _ = _render(tmp_path, capsys, "--mounts", "pvc", "--pvc", "/models=weights", nodes=1)
    objs = _by_name(docs)
    assert "StatefulSet/qwen-tp2-worker" not in objs and "Service/qwen-tp2" in objs
    pod = objs["StatefulSet/qwen-tp2-head"]["spec"]["template"]["spec"]
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["m0-models"]["persistentVolumeClaim"] == {"claimName": "weights", "readOnly": True}
    assert vols["m1-root-cache"]["persistentVolumeClaim"] == {"claimName": "qwen-tp2-m1-root-cache"}
    for version in VERSIONS:
        for doc in docs:
            _validate(doc, version)


def test_what_a_pod_cannot_express_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tiny = Path(__file__).resolve().parents[3] / "examples" / "tiny-cpu" / "recipe.toml"
    assert main(["plan", str(tiny), "--target", "kubernetes"]) == 1
    assert "a native recipe has no image" in capsys.readouterr().err
    manifest = tmp_path / "manifest.toml"
    manifest.write_text('engine = "vllm"\ndocker_image = "v:1"\nextra_mounts_manifest = "/tmp/m.txt"\n')
    assert main(["plan", str(manifest), "--target", "kubernetes"]) == 1
    assert "extra_mounts_manifest" in capsys.readouterr().err


def test_what_a_pod_leaves_out_is_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = RECIPE.format(nodes=1, gpus=2).replace(
        'ipc = "host"',
        'ipc = "host"\npid = "host"\ncap_add = ["SYS_NICE"]\ndevices = ["/dev/dri/card0"]\n'
        'ulimits = { memlock = "-1" }',
    )
    path = tmp_path / "r.toml"
    path.write_text(text)
    assert main(["plan", str(path), "--target", "kubernetes", "--accept"]) == 0
    err = capsys.readouterr().err
    for what in ("pid host", "cap_add SYS_NICE", "devices /dev/dri/card0", "ulimit memlock=-1", "after_stop"):
        assert f"warning: left out {what}" in err


def _pod_env(c: dict[str, Any], pod_ip: str, labels: dict[str, str] | None = None) -> dict[str, str]:
    """The container env as the kubelet builds it: values with $(NAME) of earlier entries expanded,
    the downward API's ``status.podIP`` and labels, Secret keys (here: a stand-in per key)."""
    env: dict[str, str] = {}
    for e in c["env"]:
        ref = e.get("valueFrom", {})
        if "value" in e:
            env[e["name"]] = _kubelet_expand(e["value"], env)
        elif ref.get("fieldRef", {}).get("fieldPath") == "status.podIP":
            env[e["name"]] = pod_ip
        elif "fieldRef" in ref:
            key = re.fullmatch(r"metadata\.labels\['(.+)'\]", ref["fieldRef"]["fieldPath"])
            assert key and labels is not None
            env[e["name"]] = labels[key[1]]
        else:
            env[e["name"]] = f"secret-{ref['secretKeyRef']['key']}"
    return env


def _run_pod(c: dict[str, Any], env: dict[str, str], tmp_path: Path) -> str:
    """The pod's command (kubelet-expanded) with a ``vllm`` that prints its env and arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    said = "rank=$LAIR_NODE_RANK ip=$VLLM_HOST_IP gloo=$GLOO_SOCKET_IFNAME nccl=$NCCL_SOCKET_IFNAME"
    fake = f'#!/bin/sh\necho "{said} args=$*"\n'
    (bin_dir / "vllm").write_text(fake)
    (bin_dir / "vllm").chmod(0o755)
    env = {**env, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    argv = [_kubelet_expand(a, env) for a in c["command"]]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _three_ranks(tmp_path: Path, env: str = "") -> Path:
    p = _recipe(tmp_path, nodes=3)
    text = p.read_text().replace("tensor_parallel_size = 2", "tensor_parallel_size = 3")
    p.write_text(text.replace('VLLM_LOGGING_LEVEL = "INFO"', f'VLLM_LOGGING_LEVEL = "INFO"{env}'))
    return p


def _manifests(capsys: pytest.CaptureFixture[str], recipe: Path, *args: str) -> tuple[Any, str]:
    assert main(["plan", str(recipe), "--target", "kubernetes", "--json", "--name", "qw", *args]) == 0
    cap = capsys.readouterr()
    return _by_name(json.loads(cap.out)), cap.err


def test_each_rank_gets_its_pod_ip_and_the_given_interface(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every pod, run as the kubelet would run it, tells vLLM its own pod IP (downward API) and the
    interface given, and each worker pod execs its own rank's command."""
    objs, _ = _manifests(capsys, _three_ranks(tmp_path), "--interface", "eth0")
    for doc in objs.values():
        for version in VERSIONS:
            _validate(doc, version)
    head = objs["StatefulSet/qw-head"]["spec"]["template"]["spec"]["containers"][0]
    worker = objs["StatefulSet/qw-worker"]["spec"]["template"]["spec"]["containers"][0]
    ip_ref = {"fieldRef": {"fieldPath": "status.podIP"}}
    assert next(e for e in head["env"] if e["name"] == "VLLM_HOST_IP") == {
        "name": "VLLM_HOST_IP",
        "valueFrom": ip_ref,
    }
    for c in (head, worker):
        names = [e["name"] for e in c["env"]]
        assert len(names) == len(set(names))
    env = _pod_env(head, "10.244.0.5")
    assert (env["VLLM_HOST_IP"], env["GLOO_SOCKET_IFNAME"], env["NCCL_SOCKET_IFNAME"]) == (
        "10.244.0.5",
        "eth0",
        "eth0",
    )
    assert (env["LAIR_NODE_RANK"], env["LAIR_MASTER_ADDR"]) == ("0", "qw-head-0.qw")
    for pod, ip, rank in (("qw-worker-0", "10.244.1.7", 1), ("qw-worker-1", "10.244.2.9", 2)):
        out = _run_pod(worker, {**_pod_env(worker, ip), "HOSTNAME": pod}, tmp_path)
        assert out.startswith(f"rank={rank} ip={ip} gloo=eth0 nccl=eth0 args=serve /models/qwen ")
        assert (
            f"--nnodes 3 --node-rank {rank} --master-addr qw-head-0.qw --master-port 29501 --headless" in out
        )


def test_recipe_env_wins_over_the_pod_wiring(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """As on SSH nodes: a networking name the recipe's env sets keeps the recipe's value; without
    --interface the interface is left to the pod (and said)."""
    recipe = _three_ranks(tmp_path, ', VLLM_HOST_IP = "10.9.9.9", NCCL_SOCKET_IFNAME = "ib0"')
    objs, err = _manifests(capsys, recipe)
    assert (
        "warning: left out GLOO_SOCKET_IFNAME (a node finds its interface itself; give one with --interface)"
        in err
    )
    worker = objs["StatefulSet/qw-worker"]["spec"]["template"]["spec"]["containers"][0]
    assert [e for e in worker["env"] if e["name"] == "VLLM_HOST_IP"] == [
        {"name": "VLLM_HOST_IP", "value": "10.9.9.9"}
    ]
    env = _pod_env(worker, "10.244.1.7")
    assert env["NCCL_SOCKET_IFNAME"] == "ib0" and "GLOO_SOCKET_IFNAME" not in env
    assert env["LAIR_POD_IP"] == "10.244.1.7"
    objs, _ = _manifests(capsys, recipe, "--interface", "eth1")
    env = _pod_env(objs["StatefulSet/qw-head"]["spec"]["template"]["spec"]["containers"][0], "10.244.0.5")
    assert (env["VLLM_HOST_IP"], env["GLOO_SOCKET_IFNAME"], env["NCCL_SOCKET_IFNAME"]) == (
        "10.9.9.9",
        "eth1",
        "ib0",
    )


def test_leaderworkerset_ranks_from_the_worker_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objs, _ = _manifests(
        capsys, _three_ranks(tmp_path), "--workload", "leaderworkerset", "--interface", "eth0"
    )
    t = objs["LeaderWorkerSet/qw"]["spec"]["leaderWorkerTemplate"]
    for version in VERSIONS:
        _validate(objs["LeaderWorkerSet/qw"], version)
    worker = t["workerTemplate"]["spec"]["containers"][0]
    for index, ip in (("1", "10.244.1.7"), ("2", "10.244.2.9")):
        env = _pod_env(worker, ip, {LWS_INDEX: index})
        out = _run_pod(worker, env, tmp_path)
        assert out.startswith(f"rank={index} ip={ip} gloo=eth0 nccl=eth0 ")
        assert f"--node-rank {index} --master-addr qw-0.qw --master-port 29501 --headless" in out
    leader = _pod_env(t["leaderTemplate"]["spec"]["containers"][0], "10.244.0.5")
    assert leader["VLLM_HOST_IP"] == "10.244.0.5" and leader["LAIR_NODE_RANK"] == "0"


LWS_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"


def test_ray_nodes_start_at_their_pod_ip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = _three_ranks(tmp_path)
    recipe.write_text(recipe.read_text().replace('distributed_backend = "mp"', 'distributed_backend = "ray"'))
    objs, _ = _manifests(capsys, recipe)
    for role in ("head", "worker"):
        c = objs[f"StatefulSet/qw-{role}"]["spec"]["template"]["spec"]["containers"][0]
        text = " ".join(c["command"])
        assert re.findall(r"--node-ip-address (\S+)", text) == ["$(LAIR_POD_IP)"] * (
            1 if role == "head" else 2
        )
        assert _pod_env(c, "10.244.3.3")["LAIR_POD_IP"] == "10.244.3.3"
        assert "qw-worker-0.qw" not in text
