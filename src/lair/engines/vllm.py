"""vLLM: ``vllm serve MODEL`` plus the flags recipe keys map to, and multi-node wiring.

Multi-node with ``distributed_backend = "mp"`` (vLLM's multiprocessing executor across nodes): every
node runs the same ``vllm serve`` with ``--nnodes N --node-rank R --master-addr HEAD
--master-port P``; ranks above 0 add ``--headless`` (no API server). Flag names as in vLLM's
"Parallelism and Scaling" guide, section "Running vLLM with MultiProcessing" (vLLM PR #30509,
docs/serving/parallelism_scaling.md) and ``ParallelConfig.master_port`` (default 29501).

With ``"ray"``: a Ray head on rank 0 (``ray start --head --port P --block``), ``ray start
--address HEAD:P --block`` on the others, then ``vllm serve ... --distributed-executor-backend
ray`` on the head once every node is up (the layout of vLLM's ``examples/online_serving/
run_cluster.sh``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lair.engines.base import EngineSpec, NodeCommand, Role, add_flag

if TYPE_CHECKING:
    from lair.recipe import Recipe

__all__ = ["VLLM"]


class VLLM(EngineSpec):
    name = "vllm"

    def default_entrypoint(self, recipe: Recipe, python: str) -> list[str]:
        return ["vllm", "serve", *([recipe.model] if recipe.model else [])]

    def serve_flags(self, recipe: Recipe, argv: list[str]) -> None:
        add_flag(argv, "--host", recipe.host)
        add_flag(argv, "--port", recipe.port)
        add_flag(argv, "--tensor-parallel-size", _over1(recipe.tensor_parallel_size), "-tp")
        add_flag(argv, "--pipeline-parallel-size", _over1(recipe.pipeline_parallel_size), "-pp")
        add_flag(argv, "--data-parallel-size", _over1(recipe.data_parallel_size), "-dp")
        add_flag(argv, "--served-model-name", recipe.served_model_name)
        add_flag(argv, "--gpu-memory-utilization", recipe.gpu_memory_utilization)
        add_flag(argv, "--kv-cache-dtype", recipe.kv_cache_dtype)
        add_flag(argv, "--max-model-len", recipe.max_model_len)

    def distributed(self, recipe: Recipe, role: Role, argv: list[str]) -> NodeCommand:
        if role.nnodes <= 1:
            add_flag(argv, "--distributed-executor-backend", recipe.distributed_backend)
            return NodeCommand(argv)
        if recipe.distributed_backend == "ray":
            return _ray(role, argv)
        add_flag(argv, "--distributed-executor-backend", "mp")
        add_flag(argv, "--nnodes", role.nnodes)
        add_flag(argv, "--node-rank", role.rank)
        add_flag(argv, "--master-addr", role.master_addr)
        add_flag(argv, "--master-port", role.master_port)
        if not role.head:
            add_flag(argv, "--headless", True)
        return NodeCommand(argv, role="head" if role.head else "worker")


def _over1(n: int) -> int | None:
    return n if n > 1 else None


def _ray(role: Role, serve: list[str]) -> NodeCommand:
    add_flag(serve, "--distributed-executor-backend", "ray")
    ip = ["--node-ip-address", role.address] if role.address else []
    if role.head:
        return NodeCommand(
            ["ray", "start", "--head", "--port", str(role.master_port), *ip, "--block"], serve, "ray-head"
        )
    address = f"{role.master_addr}:{role.master_port}"
    return NodeCommand(["ray", "start", "--address", address, *ip, "--block"], [], "ray-worker")
