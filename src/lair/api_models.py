"""The registry JSON API's query models, shared by the server's routes, the registry client and the
MCP server's tools: one definition of each parameter (name, type, bounds, meaning), so an agent's
tool schema and the API's query string cannot drift apart.

Kept outside :mod:`lair.registry` (the server extra) so that a base install with the ``mcp`` extra
validates the same way the server does."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["FitQuery", "RecipeQuery", "RecipeRef", "ReportPair", "RowQuery"]

SLUG = r"^[a-z0-9]+(?:-[a-z0-9]+)*$"
ROW_ID = r"^[a-z0-9]+(?:-[a-z0-9]+)*@[1-9][0-9]{0,8}#(?:row-)?[1-9][0-9]{0,17}$"
REPORT_ID = r"^[0-9a-f]{1,32}$"


class _Query(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class RecipeQuery(_Query):
    """``GET /api/v1/recipes``: full-text query and facet filters (all must match)."""

    q: str = Field("", max_length=200, description="full-text query over title, summary, model, tags, notes")
    gpu: str | None = Field(None, max_length=100, description="GPU model, e.g. RTX PRO 6000")
    gpus: int | None = Field(None, ge=1, le=4096, description="GPU count")
    min_vram: float | None = Field(None, ge=0, le=1e6, description="minimum VRAM per GPU (GB)")
    engine: str | None = Field(None, max_length=64, description="serving engine, e.g. vllm")
    model: str | None = Field(None, max_length=300, description="model id")
    tag: list[Annotated[str, Field(max_length=100)]] | None = Field(
        None, max_length=10, description="tags (all must match)"
    )
    min_context: int | None = Field(None, ge=1, le=10**9, description="minimum max context (tokens)")
    verified: bool = Field(
        False,
        description="verified only: recipes with verified numbers; sort=decode ranks by verified rows only",
    )
    sort: Literal["votes", "updated", "decode", "relevance"] = Field(
        "votes", description="sort order (descending); decode: see verified"
    )
    context: int | None = Field(None, ge=1, le=10**9, description="context of the decode speed to sort by")
    limit: int = Field(20, ge=1, le=100, description="page size")
    cursor: str | None = Field(None, max_length=500, description="next_cursor of the previous page")

    def params(self) -> dict[str, Any]:
        """The query string's parameters (defaults left out)."""
        out: dict[str, str] = {}
        for name, value in self.model_dump(exclude_defaults=True).items():
            out[name] = ("1" if value else "0") if isinstance(value, bool) else value
        return out


class RecipeRef(_Query):
    """One recipe (``slug``), at a revision or its latest."""

    slug: str = Field(..., pattern=SLUG, max_length=120)
    revision: int | None = Field(None, ge=1, le=999_999_999)


class FitQuery(RecipeRef):
    """``GET /api/v1/recipes/{slug}/fit``: the recipe's memory fit on a GPU setup."""

    gpu: str = Field(..., min_length=1, max_length=100, description="GPU name (see /api/v1/gpus)")
    gpus: int = Field(1, ge=1, le=1024)
    context: int | None = Field(None, ge=1, le=10**9, description="context to fit, tokens")


class RowQuery(_Query):
    """One speed row by its id, as the recipe page shows it: ``SLUG@REVISION#ROW``."""

    row_id: str = Field(..., pattern=ROW_ID, max_length=160, description="e.g. tiny-cpu@1#42")

    @property
    def parts(self) -> tuple[str, int, int]:
        m = re.match(r"^(?P<slug>[^@]+)@(?P<rev>\d+)#(?:row-)?(?P<row>\d+)$", self.row_id)
        assert m is not None  # the pattern above
        return m["slug"], int(m["rev"]), int(m["row"])


class ReportPair(_Query):
    """Two stored run reports, A and B (the report ids of ``/reports/{id}``)."""

    a: str = Field(..., pattern=REPORT_ID)
    b: str = Field(..., pattern=REPORT_ID)
