"""``xllamacpp``: llama.cpp's server from the wheel, run as ``PYTHON -m lair.engines.xllamacpp_server``.

``PYTHON`` is the interpreter the plan was given for the node: lair's own interpreter for the local
node (so the bundled example runs wherever lair is installed), ``python3`` elsewhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lair.engines.base import add_flag
from lair.engines.llamacpp import LlamaCpp

if TYPE_CHECKING:
    from lair.recipe import Recipe

__all__ = ["XLlamaCpp"]


class XLlamaCpp(LlamaCpp):
    name = "xllamacpp"
    server_module = "lair.engines.xllamacpp_server"
    python_modules = ("xllamacpp",)
    python_extra = "engines"

    def default_entrypoint(self, recipe: Recipe, python: str) -> list[str]:
        return [python, "-m", str(self.server_module), "--model", recipe.model]

    def serve_flags(self, recipe: Recipe, argv: list[str]) -> None:
        add_flag(argv, "--host", recipe.host)
        add_flag(argv, "--port", recipe.port)
        add_flag(argv, "--alias", recipe.served_model_name)
        add_flag(argv, "--ctx", recipe.max_model_len)
