"""SGLang: ``python3 -m sglang.launch_server --model-path MODEL`` and its multi-node flags.

Flags come from :data:`lair.engines.flags.SGLANG_FLAGS` (SGLang 0.5.23's ``ServerArgs``).
Multi-node: ``--nnodes N --node-rank R --dist-init-addr HEAD:PORT`` on every node; parallel sizes
``--tp-size`` / ``--pp-size`` / ``--dp-size``. Each node gets ``SGLANG_HOST_IP`` (its own address;
``sglang.srt.utils.network.get_local_ip_auto`` reads it first) and ``GLOO_SOCKET_IFNAME`` /
``NCCL_SOCKET_IFNAME``. lair adds ``--enable-metrics`` (``/metrics``) and ``--enable-cache-report``
(``cached_tokens`` in responses) unless the recipe sets ``metrics_flags = false``. SGLang has no
Ray launcher: ``distributed_backend = "ray"`` is refused by ``lair check``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lair.engines.base import EngineSpec, NodeCommand, Role
from lair.engines.flags import SGLANG_FLAGS

if TYPE_CHECKING:
    from lair.recipe import Recipe

__all__ = ["SGLang"]

F = SGLANG_FLAGS


class SGLang(EngineSpec):
    name = "sglang"
    host_ip_env = "SGLANG_HOST_IP"

    def default_entrypoint(self, recipe: Recipe, python: str) -> list[str]:
        return [python, "-m", "sglang.launch_server", "--model-path", recipe.model]

    def kv_cache_dtypes(self) -> tuple[str, ...]:
        return F.kv_cache_dtypes

    def serve_flags(self, recipe: Recipe, argv: list[str]) -> None:
        F.add(argv, "host", recipe.host)
        F.add(argv, "port", recipe.port)
        tp, pp, dp = recipe.tensor_parallel_size, recipe.pipeline_parallel_size, recipe.data_parallel_size
        F.add(argv, "tp_size", tp if tp > 1 else None)
        F.add(argv, "pp_size", pp if pp > 1 else None)
        F.add(argv, "dp_size", dp if dp > 1 else None)
        F.add(argv, "served_model_name", recipe.served_model_name)
        F.add(argv, "mem_fraction_static", recipe.gpu_memory_utilization)
        F.add(argv, "kv_cache_dtype", recipe.kv_cache_dtype)
        F.add(argv, "context_length", recipe.max_model_len)
        if recipe.metrics_flags:
            F.add(argv, "enable_metrics", True)
            F.add(argv, "enable_cache_report", True)

    def distributed(self, recipe: Recipe, role: Role, argv: list[str]) -> NodeCommand:
        if role.nnodes > 1:
            F.add(argv, "nnodes", role.nnodes)
            F.add(argv, "node_rank", role.rank)
            F.add(argv, "dist_init_addr", f"{role.master_addr}:{role.master_port}")
        return NodeCommand(argv, role="head" if role.head else "worker")
