"""Engine knowledge: how each engine is started and wired for distributed serving.

    get_engine("vllm").command(recipe, Role(rank, nnodes, master_addr, master_port), python) -> NodeCommand

Modules: :mod:`~lair.engines.vllm`, :mod:`~lair.engines.sglang`, :mod:`~lair.engines.llamacpp`,
:mod:`~lair.engines.xllamacpp`, :mod:`~lair.engines.custom` (every other engine name). The HTTP
server behind ``xllamacpp`` is :mod:`lair.engines.xllamacpp_server`.
"""

from __future__ import annotations

from lair.engines.base import EngineSpec, NodeCommand, Role, add_flag, has_flag

__all__ = ["EngineSpec", "NodeCommand", "Role", "add_flag", "get_engine", "has_flag"]


def get_engine(name: str) -> EngineSpec:
    """The engine spec for ``name``; engines lair has no flag knowledge of act as ``custom``."""
    from lair.engines.custom import Custom
    from lair.engines.llamacpp import LlamaCpp
    from lair.engines.sglang import SGLang
    from lair.engines.vllm import VLLM
    from lair.engines.xllamacpp import XLlamaCpp

    table: dict[str, type[EngineSpec]] = {
        "vllm": VLLM,
        "sglang": SGLang,
        "llamacpp": LlamaCpp,
        "xllamacpp": XLlamaCpp,
    }
    return table.get(name, Custom)()
