"""The API's bodies and parameters as pydantic models: what each route returns and accepts, from which
:mod:`~lair.registry.web.openapi` generates the document's schemas and parameters.

Response models describe what the routes write (plain dicts built by the service layer); they are
never used to parse a response, and they allow properties they do not name, as the routes may add
one before the document does. Request bodies and parameters carry the bounds the routes check."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from lair.api_models import RecipeQuery
from lair.recipe import Recipe
from lair.registry.service.accounts import TOKEN_SCOPES
from lair.registry.service.energy import DEFAULT_PRICE_KWH, MAX_PRICE_KWH

__all__ = [
    "CostQuery",
    "Credentials",
    "Diff",
    "DiffQuery",
    "Done",
    "Efficiencies",
    "EfficiencyRow",
    "Error",
    "FitQuery",
    "Gpus",
    "Health",
    "HiddenRecipe",
    "HiddenUser",
    "ListQuery",
    "Me",
    "Published",
    "RawJson",
    "Recipe",
    "RecipeBody",
    "RecipeDocument",
    "RecipeList",
    "ReplicatesQuery",
    "Report",
    "ReportFilePath",
    "ReportLogPath",
    "ReportPath",
    "RetractBody",
    "Retracted",
    "RevisionPath",
    "Revoked",
    "RowPath",
    "SignedIn",
    "SlugPath",
    "SubmittedReport",
    "TokenBody",
    "TokenMade",
    "TokenPath",
    "Tokens",
    "UserPath",
    "Votes",
]

TIER = Literal["reported", "reported-by-report", "verified", "replicated"]
UPLOADED = Literal["verified", "reported-by-report"]
SCOPE = Literal["read", "publish"]
assert set(TOKEN_SCOPES) == {"read", "publish"}, "SCOPE follows the token scopes"
OK = Literal[True]
KEPT_FILE = r"^(results\.json|requests\.jsonl|fingerprint\.json|report\.md|eval_samples\.jsonl"
KEPT_FILE += r"|[\w.-]+\.recipe\.toml)$"
ROW_ID = r"^[a-z0-9]+(-[a-z0-9]+)*@[1-9][0-9]*#([1-9][0-9]*|report-[0-9a-f]+)$"


# -- responses --


class ErrorBody(BaseModel):
    code: str = Field(description="a stable name: not_found, invalid, conflict, ...")
    message: str
    status: int
    hint: str = ""
    errors: list[Any] = Field([], description="located recipe problems")
    reasons: list[str] = Field([], description="every reason a report was refused")


class Error(BaseModel):
    """The error envelope of every refusal."""

    ok: Literal[False]
    error: ErrorBody


class _Row(BaseModel):
    """What a speed row and a quality row share: who filed it, from which rig, and its tier."""

    id: int
    revision: int
    provenance: TIER
    note: str = Field(description="a reported-by-report row: why it is not verified")
    submitted_by: str | None
    created_at: str
    retracted: bool
    retracted_reason: str | None
    report_id: str | None
    rig: str | None
    tier: TIER
    rigs: int | None
    spread: float | None
    links: dict[str, str]


class Measurement(_Row):
    context: int
    concurrency: int
    prefill_tok_s: float | None
    decode_tok_s: float | None
    decode_tok_s_per_stream: float | None
    ttft_ms: float | None
    accounts: int | None
    filer_new: bool | None = Field(
        description="whether the account was new when it filed the row (null: not known)"
    )
    new_accounts: int | None = Field(description="accounts of the row's group that were new when they filed")
    new_account_replication: bool = Field(
        description="replicated only with the help of accounts that were new when they filed"
    )
    row_id: str = Field(description="the row's stable id, SLUG@REVISION#ID")
    replication: dict[str, Any] = Field(
        description="status of the counted attempts (pending, replicated, not-reproduced, mixed), "
        "counts and attempts[] (each with counted, not_counted and the account's standing)"
    )
    certificate: dict[str, Any] | None = Field(
        description="how the cell was measured: cache, client, order, warm-up, GPU, software"
    )
    certificate_missing: str | None = Field(description="why there is none")
    energy: dict[str, Any] | None = Field(description="J per output and prompt token, W, source")
    cost: dict[str, Any] = Field(description="price_kwh, usd_per_mtok_energy, why_none")


class Spread(BaseModel):
    min: float | None
    max: float | None


class QualityRow(_Row):
    suite: str
    metric: str
    score: float
    unit: str
    n: int | None
    stderr: float | None
    repeats: int | None
    repeat_spread: Spread | None
    flips: int | None


class LoadCell(BaseModel):
    """One open-loop cell as the registry recomputed it from ``load.jsonl`` (lair.bench.load)."""

    context: int
    step: int | None
    offered_rate: float
    cache: Literal["cold", "warm"]
    flags: list[str]
    provenance: TIER
    note: str
    requests: int
    completed: int
    achieved_rate: float | None
    completed_rate: float | None
    output_tok_s: float | None
    ttft_ms: dict[str, float] | None
    tpot_ms: dict[str, float] | None
    itl_ms: dict[str, float] | None
    e2e_ms: dict[str, float] | None
    send_error_ms: dict[str, float] | None
    failures: dict[str, int]
    oversaturated: bool | None
    slo_met: bool | None
    goodput_rps: float | None


class WarmCell(BaseModel):
    """One warm multi-turn cell as the registry recomputed it from ``sessions.jsonl``
    (lair.bench.warm): hit rates over its prompt tokens, declared by the workload, reported by the
    responses and counted by the engine; verified only when the last two agree."""

    context: int
    cache: Literal["warm"]
    flags: list[str]
    provenance: TIER
    note: str
    sessions: int
    turns: int
    turn_tokens: int
    requests: int
    completed: int
    prompt_tokens: int
    declared_reuse_tokens: int
    response_cached_tokens: int | None
    counter_hit_tokens: float | None
    counter_metric: str | None
    declared_hit_rate: float | None
    response_hit_rate: float | None
    counter_hit_rate: float | None
    hit_rates_agree: bool | None
    ttft_ms: dict[str, float] | None
    ttft_ms_by_turn: dict[str, dict[str, float] | None]
    tpot_ms: dict[str, float] | None
    failures: dict[str, int]


class LoadContext(BaseModel):
    context: int
    cells: list[LoadCell]
    warm: WarmCell | None = Field(None, description="the warm multi-turn cell at this context, if any")
    sweep: dict[str, Any] | None = Field(
        description="knee, slo, max_goodput, users (at user_speed tok/s each) and why the sweep stopped"
    )


class LoadRun(BaseModel):
    """One report's open-loop and warm cells, by context; shown apart from the speed rows, never
    ranked with them."""

    report_id: str
    revision: int
    rig: str | None
    submitted_by: str | None
    created_at: str
    links: dict[str, str]
    contexts: list[LoadContext]


class RevisionEntry(BaseModel):
    number: int
    sha256: str
    notes: str
    author: str
    created_at: str


class DriverFloor(BaseModel):
    driver: Any
    cuda: Any
    text: Any
    reason: Any
    source: Any
    source_url: Any
    source_date: Any


class GitSource(BaseModel):
    """The file and commit a revision was imported from (``lair registry import-git``)."""

    repo: str = Field(description="the repository as the operator gave it (a path or a URL)")
    path: str
    commit: str
    committed_at: str
    link: str | None = Field(description="the file at the commit on its forge (https repositories only)")


class RecipeDocument(BaseModel):
    """A recipe at one revision, with its measurements, quality rows and history."""

    ok: OK
    slug: str
    title: str
    revision: int
    sha256: str = Field(pattern="^[0-9a-f]{64}$")
    owner: str
    upstream: str | None
    upstream_revision: int | None
    votes: int
    created_at: str
    updated_at: str
    recipe: Recipe
    measurements: list[Measurement]
    price_kwh: float = Field(description="the $ per kWh of the rows' cost")
    quality: list[QualityRow]
    load: list[LoadRun] = Field([], description="open-loop runs (lair bench --rate/--sweep), newest first")
    source: GitSource | None = Field(
        None, description="where this revision came from (lair registry import-git)"
    )
    driver_floor: DriverFloor
    revisions: list[RevisionEntry]
    links: dict[str, Any]


class ListItem(BaseModel):
    slug: str
    title: str
    summary: str
    engine: str
    gpu_model: str | None
    gpu_count: int | None
    vram_gb: float | None
    model: str | None
    max_context: int | None
    license: str | None
    tags: list[str]
    votes: int
    revision: int
    updated_at: str
    best_decode_tok_s: float | None
    best_verified_decode_tok_s: float | None
    verified: bool
    url: str
    api_url: str


class RecipeList(BaseModel):
    """One page of the search."""

    ok: OK
    items: list[ListItem]
    count: int
    next_cursor: str | None


class Report(BaseModel):
    """A stored run report."""

    ok: OK
    id: str
    slug: str
    revision: int
    rig_fingerprint: str
    fingerprint: dict[str, Any]
    files: list[str]
    run_name: str
    created_at: str


class SubmittedRow(BaseModel):
    context: int
    concurrency: int
    prompt_tokens: int | None
    ttft_ms: float | None
    prefill_tok_s: float | None
    decode_tok_s: float | None
    decode_tok_s_per_stream: float | None
    roofline: dict[str, Any] = Field(description="% of the roofline, or why it is missing")
    provenance: UPLOADED
    note: str = Field(description="why a reported-by-report row is not verified")
    energy: dict[str, Any] | None = Field(
        description="the certificate's energy: J per token, tokens per kWh, watts, $/Mtok"
    )
    certificate: dict[str, Any] | None = Field(description="what the recipe page shows of it")


class SubmittedQuality(BaseModel):
    suite: str
    metric: str
    score: float
    unit: str
    n: int
    stderr: float | None
    repeats: int
    spread_min: float
    spread_max: float
    flips: int | None
    provenance: UPLOADED
    note: str


class SubmittedReport(BaseModel):
    """The stored report, its verified speed and quality rows."""

    ok: OK
    id: str = Field(pattern="^[0-9a-f]{16}$")
    slug: str
    revision: int = Field(ge=1)
    rows: list[SubmittedRow]
    quality: list[SubmittedQuality]
    load: list[dict[str, Any]] = Field(
        [], description="the open-loop cells (kind rate) and sweep headlines (kind sweep) recomputed"
    )
    url: str
    report_url: str
    replication: list[Any] = Field([], description="with ?replicates: each linked row's verdict")


class Gpus(BaseModel):
    ok: OK
    gpus: list[dict[str, Any]]


class EfficiencyRow(BaseModel):
    """A verified row as fractions of its roofline (:class:`lair.fit.predict.EfficiencyRow`)."""

    id: str = Field(description="the row's id, slug@revision#id")
    engine: str = Field(description="the engine of the row's recipe revision")
    model_class: Literal["dense", "moe", "mla"]
    weight_format: str = Field(description="the weight format of the registry's model facts, e.g. bf16, fp8")
    decode: float | None = Field(description="decode tok/s / its roofline (aggregate at concurrency > 1)")
    prefill: float | None = Field(description="prefill tok/s / its roofline")
    decode_tok_s: float | None
    decode_roofline_tok_s: float | None
    gpu: str = Field(description="the GPUs of the report's fingerprint, e.g. 2x NVIDIA H100 80GB HBM3")
    context: int
    concurrency: int
    link: str = Field(description="the row on its recipe page (a path on this registry)")
    source: Literal["registry"]


class Efficiencies(BaseModel):
    ok: OK
    count: int
    rows: list[EfficiencyRow] = Field(description="every verified row the registry can rate, newest first")


class Published(BaseModel):
    ok: OK
    slug: str
    revision: int


class Votes(BaseModel):
    ok: OK
    votes: int = Field(ge=0)


class Diff(BaseModel):
    ok: OK
    from_: int = Field(alias="from")
    to: int
    diff: str


class Retracted(BaseModel):
    ok: OK
    retracted: int


class HiddenRecipe(BaseModel):
    ok: OK
    slug: str
    hidden: bool


class HiddenUser(BaseModel):
    ok: OK
    name: str
    hidden: bool


class TokenMade(BaseModel):
    """A new API token: its value is shown in this answer only."""

    ok: OK
    token: str
    id: int
    name: str
    scope: SCOPE


class Tokens(BaseModel):
    ok: OK
    tokens: list[dict[str, Any]]


class Revoked(BaseModel):
    ok: OK
    revoked: int


class Me(BaseModel):
    """The account a token or session acts as."""

    name: str
    admin: bool
    scopes: list[SCOPE]


class SignedIn(BaseModel):
    """A session: its cookie is set; writes with it send ``csrf`` as the X-CSRF-Token header."""

    ok: OK
    name: str
    csrf: str


class Done(BaseModel):
    ok: OK


class Health(BaseModel):
    ok: OK
    database: Literal["ok"]
    version: int


RawJson: dict[str, Any] = {"type": ["object", "array"], "description": "results.json or fingerprint.json"}


# -- request bodies --


class RecipeBody(BaseModel):
    toml: str
    notes: str = ""


class RetractBody(BaseModel):
    reason: str = Field(min_length=1, pattern=r"\S")


class TokenBody(BaseModel):
    name: str = Field(min_length=1, max_length=100)
    scope: SCOPE


class Credentials(BaseModel):
    name: str
    password: str


# -- parameters (path, query): each model's fields are one operation's parameters --

Slug = Annotated[str, Field(pattern="^[a-z0-9-]{1,200}$", examples=["tiny-cpu"])]
ReportId = Annotated[str, Field(pattern="^[0-9a-f]{16}$")]
RowNumber = Annotated[int, Field(ge=1, le=2**62 - 1, examples=[1])]
Revision = Annotated[int, Field(ge=1, le=10**9)]


class SlugPath(BaseModel):
    slug: Slug


class RevisionPath(BaseModel):
    slug: Slug
    n: int = Field(ge=1, examples=[1])


class ReportPath(BaseModel):
    id: ReportId


class ReportFilePath(BaseModel):
    id: ReportId
    name: str = Field(pattern=KEPT_FILE)


class ReportLogPath(BaseModel):
    id: ReportId
    log: str = Field(pattern=r"^[\w.-]+\.log$")


class UserPath(BaseModel):
    name: str = Field(pattern="^[a-z0-9-]{1,40}$", examples=["tester"])


class RowPath(BaseModel):
    id: RowNumber


class TokenPath(BaseModel):
    id: RowNumber


ListQuery = RecipeQuery  # one definition of the list's parameters: the API's, the client's and the MCP tools'


class FitQuery(BaseModel):
    gpu: str = Field(max_length=100, description="GPU model, e.g. H200")
    gpus: int | None = Field(None, ge=1, le=1024, description="GPU count (default 1)")
    context: int | None = Field(None, ge=1, le=10**9, description="context (tokens)")


class CostQuery(BaseModel):
    price_kwh: float | None = Field(
        None, gt=0, le=MAX_PRICE_KWH, description=f"$ per kWh (default {DEFAULT_PRICE_KWH:g})"
    )


class DiffQuery(BaseModel):
    from_: Revision = Field(alias="from")
    to: Revision


class ReplicatesQuery(BaseModel):
    replicates: str | None = Field(
        None,
        pattern=ROW_ID,
        description="the row id (SLUG@REV#ROW, or #report-ID) this report is a replication attempt of",
        examples=["tiny-cpu@1#1"],
    )
