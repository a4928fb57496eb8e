"""Kubernetes manifests from a plan (``lair plan --target kubernetes``); pure, no API server needed.

    pod_addresses(name, n, workload) -> [str]    each rank's DNS name (the plan is built with them)
    render_manifests(plan, recipe, KubeOptions) -> Manifests   documents + notes (what was left out)

Layout (``NAME`` is ``KubeOptions.name``; every object carries ``app.kubernetes.io/name: NAME``):

    workload = "statefulset" (default)
        Service NAME           headless (clusterIP None, not-ready addresses published): pod DNS
        Service NAME-api       the OpenAI endpoint, on the head pod
        StatefulSet NAME-head  1 replica: rank 0, readiness + startup probes on the health path
        StatefulSet NAME-worker N-1 replicas: rank = 1 + the pod's ordinal (from its host name)
    workload = "leaderworkerset"
        LeaderWorkerSet NAME   size N: leaderTemplate = rank 0, workerTemplate = ranks 1..N-1
                               (rank = the worker-index label); LWS makes its own headless Service
        Service NAME-api
    ConfigMap NAME-hooks       the before_serve scripts, run by init containers (when there are any)

Each rank's address is its pod's name through the headless Service (``NAME-head-0.NAME``,
``NAME-worker-0.NAME``; LWS: ``NAME-0.NAME``, ``NAME-0-1.NAME``), so the plan's master address is a
DNS name. A rank's own engine networking env is the plan's (:meth:`lair.engines.EngineSpec.network`,
as on SSH nodes, the recipe's env winning): its own address (``VLLM_HOST_IP``, ``SGLANG_HOST_IP``,
Ray's ``--node-ip-address``) becomes the pod's IP from the downward API (``LAIR_POD_IP``,
``status.podIP``), the gloo/NCCL interface is the one given (``KubeOptions.interface``) and is left
unset otherwise (a node finds its own by its route; a pod is not given that step).

Env values come from the plan; secret ones become ``secretKeyRef``
entries of the Secret ``KubeOptions.secret`` (its values never enter a manifest), and a secret value
that appears in a command is replaced by ``$(NAME)`` (Kubernetes expands it from the container env).
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from lair.errors import ConfigError
from lair.plan.resources import gpus_per_node
from lair.plan.steps import DETECT, NodePlan, Plan, Stage, Step

if TYPE_CHECKING:
    from lair.recipe import Hook, Mount, Recipe

__all__ = ["KubeOptions", "Manifests", "kube_name", "pod_addresses", "render_manifests", "to_yaml"]

Workload = Literal["statefulset", "leaderworkerset"]
LWS_API = "leaderworkerset.x-k8s.io/v1"
LWS_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
HOOKS_DIR = "/lair/hooks"
PROBE_PERIOD_S = 5
POD_IP_ENV = "LAIR_POD_IP"
_POD_IP = "@LAIR_POD_IP@"  # the pod's IP in a command, until it becomes $(LAIR_POD_IP)
_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")


@dataclass
class KubeOptions:
    """What the recipe does not say: object names, the workload kind, where each mount comes from."""

    name: str
    workload: Workload = "statefulset"
    mounts: Literal["hostpath", "pvc"] = "hostpath"
    claims: dict[str, str] = field(default_factory=dict)  # container path -> PVC name (implies pvc)
    secret: str = ""  # the Secret holding the secret env values; default NAME-env
    gpus_per_node: int | None = None
    interface: str | None = None  # GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME in the pods

    @property
    def secret_name(self) -> str:
        return self.secret or f"{self.name}-env"


@dataclass
class Manifests:
    documents: list[dict[str, Any]]
    notes: list[str]  # recipe fields with no Kubernetes equivalent, left out
    secret_keys: list[str]  # keys the Secret must hold
    secret: str = ""  # the Secret's name


def kube_name(text: str) -> str:
    """A DNS-1123 label of at most 40 characters (room for ``-worker-N`` and the controller hash)."""
    name = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40].strip("-")
    if not _NAME_RE.fullmatch(name):
        raise ConfigError(f"cannot make a Kubernetes name of {text!r}", hint="give one with --name")
    return name


def pod_addresses(name: str, n: int, workload: Workload) -> list[str]:
    """Rank -> its pod's DNS name through the headless Service (resolvable in the namespace)."""
    if workload == "leaderworkerset":
        return [f"{name}-0.{name}", *(f"{name}-0-{i}.{name}" for i in range(1, n))]
    return [f"{name}-head-0.{name}", *(f"{name}-worker-{i}.{name}" for i in range(n - 1))]


# ---- values ---------------------------------------------------------------------------------------
def _mebi(size_bytes: int) -> str:
    return f"{max(1, math.ceil(size_bytes / 2**20))}Mi"


def _gpu_count(r: Recipe, override: int | None) -> int:
    return override if override is not None else gpus_per_node(r)


def _escape(arg: str) -> str:
    return arg.replace("$(", "$$(")  # a literal $( is not a Kubernetes variable reference


class _Secrets:
    """Replaces secret values in commands by ``$(NAME)`` and checks that none is left."""

    def __init__(self, plan: Plan) -> None:
        values = plan.env_values(plan.head)
        self.values = {k: values[k] for k in plan.run.secret_env if values.get(k)}

    def arg(self, arg: str) -> str:
        out = _escape(arg)
        for name, value in sorted(self.values.items(), key=lambda kv: -len(kv[1])):
            out = out.replace(value, f"$({name})")
        return out.replace(_POD_IP, f"$({POD_IP_ENV})")

    def check(self, documents: list[dict[str, Any]]) -> None:
        text = to_yaml(documents)
        leaked = [k for k, v in self.values.items() if v in text]
        if leaked:
            raise ConfigError(f"the secret value of {', '.join(leaked)} would appear in a manifest")


# ---- per-rank command -----------------------------------------------------------------------------
def _step(n: NodePlan, stage: Stage, kind: str) -> Step | None:
    return next((s for s in n.stage(stage) if s.kind == kind), None)


def _own_ip(argv: list[str], n: NodePlan) -> list[str]:
    """Ray's ``--node-ip-address`` of this rank (an argument, or in the Ray head's script): its pod's
    IP, where the plan has its DNS name."""
    flag = "--node-ip-address"
    return [
        _POD_IP
        if i and argv[i - 1] == flag and a == n.address
        else a.replace(f"{flag} {n.address} ", f"{flag} {_POD_IP} ")
        for i, a in enumerate(argv)
    ]


def _commands(n: NodePlan) -> tuple[list[str], list[str]]:
    start, serve = _step(n, Stage.START, "start"), _step(n, Stage.SERVE, "exec")
    if start is None or not start.command:
        raise ConfigError(
            f"rank {n.rank}: the plan has no engine command", hint="give the recipe an entrypoint"
        )
    return _own_ip(start.command, n), _own_ip(serve.command or [], n) if serve else []


def _script(argv: list[str], serve: list[str]) -> str:
    """One rank's shell line: exec the command (Ray: start the node in the background, then serve)."""
    if serve:
        return f"{shlex.join(argv)} & exec {shlex.join(serve)}"
    return f"exec {shlex.join(argv)}"


def _head_command(n: NodePlan, sec: _Secrets) -> list[str]:
    argv, serve = _commands(n)
    if serve:
        return ["sh", "-c", sec.arg(_script(argv, serve))]
    return [sec.arg(a) for a in argv]


def _worker_command(
    workers: list[NodePlan], common: dict[str, str], sec: _Secrets, lws: bool, host_ip: str | None
) -> list[str]:
    """``sh -c``: pick this pod's rank, export what differs per rank, exec that rank's command."""
    rank = 'rank="$LAIR_NODE_RANK"' if lws else 'rank=$((${HOSTNAME##*-} + 1)); export LAIR_NODE_RANK="$rank"'
    cases = []
    for w in workers:
        env = _node_env(w, host_ip)
        own = {k: v for k, v in env.items() if common.get(k) != v and k != "LAIR_NODE_RANK"}
        exports = "".join(f"export {k}={shlex.quote(v)}; " for k, v in own.items())
        cases.append(f"  {w.rank}) {exports}{_script(*_commands(w))} ;;")
    body = "\n".join(
        [
            rank,
            'case "$rank" in',
            *cases,
            '  *) echo "lair: no rank $rank in this plan" >&2; exit 1 ;;',
            "esac",
        ]
    )
    return ["sh", "-c", sec.arg(body)]


# ---- pod parts --------------------------------------------------------------------------------------
def _node_env(n: NodePlan, host_ip: str | None) -> dict[str, str]:
    """The rank's own env as values: its engine networking env (less its own address, which is the
    pod's IP, and what the node would find itself), then its LAIR_* env."""
    fixed = {k: v for k, v in n.engine_env.items() if k != host_ip and not v.startswith(DETECT)}
    return {**fixed, **n.lair_env}


def _pod_ip_env(plan: Plan, host_ip: str | None) -> list[dict[str, Any]]:
    """``LAIR_POD_IP`` (downward API), and the engine's own-address env from it, on every rank."""
    if len(plan.nodes) < 2:
        return []
    ip = {"valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    out: list[dict[str, Any]] = [{"name": POD_IP_ENV, **ip}]
    if host_ip and all(host_ip in n.engine_env for n in plan.nodes):  # the recipe's env wins
        out.append({"name": host_ip, **ip})
    return out


def _env(plan: Plan, lair_env: dict[str, str], secret: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for k, v in plan.run.env.items():
        if k in plan.run.secret_env:
            out.append({"name": k, "valueFrom": {"secretKeyRef": {"name": secret, "key": k}}})
        else:
            out.append({"name": k, "value": v})
    return out + [{"name": k, "value": v} for k, v in lair_env.items()]


def _volume_name(container_path: str, i: int) -> str:
    return f"m{i}-" + (re.sub(r"[^a-z0-9]+", "-", container_path.lower()).strip("-")[:40] or "root")


def _mount_volume(m: Mount, i: int, opts: KubeOptions) -> dict[str, Any]:
    from lair.plan.mounts import hub_mount

    if hub_mount(m) is not None:
        raise ConfigError(
            f"extra_mounts {m.host}: a Hugging Face hub repo is staged per file, which a pod cannot do",
            hint="mount the snapshot folder (.../snapshots/REV) instead, or a PVC with --pvc",
        )
    name = _volume_name(m.container, i)
    claim = opts.claims.get(m.container.rstrip("/") or "/")
    if claim or opts.mounts == "pvc":
        src: dict[str, Any] = {"persistentVolumeClaim": {"claimName": claim or f"{opts.name}-{name}"}}
        if m.read_only:
            src["persistentVolumeClaim"]["readOnly"] = True
    else:
        src = {"hostPath": {"path": m.host}}
    return {"name": name, **src}


def _volumes(r: Recipe, opts: KubeOptions, hooks: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    if r.extra_mounts_manifest:
        raise ConfigError(
            "extra_mounts_manifest: a file written on the node at start-up cannot become pod volumes",
            hint="list the mounts in extra_mounts instead",
        )
    vols, mounts = [], []
    for i, m in enumerate(r.extra_mounts):
        vols.append(_mount_volume(m, i, opts))
        mount: dict[str, Any] = {"name": vols[-1]["name"], "mountPath": m.container}
        if m.read_only:
            mount["readOnly"] = True
        mounts.append(mount)
    if r.shm_size_bytes:
        vols.append({"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": _mebi(r.shm_size_bytes)}})
        mounts.append({"name": "shm", "mountPath": "/dev/shm"})
    if hooks:
        vols.append({"name": "lair-hooks", "configMap": {"name": f"{opts.name}-hooks", "defaultMode": 0o755}})
    return vols, mounts


def _resources(r: Recipe, gpus: int) -> dict[str, Any]:
    limits: dict[str, str] = {}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    if r.memory_limit_bytes:
        limits["memory"] = _mebi(r.memory_limit_bytes)
    if r.cpus is not None:
        limits["cpu"] = f"{r.cpus:g}"
    return {"limits": limits, "requests": dict(limits)} if limits else {}


def _probes(plan: Plan) -> dict[str, Any]:
    get = {"httpGet": {"path": plan.run.health_path, "port": plan.run.port}, "periodSeconds": PROBE_PERIOD_S}
    startup = {**get, "failureThreshold": max(1, math.ceil(plan.run.ready_timeout_s / PROBE_PERIOD_S))}
    return {"readinessProbe": {**get, "failureThreshold": 3}, "startupProbe": startup}


def _hook_files(r: Recipe) -> dict[str, str]:
    """ConfigMap data: one file per before_serve hook (a library script's text, or the inline shell)."""
    from lair.recipe.scripts import find_script

    files: dict[str, str] = {}
    for i, h in enumerate(r.before_serve):
        if h.script:
            src = find_script(h.script)
            if src is None:
                raise ConfigError(f"before_serve: no script named {h.script!r} in the script library")
            files[f"{i}-{src.name}"] = src.read_text(encoding="utf-8")
        else:
            files[f"{i}-inline.sh"] = h.run or ""
    return files


def _init_containers(
    r: Recipe, files: dict[str, str], base: dict[str, Any], sec: _Secrets
) -> list[dict[str, Any]]:
    hooks: list[Hook] = list(r.before_serve)
    out: list[dict[str, Any]] = []
    for (fname, _), h in zip(files.items(), hooks, strict=True):
        argv = [f"{HOOKS_DIR}/{fname}", *h.args] if h.script else ["sh", f"{HOOKS_DIR}/{fname}"]
        mounts = [*base.get("volumeMounts", []), {"name": "lair-hooks", "mountPath": HOOKS_DIR}]
        c = {**base, "name": f"before-serve-{len(out)}", "command": [sec.arg(a) for a in argv]}
        out.append({**c, "volumeMounts": mounts})
    return out


@dataclass
class _Pod:
    plan: Plan
    recipe: Recipe
    opts: KubeOptions
    sec: _Secrets
    hooks: dict[str, str]

    def template(self, role: str, command: list[str], lair_env: dict[str, str], extra_env: list[Any]) -> Any:
        r, run = self.recipe, self.plan.run
        vols, mounts = _volumes(r, self.opts, bool(self.hooks))
        c: dict[str, Any] = {"name": "engine", "image": run.image, "imagePullPolicy": "IfNotPresent"}
        c["env"] = _env(self.plan, lair_env, self.opts.secret_name) + extra_env
        if mounts:
            c["volumeMounts"] = mounts
        init = _init_containers(r, self.hooks, c, self.sec)  # same image, env and mounts; no GPU
        c["command"] = command
        res = _resources(r, _gpu_count(r, self.opts.gpus_per_node))
        if res:
            c["resources"] = res
        if r.privileged:
            c["securityContext"] = {"privileged": True}
        if role == "head":
            c["ports"] = [{"name": "http", "containerPort": run.port}]
            c.update(_probes(self.plan))
        spec: dict[str, Any] = {"containers": [c]}
        if init:
            spec["initContainers"] = init
        if vols:
            spec["volumes"] = vols
        if r.ipc == "host":
            spec["hostIPC"] = True
        return {"metadata": {"labels": self.labels(role)}, "spec": spec}

    def labels(self, role: str) -> dict[str, str]:
        return {
            "app.kubernetes.io/name": self.opts.name,
            "app.kubernetes.io/managed-by": "lair",
            "lair.role": role,
        }


# ---- objects ----------------------------------------------------------------------------------------
def _meta(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "labels": labels}


def _services(pod: _Pod, headless: bool) -> list[dict[str, Any]]:
    o, run = pod.opts, pod.plan.run
    base = {"app.kubernetes.io/name": o.name}
    http = {"name": "http", "port": run.port, "targetPort": run.port}
    out = []
    if headless:
        ports = [http, {"name": "master", "port": run.master_port, "targetPort": run.master_port}]
        spec = {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": base, "ports": ports}
        out.append({"apiVersion": "v1", "kind": "Service", "metadata": _meta(o.name, base), "spec": spec})
    api = {"selector": {**base, "lair.role": "head"}, "ports": [http]}
    out.append({"apiVersion": "v1", "kind": "Service", "metadata": _meta(f"{o.name}-api", base), "spec": api})
    return out


def _statefulset(pod: _Pod, role: str, replicas: int, template: Any) -> dict[str, Any]:
    name = f"{pod.opts.name}-{role}"
    spec = {
        "serviceName": pod.opts.name,
        "replicas": replicas,
        "podManagementPolicy": "Parallel",  # workers must start while the head waits for them
        "selector": {"matchLabels": pod.labels(role)},
        "template": template,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _meta(name, pod.labels(role)),
        "spec": spec,
    }


def _common_env(workers: list[NodePlan], host_ip: str | None) -> dict[str, str]:
    envs = [_node_env(w, host_ip) for w in workers]
    return {k: v for k, v in envs[0].items() if k != "LAIR_NODE_RANK" and all(e.get(k) == v for e in envs)}


def _workloads(pod: _Pod) -> list[dict[str, Any]]:
    from lair.engines import get_engine

    head, workers = pod.plan.nodes[0], pod.plan.nodes[1:]
    host_ip = get_engine(pod.plan.run.engine).host_ip_env
    lws = pod.opts.workload == "leaderworkerset"
    ip_env = _pod_ip_env(pod.plan, host_ip)
    head_t = pod.template("head", _head_command(head, pod.sec), _node_env(head, host_ip), ip_env)
    if not workers:
        return [_statefulset(pod, "head", 1, head_t)]
    common = _common_env(workers, host_ip)
    rank_env = [
        {
            "name": "LAIR_NODE_RANK",
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{LWS_INDEX_LABEL}']"}},
        }
    ]
    command = _worker_command(workers, common, pod.sec, lws, host_ip)
    worker_t = pod.template("worker", command, common, ip_env + (rank_env if lws else []))
    if not lws:
        return [_statefulset(pod, "head", 1, head_t), _statefulset(pod, "worker", len(workers), worker_t)]
    spec = {
        "replicas": 1,
        "startupPolicy": "LeaderCreated",
        "leaderWorkerTemplate": {
            "size": len(pod.plan.nodes),
            "leaderTemplate": head_t,
            "workerTemplate": worker_t,
        },
    }
    meta = _meta(pod.opts.name, {"app.kubernetes.io/name": pod.opts.name})
    return [{"apiVersion": LWS_API, "kind": "LeaderWorkerSet", "metadata": meta, "spec": spec}]


def _notes(r: Recipe, plan: Plan) -> list[str]:
    notes = [f"devices {', '.join(r.devices)} (use a device plugin's resource instead)"] if r.devices else []
    found = sorted({k for n in plan.nodes for k, v in n.engine_env.items() if v.startswith(DETECT)})
    if found:
        notes.append(f"{', '.join(found)} (a node finds its interface itself; give one with --interface)")
    notes += [f"ulimit {k}={v} (set by the node's container runtime)" for k, v in r.ulimits.items()]
    if r.after_stop:
        notes.append(f"after_stop hooks ({len(r.after_stop)}): a pod has no step after its containers stop")
    if r.pid:
        notes.append(f"pid {r.pid} (a pod shares the host's PID namespace only with hostPID)")
    if r.cap_add:
        notes.append(f"cap_add {', '.join(r.cap_add)} (add them to the pod's securityContext yourself)")
    if r.ipc and r.ipc != "host":
        notes.append(f"ipc {r.ipc} (pods share IPC only with hostIPC)")
    return notes


def render_manifests(plan: Plan, recipe: Recipe, opts: KubeOptions) -> Manifests:
    """The manifests of ``plan`` (built on :func:`pod_addresses`); ``recipe`` is the rendered recipe.

    Raises ConfigError for what a pod cannot express (a native runtime, per-file mount manifests).
    """
    if plan.run.runtime == "native" or not plan.run.image:
        raise ConfigError(
            "a native recipe has no image for Kubernetes to run",
            hint='set runtime = "docker" and docker_image (an image with the engine)',
        )
    sec = _Secrets(plan)
    pod = _Pod(plan, recipe, opts, sec, _hook_files(recipe))
    docs: list[dict[str, Any]] = []
    if pod.hooks:
        meta = _meta(f"{opts.name}-hooks", {"app.kubernetes.io/name": opts.name})
        docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": pod.hooks})
    docs += _services(pod, headless=opts.workload == "statefulset") + _workloads(pod)
    sec.check(docs)
    return Manifests(docs, _notes(recipe, plan), sorted(plan.run.secret_env), opts.secret_name)


def to_yaml(documents: list[dict[str, Any]]) -> str:
    """Multi-document YAML: no anchors (each object reads on its own), scripts as ``|`` blocks."""
    import yaml

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    def text(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
        style = "|" if "\n" in data and not any(c in data for c in "\t\r") else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)

    Dumper.add_representer(str, text)
    return yaml.dump_all(documents, Dumper=Dumper, sort_keys=False, default_flow_style=False)
