"""The plan as data: per node, every step of a run in order.

    Plan
    ├── run: RunInfo            run id, recipe, engine, runtime, image, port, env (secrets "***"), ...
    └── nodes: [NodePlan]       name, address, rank, role, env-file path, container name
        └── steps: [Step]       stage + kind + argv | script | url ..., in execution order

A step's ``kind`` says how launch interprets it:

    env_file   write ``path`` (mode 0600; its folder, the node's run folder, 0700) with the run's
               env (``secrets``: the secret env a container sources, see lair.plan.secrets); the
               values never enter the plan
    check      before anything starts: ``ports`` must be free on the node (fails naming the
               process that holds one)
    pull       the image: ``pull`` = missing (pull if the node lacks it), always, never (fail if
               missing); progress on stderr; ``timeout_s`` of its own
    upload     copy ``source`` (a file on the controlling machine) to ``path`` on the node
    exec       run ``argv`` to completion (hooks: with ``timeout_s`` and ``on_failure``)
    script     run ``script`` with ``sh -c`` to completion (mount staging)
    start      start the main process: ``argv`` (``docker run -d ...``, or the native command);
               ``manifest`` names a file of ``host<TAB>container`` lines read on the node, one
               read-only ``-v`` per line inserted before the image
    ready      poll ``urls`` until each answers 200 within ``timeout_s`` (with the bearer token in
               env ``auth_env`` when set); fail as soon as the process exits (every node: its
               process must stay up); then the process must still run and /v1/models must list
               the run's served model (the server answering is the run's own)
    stop       stop the main process (``argv`` for containers; natively its process group, its
               session and every descendant) and verify that it is gone
    cleanup    remove ``path`` (the run's folder on the node: env-file, hook scripts, manifests)
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

__all__ = ["DETECT", "STAGE_ORDER", "NodePlan", "Plan", "RunInfo", "Stage", "Step", "Target"]

DETECT = "detect:"
"""Prefix of an engine env value the node finds itself (``detect:ADDR``: the interface toward ADDR)."""


class Stage(StrEnum):
    """Lifecycle stages in execution order; launch runs one stage on every node before the next."""

    PREPARE = "prepare"
    BEFORE_SERVE = "before_serve"
    STAGE_MOUNTS = "stage_mounts"
    START = "start"
    SERVE = "serve"
    READY = "ready"
    STOP = "stop"
    AFTER_STOP = "after_stop"
    CLEANUP = "cleanup"


STAGE_ORDER = list(Stage)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Target(_Model):
    """A node a run takes (or, in a plan without leases, would take)."""

    name: str
    address: str
    rank: int = Field(ge=0)
    local: bool = Field(False, description="the machine lair runs on (no SSH)")
    would_take: bool = Field(False, description="planned only: the rank is not leased")
    engine_address: str | None = Field(None, description="address on the engines' network (default: address)")
    interface: str | None = Field(None, description="gloo/NCCL interface (default: detected on the node)")

    @property
    def engine_addr(self) -> str:
        return self.engine_address or self.address

    gpus: str | None = Field(None, description="the node's GPU selection (inventory gpu_devices)")


class Step(_Model):
    stage: Stage
    kind: Literal[
        "env_file", "check", "pull", "upload", "exec", "script", "start", "ready", "stop", "cleanup"
    ]
    name: str = Field(description="short label for progress lines")
    argv: list[str] | None = None
    script: str | None = None
    path: str | None = None
    source: str | None = None
    mode: str | None = None
    env_names: list[str] | None = None
    manifest: str | None = None
    command: list[str] | None = Field(
        None, description="start/serve: the engine command alone (for targets that wrap it themselves)"
    )
    urls: list[str] | None = None
    ports: list[int] | None = None
    pull: Literal["missing", "always", "never"] | None = None
    auth_env: str | None = Field(None, description="env holding the API key readiness sends")
    secrets: bool = Field(False, description="env_file: the secret env of a container")
    timeout_s: float | None = None
    on_failure: Literal["fail", "warn"] = "fail"


class NodePlan(_Model):
    name: str
    address: str
    rank: int
    role: str = Field(description="head, worker, ray-head, ray-worker")
    local: bool = False
    would_take: bool = False
    workdir: str = Field(description="the run's folder on the node (env-file, hook scripts)")
    env_file: str
    secrets_file: str | None = Field(None, description="0600 file of secret env a container sources")
    container: str | None = Field(None, description="container name (docker/podman runtimes)")
    gpus: str | None = Field(None, description="GPU selection of this node's process (lair.plan.gpus)")
    lair_env: dict[str, str] = Field(
        description="LAIR_* env of this node (rank, master address/port), CUDA_VISIBLE_DEVICES (native)"
    )
    engine_env: dict[str, str] = Field(
        default_factory=dict,
        description="this node's engine networking env (its address, gloo/NCCL interface); a value "
        "'detect:ADDR' is found on the node at start, from its route to ADDR",
    )
    steps: list[Step]

    def stage(self, stage: Stage) -> list[Step]:
        return [s for s in self.steps if s.stage == stage]


class RunInfo(_Model):
    run_id: str
    recipe: str = Field(description="recipe file")
    name: str
    engine: str
    runtime: str
    image: str | None
    lair_version: str
    port: int
    health_path: str
    ready_timeout_s: float
    master_addr: str
    master_port: int
    endpoint: str = Field(description="the OpenAI-compatible base URL on the head")
    served_model: str | None
    gpus: str = Field("none", description="GPU selection (lair.plan.gpus); nodes may override it")
    pull: Literal["missing", "always", "never"] = "missing"
    trusted: bool
    env: dict[str, str] = Field(description="env of every node; secret values are '***'")
    secret_env: list[str]
    dropped: list[str] = Field(default_factory=list, description="flags left out (--drop-unsupported)")
    added: list[str] = Field(
        default_factory=list, description="flags the hosts' profile needs that the recipe does not set"
    )


class Plan(_Model):
    run: RunInfo
    nodes: list[NodePlan]
    _env: dict[str, str] = PrivateAttr(default_factory=dict)
    _secrets: list[str] = PrivateAttr(default_factory=list)

    def set_env(self, env: dict[str, str], secret_values: list[str] | None = None) -> None:
        """Keep the recipe's env values (secrets included) out of the plan's data."""
        self._env = dict(env)
        self._secrets = list(secret_values or [])

    def env_values(self, node: NodePlan) -> dict[str, str]:
        """The env-file content of ``node``: the recipe's env (real values), its engine networking
        env (names the recipe sets are not in it), then its LAIR_* env. Detected values are
        appended on the node by a ``prepare`` script step.

        A container node's env-file leaves the secret env out (see :meth:`secret_env`)."""
        fixed = {k: v for k, v in node.engine_env.items() if not v.startswith(DETECT)}
        env = {k: v for k, v in self._env.items() if not (node.secrets_file and k in self.run.secret_env)}
        return {**env, **fixed, **node.lair_env}

    def secret_env(self) -> dict[str, str]:
        """The secret env (real values): a container's secrets file."""
        return {k: v for k, v in self._env.items() if k in self.run.secret_env}

    def secret_values(self) -> list[str]:
        """Every resolved secret value of the run (for redaction); empty for a plan read back."""
        return list(self._secrets)

    def api_key(self, step: Step) -> str | None:
        return self._env.get(step.auth_env) if step.auth_env else None

    @property
    def head(self) -> NodePlan:
        return self.nodes[0]
