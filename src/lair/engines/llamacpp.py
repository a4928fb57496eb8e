"""llama.cpp's ``llama-server`` (``llamacpp``) and the same server from the ``xllamacpp`` wheel.

Neither splits one model across nodes by itself here: a multi-node recipe for them must give its
own ``entrypoint`` (the same command runs on every node, told its rank through ``LAIR_*`` env).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from lair.engines.base import EngineSpec, add_flag

if TYPE_CHECKING:
    from lair.recipe import Recipe

__all__ = ["LlamaCpp"]


class LlamaCpp(EngineSpec):
    name = "llamacpp"
    multinode = False
    secret_flags: ClassVar[dict[str, str]] = {"--api-key": "LLAMA_API_KEY"}  # llama-server reads it
    api_key_env = "LLAMA_API_KEY"

    def default_entrypoint(self, recipe: Recipe, python: str) -> list[str]:
        return ["llama-server", "-m", recipe.model]

    def serve_flags(self, recipe: Recipe, argv: list[str]) -> None:
        add_flag(argv, "--host", recipe.host)
        add_flag(argv, "--port", recipe.port)
        add_flag(argv, "--alias", recipe.served_model_name, "-a")
        add_flag(argv, "--ctx-size", recipe.max_model_len, "-c")
