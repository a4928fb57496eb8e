"""``lair mcp``: the registry's recipes, fits, plans, certificates and report comparisons as tools an
agent calls over the Model Context Protocol (the official ``mcp`` SDK, stdio or streamable HTTP).

Every tool reads; none launches, accepts or writes. ``plan_recipe`` pulls a revision as ``lair pull``
does (stamped untrusted) and plans it without an acceptance: an untrusted recipe's answer is what it
asks for and the command a human runs to read it and accept it, never the acceptance itself. Each
tool's input is a model of :mod:`lair.api_models`, the same definitions as the JSON API's query
parameters, so the tool schemas an agent sees are the API's."""

from __future__ import annotations

import functools
import json
import tempfile
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

from lair import __version__
from lair.api_models import FitQuery, RecipeQuery, RecipeRef, ReportPair, RowQuery
from lair.client.api import Client
from lair.errors import LairError, TrustError
from lair.launch.pulled import pull_revision
from lair.launch.resolve import Request, prepare
from lair.plan.plan_text import render_text
from lair.report.compare import compare, compare_text

__all__ = ["TOOLS", "build_server"]

INSTRUCTIONS = (
    "lair's recipe registry: find recipes for a rig (search_recipes), read one (show_recipe), check "
    "its memory fit on a GPU setup (fit_recipe), see exactly what it would run (plan_recipe), read a "
    "speed row's certificate (row_certificate) and compare two run reports (compare_reports). Nothing "
    "here launches: a recipe runs only when a person runs `lair launch` and accepts what it asks for."
)
READ_ONLY = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=True
)
TOOLS = ("search_recipes", "show_recipe", "fit_recipe", "plan_recipe", "row_certificate", "compare_reports")


def _located(exc: LairError) -> ToolError:
    hint = f" (hint: {exc.hint})" if exc.hint else ""
    return ToolError(f"{exc.message}{hint}")


def plan_text(client: Client, ref: RecipeRef, values: dict[str, str]) -> dict[str, Any]:
    """The revision's plan on this machine (nothing leased, no doctor, no acceptance), or what an
    untrusted revision asks for and how a person accepts it."""
    with tempfile.TemporaryDirectory(prefix="lair-mcp-") as tmp:
        path = Path(tmp) / f"{ref.slug}.toml"
        doc, sha = pull_revision(client, ref.slug, ref.revision, path)
        pinned = f"{ref.slug}@{doc['revision']}"
        req = Request(recipe=str(path), values=values, accept=False, doctor=False)
        try:
            prep = prepare(req, lease=False)
        except TrustError as exc:
            return {
                "recipe": pinned,
                "sha256": sha,
                "planned": False,
                "trusted": False,
                "asks_for": exc.risks,
                "message": exc.message,
                "consent": f"a person reads and accepts it: lair pull {pinned} && lair plan {ref.slug}.toml",
            }
        return {
            "recipe": pinned,
            "sha256": sha,
            "planned": True,
            "trusted": True,
            "plan": render_text(prep.plan),
        }


def certificate_of(client: Client, row: RowQuery) -> dict[str, Any]:
    """The speed row ``SLUG@REV#ROW`` of the recipe document: its tier, provenance and certificate."""
    slug, rev, row_id = row.parts
    doc = client.recipe(slug, rev)
    for m in doc.get("measurements") or []:
        if m.get("id") == row_id:
            keep = ("id", "row_id", "revision", "context", "concurrency", "decode_tok_s", "tier")
            out = {k: m.get(k) for k in keep}
            extra = ("provenance", "certificate", "certificate_missing", "energy", "retracted")
            return out | {k: m.get(k) for k in extra} | {"link": f"{doc['links']['page']}#row-{row_id}"}
    raise ToolError(f"{row.row_id}: revision {rev} of {slug} has no speed row {row_id}")


def build_server(client: Client | None = None) -> MCPServer:
    """The MCP server over one registry (default: the logged-in one, or LAIR_REGISTRY)."""
    api = client or Client()
    server: MCPServer = MCPServer("lair", instructions=INSTRUCTIONS, version=__version__)

    def guarded(fn: Any) -> Any:
        """A lair error becomes the tool's error result with its message and hint."""

        @functools.wraps(fn)  # the SDK reads the tool's schema from the wrapped signature
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except LairError as exc:
                raise _located(exc) from None

        return call

    @server.tool(annotations=READ_ONLY)
    @guarded
    def search_recipes(query: RecipeQuery) -> dict[str, Any]:
        """Search the registry's recipes by text and rig (GPU, GPU count, memory per GPU, engine,
        model, context); sort by votes, update time or decode speed at a context."""
        params = query.params()
        return api.search(params.pop("q", ""), **params)

    @server.tool(annotations=READ_ONLY)
    @guarded
    def show_recipe(ref: RecipeRef) -> dict[str, Any]:
        """One recipe (latest revision unless one is named): its launch config and metadata, speed
        and quality rows with their tiers, driver floor, history, and its TOML."""
        doc = api.recipe(ref.slug, ref.revision)
        return doc | {"toml": api.recipe_toml(ref.slug, ref.revision)}

    @server.tool(annotations=READ_ONLY)
    @guarded
    def fit_recipe(query: FitQuery) -> dict[str, Any]:
        """Will the recipe fit on GPUS x GPU at a context: memory per GPU, KV pool, max context, the
        speed ceilings and the predicted speed with its p10-p90 band (`prediction`), as the recipe
        page's fit widget shows them."""
        return api.fit(query.slug, query.gpu, query.gpus, query.context)

    @server.tool(annotations=READ_ONLY)
    @guarded
    def plan_recipe(ref: RecipeRef, values: dict[str, str] | None = None) -> dict[str, Any]:
        """Exactly what `lair launch` would run for the recipe on this machine, per node and step
        (nothing is started). A recipe from the registry is untrusted: the answer is then what it
        asks for and the command a person runs to read and accept it. `values`: placeholder values
        (never secrets)."""
        return plan_text(api, ref, dict(values or {}))

    @server.tool(annotations=READ_ONLY)
    @guarded
    def row_certificate(row: RowQuery) -> dict[str, Any]:
        """A speed row's certificate (how it was measured and checked: order, warm-up, cache, client,
        GPU and machine checks), its tier and provenance."""
        return certificate_of(api, row)

    @server.tool(annotations=READ_ONLY)
    @guarded
    def compare_reports(pair: ReportPair) -> dict[str, Any]:
        """Two stored run reports side by side: the cells they share, B against A in percent, and the
        same comparison as a Markdown table."""
        a = json.loads(api.report_file(pair.a, "results.json"))
        b = json.loads(api.report_file(pair.b, "results.json"))
        cmp = compare(a, b)
        return cmp | {"table": compare_text(cmp)}

    return server
