"""SGLang: ``python3 -m sglang.launch_server --model-path MODEL`` and its multi-node flags.

Multi-node: ``--nnodes N --node-rank R --dist-init-addr HEAD:PORT`` on every node (SGLang's
``ServerArgs.nnodes / node_rank / dist_init_addr``); parallel sizes ``--tp-size`` / ``--pp-size``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lair.engines.base import EngineSpec, NodeCommand, Role, add_flag

if TYPE_CHECKING:
    from lair.recipe import Recipe

__all__ = ["SGLang"]


class SGLang(EngineSpec):
    name = "sglang"

    def default_entrypoint(self, recipe: Recipe, python: str) -> list[str]:
        return [python, "-m", "sglang.launch_server", "--model-path", recipe.model]

    def serve_flags(self, recipe: Recipe, argv: list[str]) -> None:
        add_flag(argv, "--host", recipe.host)
        add_flag(argv, "--port", recipe.port)
        tp, pp = recipe.tensor_parallel_size, recipe.pipeline_parallel_size
        add_flag(argv, "--tp-size", tp if tp > 1 else None, "--tensor-parallel-size", "--tp")
        add_flag(argv, "--pp-size", pp if pp > 1 else None, "--pipeline-parallel-size")
        add_flag(argv, "--served-model-name", recipe.served_model_name)
        add_flag(argv, "--mem-fraction-static", recipe.gpu_memory_utilization)
        add_flag(argv, "--kv-cache-dtype", recipe.kv_cache_dtype)
        add_flag(argv, "--context-length", recipe.max_model_len)

    def distributed(self, recipe: Recipe, role: Role, argv: list[str]) -> NodeCommand:
        if role.nnodes > 1:
            add_flag(argv, "--nnodes", role.nnodes)
            add_flag(argv, "--node-rank", role.rank)
            add_flag(argv, "--dist-init-addr", f"{role.master_addr}:{role.master_port}")
        return NodeCommand(argv, role="head" if role.head else "worker")
