"""vLLM: ``vllm serve MODEL`` plus the flags recipe keys map to, and multi-node wiring.

Flags come from :data:`lair.engines.flags.VLLM_FLAGS` (vLLM 0.32.0). lair adds
``--enable-prompt-tokens-details`` (so that responses carry ``cached_tokens``, the bench's cache
proof) unless the recipe sets ``metrics_flags = false`` or writes the flag in either form.

Multi-node with ``distributed_backend = "mp"`` (vLLM's multiprocessing executor across nodes): every
node runs the same ``vllm serve`` with ``--nnodes N --node-rank R --master-addr HEAD
--master-port P``; ranks above 0 add ``--headless`` (no API server). Flag names as in vLLM's
"Parallelism and Scaling" guide ("Running vLLM with MultiProcessing"); ``master_port`` defaults to
29501 there. Each node also gets ``VLLM_HOST_IP`` (its own address: without it gloo binds loopback
or 0.0.0.0 and the ranks never meet) and ``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME``.

With ``"ray"`` (the layout of vLLM's ``examples/online_serving/run_cluster.sh``): the workers run
``ray start --address HEAD:P --block``; the head runs one supervising shell (:func:`ray_head_script`)
that starts ``ray start --head --block``, waits until every node joined, then runs the recipe's
``vllm serve ... --distributed-executor-backend ray``. That shell is the head's main process: it
ends when the server or the Ray head ends (so a crash fails the launch with the server's log), and
on SIGTERM it stops the server, then the Ray head. The ``ray`` command is the one beside the
entrypoint's program when that is in a ``bin/`` folder (a venv), else ``ray`` from PATH. Each Ray
node keeps its session folder apart (``--temp-dir``, :func:`ray_temp_dir`), removed at cleanup.
"""

from __future__ import annotations

import hashlib
import shlex
from typing import TYPE_CHECKING, ClassVar

from lair.engines.base import EngineSpec, NodeCommand, Role
from lair.engines.flags import VLLM_FLAGS

if TYPE_CHECKING:
    from lair.recipe import Recipe

__all__ = ["VLLM", "ray_head_script"]

F = VLLM_FLAGS
RAY_JOIN_POLL_S = 2
RAY_ENV = {"RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
"""A Ray node drains for 30 s on SIGTERM (for Ray Serve); when lair stops a run, the whole cluster
goes, with nothing to drain to: a worker would wait out the 30 s for a head that is gone."""


class VLLM(EngineSpec):
    name = "vllm"
    host_ip_env = "VLLM_HOST_IP"
    ray = True
    secret_flags: ClassVar[dict[str, str]] = {"--api-key": "VLLM_API_KEY"}  # vllm.envs.VLLM_API_KEY
    api_key_env = "VLLM_API_KEY"

    def default_entrypoint(self, recipe: Recipe, python: str) -> list[str]:
        return ["vllm", "serve", *([recipe.model] if recipe.model else [])]

    def kv_cache_dtypes(self) -> tuple[str, ...]:
        return F.kv_cache_dtypes

    def serve_flags(self, recipe: Recipe, argv: list[str]) -> None:
        F.add(argv, "host", recipe.host)
        F.add(argv, "port", recipe.port)
        F.add(argv, "tensor_parallel_size", _over1(recipe.tensor_parallel_size))
        F.add(argv, "pipeline_parallel_size", _over1(recipe.pipeline_parallel_size))
        F.add(argv, "data_parallel_size", _over1(recipe.data_parallel_size))
        F.add(argv, "served_model_name", recipe.served_model_name)
        F.add(argv, "gpu_memory_utilization", recipe.gpu_memory_utilization)
        F.add(argv, "kv_cache_dtype", recipe.kv_cache_dtype)
        F.add(argv, "max_model_len", recipe.max_model_len)
        if recipe.metrics_flags:
            F.add(argv, "enable_prompt_tokens_details", True)

    def distributed(self, recipe: Recipe, role: Role, argv: list[str]) -> NodeCommand:
        if role.nnodes <= 1:
            F.add(argv, "distributed_executor_backend", recipe.distributed_backend)
            return NodeCommand(argv)
        if recipe.distributed_backend == "ray":
            return _ray(role, argv)
        F.add(argv, "distributed_executor_backend", "mp")
        F.add(argv, "nnodes", role.nnodes)
        F.add(argv, "node_rank", role.rank)
        F.add(argv, "master_addr", role.master_addr)
        F.add(argv, "master_port", role.master_port)
        if not role.head:
            F.add(argv, "headless", True)
        return NodeCommand(argv, role="head" if role.head else "worker")


def _over1(n: int) -> int | None:
    return n if n > 1 else None


def ray_binary(serve: list[str]) -> str:
    """``ray`` beside the entrypoint's program when that is a path in a ``bin/`` folder (a venv's
    ``vllm`` or ``python``), else ``ray`` from PATH."""
    folder = serve[0].rsplit("/", 1)[0] if serve and "/" in serve[0] else ""
    return f"{folder}/ray" if folder.endswith("/bin") else "ray"


def ray_temp_dir(role: Role) -> str:
    """The node's own Ray session folder: short (Ray's socket paths under it must fit the 107 bytes
    of an AF_UNIX address, which a run folder's name does not leave room for), one per run and rank
    (two nodes on one host, or two runs, never share one); cleanup removes it."""
    digest = hashlib.sha256(role.workdir.encode()).hexdigest()[:10]
    return f"/tmp/lair-ray-{digest}"


def _ray_start(ray: str, role: Role) -> list[str]:
    """``ray start`` of one node, in the foreground (``--block``)."""
    argv = [ray, "start", "--block", "--disable-usage-stats"]
    if role.address:
        argv += ["--node-ip-address", role.address]
    if role.workdir:
        argv += ["--temp-dir", ray_temp_dir(role)]
    if role.head:
        return [*argv, "--head", "--port", str(role.master_port), "--include-dashboard=false"]
    return [*argv, "--address", f"{role.master_addr}:{role.master_port}"]


def ray_head_script(ray_start: list[str], status: list[str], nnodes: int, serve: list[str]) -> str:
    """The head's supervising shell: Ray head, wait for ``nnodes`` nodes, then the server."""
    return f"""set -u
serve=
{shlex.join(ray_start)} & ray=$!
trap 'kill -TERM $serve 2>/dev/null; wait $serve 2>/dev/null; kill -TERM $ray; wait $ray; exit 143' TERM INT
until [ "$({shlex.join(status)} 2>/dev/null | grep -c ' node_')" -ge {nnodes} ]; do
  kill -0 $ray 2>/dev/null || {{ echo "lair: the Ray head exited before {nnodes} nodes joined" >&2; exit 1; }}
  sleep {RAY_JOIN_POLL_S}
done
echo "lair: {nnodes} Ray nodes joined; starting the server" >&2
{shlex.join(serve)} & serve=$!
while kill -0 $serve 2>/dev/null && kill -0 $ray 2>/dev/null; do sleep 1; done
if kill -0 $serve 2>/dev/null; then echo "lair: the Ray head exited; stopping the server" >&2; kill $serve; fi
wait $serve; rc=$?
kill -TERM $ray 2>/dev/null; wait $ray
echo "lair: the server exited with code $rc" >&2
exit $rc
"""


def _ray(role: Role, serve: list[str]) -> NodeCommand:
    F.add(serve, "distributed_executor_backend", "ray")
    ray = ray_binary(serve)
    start = _ray_start(ray, role)
    scratch = [ray_temp_dir(role)] if role.workdir else []
    if not role.head:
        return NodeCommand(start, role="ray-worker", env=dict(RAY_ENV), scratch=scratch)
    status = [ray, "status", "--address", f"{role.master_addr}:{role.master_port}"]
    script = ray_head_script(start, status, role.nnodes, serve)
    return NodeCommand(["sh", "-c", script], role="ray-head", env=dict(RAY_ENV), scratch=scratch)
