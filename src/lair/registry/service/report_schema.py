"""The typed documents of an uploaded run report: ``results.json``, each ``requests.jsonl`` row and
``fingerprint.json``, as lair's bench and report writers produce them (:mod:`lair.bench.runner`'s
``request_rows``, :mod:`lair.bench.results`, :mod:`lair.report.folder`, :mod:`lair.report.fingerprint`).

Every field the registry reads has an exact type (strict: ``"3"`` is no number, ``true`` no count),
a finite value (NaN, infinities, ``1e400`` and integers of more than ``MAX_INT_DIGITS`` digits are
refused wherever they are, by the field's path), a range (times and counts ``>= 0``, with an upper bound) and
bounded lengths; a row's ``chunk_ms`` never go backwards. Fields the registry does not read are kept
as they are (a newer bench may add some) but must be plain JSON no deeper than ``MAX_DEPTH`` levels,
with strings of at most ``MAX_TEXT`` characters.

:func:`parse_document` and :func:`parse_rows` never raise: each failure is one reason naming the file
and the field path (``requests.jsonl line 3: chunk_ms.2: must be >= the previous chunk time``), the
line of a 422 ``report_refused``.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

__all__ = [
    "MAX_DEPTH",
    "MAX_REASONS",
    "MAX_ROWS",
    "Fingerprint",
    "LoadRow",
    "RequestRow",
    "Results",
    "SampleRow",
    "SessionRow",
    "parse_document",
    "parse_rows",
]

MAX_DEPTH = 16
"""Nesting of a document (a real ``results.json`` is 6 deep)."""
MAX_INT_DIGITS = 20
MAX_TEXT = 100_000
MAX_LIST = 1 << 17
"""Items of one list (chunks of one request: at most one per token)."""
MAX_ROWS = 200_000
"""Lines of ``requests.jsonl`` (a bench of 10 contexts x 256 streams x 3 repeats is 7,680)."""
MAX_BYTES = {"results.json": 4 << 20, "fingerprint.json": 1 << 20}
MAX_LINE = 4 << 20
MAX_REASONS = 50
"""Reasons listed per file; past them, one more says how many lines were not checked."""
MAX_MS = 1e10
"""Largest time in ms (115 days: far above any bench's timeout)."""
MAX_COUNT = 10**12
MAX_RATE = 1e12

_Ms = Annotated[float, Field(ge=0, le=MAX_MS)]
_Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
_Rate = Annotated[float, Field(ge=0, le=MAX_RATE)]
_Name = Annotated[str, Field(max_length=1000)]


class _Parsed(ValueError):
    """A document the JSON parser refuses, with the reason."""


class _Bad:
    """A number JSON holds but lair refuses (NaN, an infinity, ``1e400``, an integer of thousands of
    digits), kept in its place so the schema names the field it is in."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why

    def __repr__(self) -> str:
        return self.why


def _constant(name: str) -> _Bad:
    return _Bad(f"{name} is not a finite number")


def _finite_float(text: str) -> float | _Bad:
    value = float(text)
    return value if math.isfinite(value) else _Bad(f"{text[:40]} is out of range (numbers must be finite)")


def _bounded_int(text: str) -> int | _Bad:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        return _Bad(f"an integer of {len(text):,} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def loads(raw: bytes | str) -> Any:
    """JSON whose refused numbers are kept as :class:`_Bad` markers in their places (the schema then
    refuses each with its path); a :class:`ValueError` with the reason when it is no JSON at all."""
    try:
        return json.loads(raw, parse_constant=_constant, parse_float=_finite_float, parse_int=_bounded_int)
    except RecursionError:
        raise _Parsed("nested too deeply for the parser") from None


def _plain(key: str, value: Any, depth: int) -> str | None:
    """Why ``value`` is not plain bounded JSON, as ``@path: why`` (None when it is); iterative."""
    stack = [(value, depth, key)]
    while stack:
        v, d, at = stack.pop()
        if d > MAX_DEPTH:
            return f"@{at}: nested deeper than {MAX_DEPTH} levels"
        if isinstance(v, _Bad):
            return f"@{at}: {v.why}"
        if isinstance(v, str) and len(v) > MAX_TEXT:
            return f"@{at}: text of {len(v):,} characters (at most {MAX_TEXT:,})"
        if isinstance(v, list):
            if len(v) > MAX_LIST:
                return f"@{at}: {len(v):,} items (at most {MAX_LIST:,})"
            stack += [(x, d + 1, f"{at}.{i}") for i, x in enumerate(v)]
        elif isinstance(v, dict):
            stack += [(x, d + 1, f"{at}.{k}") for k, x in v.items()]
    return None


class _Doc(BaseModel):
    """Strict types for the fields lair reads; any other field kept, if it is plain bounded JSON."""

    model_config = ConfigDict(strict=True, extra="allow", allow_inf_nan=False)

    @model_validator(mode="after")
    def _extras_are_plain(self) -> _Doc:
        for key, value in (self.model_extra or {}).items():
            if (why := _plain(key, value, 1)) is not None:
                raise ValueError(why)
        return self


class EngineMetrics(_Doc):
    prefix_cache_hits_delta: float | None = Field(None, ge=0)
    counters_delta: dict[_Name, float] = Field(default_factory=dict, max_length=1000)


_Float = Annotated[float, Field(ge=0, le=MAX_RATE)]
_Seconds = Annotated[float, Field(ge=0, le=MAX_MS / 1000)]
_Throttle = Literal[
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "display_clock_setting",
]


class CacheCertificate(_Doc):
    """:class:`lair.bench.results.CacheCertificate`: the prefix cache around the cell's repeats."""

    metric: _Name | None
    hits_before: list[_Float | None] = Field(max_length=10_000)
    hits_after: list[_Float | None] = Field(max_length=10_000)
    counter_hit_tokens: Annotated[float, Field(ge=-MAX_RATE, le=MAX_RATE)] | None
    response_cached_tokens: _Count | None
    proven_by: list[Literal["engine-counter", "responses"]] = Field(max_length=2)
    cold: bool


class ClientCertificate(_Doc):
    """:class:`lair.bench.results.ClientCertificate`: the bench's own load and its verdict."""

    cpu_fraction_max: Annotated[float, Field(ge=0, le=1000)]
    loop_lag_p99_ms_max: _Ms
    batched_lag_p99_ms_max: _Ms
    read_interval_ms: _Ms
    bound: bool
    limits: dict[_Name, _Float] = Field(max_length=16)


class Span(_Doc):
    min: _Float
    max: _Float


class GpuWindow(_Doc):
    """:func:`lair.bench.telemetry.summarize_window`: what the GPUs did during the cell."""

    samples: _Count
    gpus: Annotated[int, Field(ge=0, le=4096)]
    energy_j: _Float | None
    energy_source: Literal["counter", "power-integral"] | None
    avg_w: _Float | None
    peak_w: _Float | None
    sm_clock_mhz: Span | None
    mem_clock_mhz: Span | None
    temp_c_max: Annotated[float, Field(ge=-100, le=300)] | None
    mem_used_mib_max: _Float | None
    throttle_reasons: list[_Throttle] = Field(max_length=16)
    thermal_throttled: bool
    power_throttled: bool


class Usd(_Doc):
    energy: _Float | None
    hardware: _Float | None
    total: _Float | None


class Energy(_Doc):
    """:func:`lair.bench.certificate.energy_figures`: joules per token, tokens per kWh, watts, $/Mtok."""

    energy_j: _Float
    energy_source: Literal["counter", "power-integral"] | None
    seconds: _Seconds
    output_tokens: _Count
    prompt_tokens: _Count
    j_per_output_token: _Float | None
    j_per_prompt_token: _Float | None
    output_tokens_per_kwh: _Float | None
    avg_w: _Float
    peak_w: _Float | None
    output_tok_s: _Float | None
    usd_per_mtok: Usd | None


class MachineCertificate(_Doc):
    """:class:`lair.bench.results.MachineCertificate`: what else used the machine, the ``noisy``
    verdict (:mod:`.noise` reads it) and its reasons."""

    cpu: dict[_Name, _Float | None] = Field(max_length=32)
    engine_cpu: Annotated[str, Field(max_length=MAX_TEXT)]
    repeat_spread: dict[_Name, _Float] = Field(max_length=16)
    noisy: bool
    reasons: list[_Name] = Field(max_length=64)
    limits: dict[_Name, _Float] = Field(max_length=16)


class OutputCertificate(_Doc):
    """:class:`lair.bench.results.OutputCertificate`: the validity gate on the cell's answers
    (:mod:`.output_gate` reads it)."""

    checked: _Count
    invalid: _Count
    examples: list[dict[_Name, Annotated[str, Field(max_length=MAX_TEXT)] | _Count]] = Field(max_length=16)
    token_bounds: list[_Count] | None = Field(None, max_length=2)
    valid: bool


class CellCertificate(_Doc):
    """:class:`lair.bench.results.CellCertificate`: how one cell was measured (every field required)."""

    position: Annotated[int, Field(ge=0, le=1 << 20)]
    started_s: _Seconds
    duration_s: _Seconds
    idle_gap_s: _Seconds
    cache: CacheCertificate
    client: ClientCertificate
    gpu: GpuWindow | None
    energy: Energy | None = None
    machine: MachineCertificate | None = None
    output: OutputCertificate | None = None


class Software(_Doc):
    engine: _Name | None = None
    engine_version: _Name | None = None
    engine_commit: _Name | None = None
    driver: _Name | None = None
    cuda: _Name | None = None
    nvml: _Name | None = None
    image_digest: _Name | None = None
    gpus: list[_Name | None] = Field(default_factory=list, max_length=4096)


class RunCertificate(_Doc):
    """:class:`lair.bench.results.RunCertificate`: order, warm-up, telemetry, software."""

    order: Literal["shuffled", "fixed"]
    seed: Annotated[int, Field(ge=0, le=2**63)] | None
    cells_in_order: list[Annotated[list[_Count], Field(min_length=2, max_length=2)]] = Field(max_length=4096)
    warmup_requests: _Count
    idle_gap_s: _Seconds
    telemetry: Literal["nvml", "nvidia-smi", "none"]
    telemetry_note: Annotated[str, Field(max_length=MAX_TEXT)]
    telemetry_interval_s: _Seconds
    software: Software
    pricing: dict[_Name, _Float | None] = Field(default_factory=dict, max_length=16)


class Cell(_Doc):
    """One (context, concurrency) cell of ``results.json`` (:class:`lair.bench.CellResult`)."""

    context: _Count
    concurrency: Annotated[int, Field(ge=1, le=1 << 20)]
    repeats: _Count | None = None
    prompt_tokens: _Count | None = None
    ttft_ms_p50: _Ms | None = None
    ttft_ms_p90: _Ms | None = None
    prefill_tok_s: _Rate | None = None
    decode_tok_s_per_stream: _Rate | None = None
    decode_tok_s_aggregate: _Rate | None = None
    completion_tokens: _Count | None = None
    cached_tokens: _Count | None = None
    cache_hit: bool | None = None
    client_bound: bool | None = None
    output_length_ok: bool | None = None
    errors: _Count | None = None
    flags: list[Annotated[str, Field(max_length=1000)]] = Field(default_factory=list, max_length=100)
    client: dict[_Name, Annotated[float, Field(ge=0, le=MAX_RATE)]] = Field(
        default_factory=dict, max_length=100
    )
    engine_metrics: list[EngineMetrics] = Field(default_factory=list, max_length=10_000)
    certificate: CellCertificate | None = None


class Options(_Doc):
    """The bench options the recomputation reads."""

    decode_tokens: _Count = 0
    force_output: bool = True
    read_interval_ms: _Ms = 0.0


_Pcts = dict[Annotated[str, Field(max_length=8)], Annotated[float, Field(ge=-MAX_MS, le=MAX_MS)]]


class LoadCell(_Doc):
    """One open-loop cell of ``bench.load`` (:func:`lair.bench.load.load_figures` and its flags)."""

    context: _Count
    step: Annotated[int, Field(ge=0, le=1 << 16)]
    offered_rate: Annotated[float, Field(gt=0, le=1e6)]
    cache: Literal["cold", "warm"] = "cold"
    requests: _Count
    completed: _Count
    flags: list[Annotated[str, Field(max_length=100)]] = Field(default_factory=list, max_length=100)
    client_cpu_fraction: Annotated[float, Field(ge=0, le=1e6)] | None = None


class LoadSweep(_Doc):
    """One context's sweep headline (:func:`lair.bench.load.sweep_summary`)."""

    context: _Count
    stopped: Annotated[str, Field(max_length=1000)] = ""


class LoadSection(_Doc):
    """``bench.load`` (:func:`lair.bench.openloop.run_load`): how requests arrived and the cells."""

    arrival: Literal["poisson", "gamma", "constant"] = "poisson"
    burstiness: Annotated[float, Field(gt=0, le=1e6)] = 1.0
    seed: Annotated[int, Field(ge=0, le=1 << 62)] = 0
    slo: list[Annotated[str, Field(max_length=200)]] = Field(default_factory=list, max_length=20)
    user_speed: Annotated[float, Field(gt=0, le=1e7)] | None = None
    cells: list[LoadCell] = Field(default_factory=list, max_length=4096)
    sweeps: list[LoadSweep] = Field(default_factory=list, max_length=1024)


class WarmCell(_Doc):
    """One warm multi-turn cell of ``bench.sessions`` (:mod:`lair.bench.sessions`): its shape, its
    engine-counter reading and its flags; the figures are recomputed from ``sessions.jsonl``."""

    context: _Count
    sessions: Annotated[int, Field(ge=1, le=4096)]
    turns: Annotated[int, Field(ge=1, le=1024)]
    turn_tokens: _Count
    cache: Literal["warm"] = "warm"
    counter_hit_tokens: Annotated[float, Field(ge=0, le=1e15)] | None = None
    counter_metric: Annotated[str, Field(max_length=200)] | None = None
    client_cpu_fraction: Annotated[float, Field(ge=0, le=1e6)] | None = None
    flags: list[Annotated[str, Field(max_length=100)]] = Field(default_factory=list, max_length=100)


class SessionSection(_Doc):
    """``bench.sessions`` (:func:`lair.bench.sessions.run_sessions`): one warm cell per context."""

    sessions: Annotated[int, Field(ge=1, le=4096)]
    turns: Annotated[int, Field(ge=1, le=1024)]
    turn_tokens: _Count
    cells: list[WarmCell] = Field(default_factory=list, max_length=1024)


class Bench(_Doc):
    options: Options = Field(default_factory=Options)
    cells: list[Cell] = Field(default_factory=list, max_length=4096)
    certificate: RunCertificate | None = None
    load: LoadSection | None = None
    sessions: SessionSection | None = None


class RecipeInfo(_Doc):
    file: _Name | None = None
    model_sha256: Annotated[str, Field(max_length=64)] | None = None


class Gpus(_Doc):
    vendor: _Name | None = None
    """"amd" when amd-smi named the GPUs (lair's bench has no telemetry for them); else NVIDIA's."""
    count: Annotated[int, Field(ge=0, le=4096)] | None = None
    models: list[_Name] = Field(default_factory=list, max_length=64)
    memory: list[_Name] = Field(default_factory=list, max_length=4096)


class Cpu(_Doc):
    model: _Name | None = None
    count: Annotated[int, Field(ge=0, le=1 << 20)] | None = None
    arch: _Name | None = None


class Fingerprint(_Doc):
    """``fingerprint.json`` (:func:`lair.report.fingerprint.fingerprint`): the rig's hardware."""

    gpus: Gpus | None = None
    cpu: Cpu | None = None
    ram_bytes: Annotated[int, Field(ge=0, le=1 << 60)] | None = None


class Spread(_Doc):
    min: float | None = None
    max: float | None = None
    flips: _Count | None = None


class Suite(_Doc):
    """One evaluated suite (:class:`lair.eval.SuiteResult`)."""

    suite: _Name
    kind: _Name | None = None
    metric: _Name | None = None
    n: _Count | None = None
    repeats: _Count | None = None
    score: float | None = None
    stderr: float | None = None
    spread: Spread | None = None


class EvalOptions(_Doc):
    data: dict[_Name, _Name] = Field(default_factory=dict, max_length=1000)
    limit: _Count | None = None
    seed: int | None = None
    needle_depths: list[Annotated[float, Field(ge=0, le=1)]] | None = Field(None, max_length=1000)


class Evaluation(_Doc):
    suites: list[Suite] = Field(default_factory=list, max_length=1000)
    options: EvalOptions = Field(default_factory=EvalOptions)


class Imported(_Doc):
    """``imported`` of a report made from a peer's result file (``lair import-results``)."""

    tool: _Name
    version: _Name
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    file: _Name | None = None
    recomputed: bool = False
    differs: list[Annotated[str, Field(max_length=MAX_TEXT)]] = Field(default_factory=list, max_length=100)


class Results(_Doc):
    """``results.json`` of a report folder (:func:`lair.report.folder.write_run_report`)."""

    kind: Literal["lair.run_report"]
    schema_version: Annotated[int, Field(ge=0, le=1000)] | None = None
    run_name: Annotated[str, Field(max_length=10_000)] | None = None
    recipe: RecipeInfo | None = None
    bench: Bench
    fingerprint: Fingerprint | None = None
    eval: Evaluation | None = None
    imported: Imported | None = None


def _ascending_ms(times: list[float]) -> list[float]:
    for i in range(1, len(times)):
        if times[i] < times[i - 1]:
            raise ValueError(f"@{i}: must be >= the previous chunk time ({times[i - 1]} ms)")
    return times


class RequestRow(_Doc):
    """One line of ``requests.jsonl`` (:func:`lair.bench.runner.request_rows`): ms from the repeat's
    first send (``send_ms``) and from the request's own send (``ttft_ms``, ``chunk_ms``)."""

    context: _Count
    concurrency: Annotated[int, Field(ge=1, le=1 << 20)]
    repeat: Annotated[int, Field(ge=0, le=1 << 20)]
    index: _Count | None = None
    send_ms: _Ms
    ttft_ms: _Ms | None = None
    decode_tok_s: _Rate | None = None
    prompt_tokens: _Count | None = None
    completion_tokens: _Count | None = None
    cached_tokens: _Count | None = None
    status: Annotated[int, Field(ge=0, le=999)] | None = None
    error: Annotated[str, Field(max_length=MAX_TEXT)] | None = None
    chunk_ms: list[_Ms] = Field(default_factory=list, max_length=MAX_LIST)
    chunk_tokens: list[Annotated[float, Field(ge=0, le=1e7)]] = Field(
        default_factory=list, max_length=MAX_LIST
    )

    @field_validator("chunk_ms")
    @classmethod
    def _ascending(cls, times: list[float]) -> list[float]:
        return _ascending_ms(times)


class LoadRow(_Doc):
    """One line of ``load.jsonl`` (:func:`lair.bench.openloop.load_rows`): ms after the cell's first
    scheduled send (``scheduled_ms``, ``send_ms``) or after the request's own send (``ttft_ms``,
    ``chunk_ms``, ``done_ms``)."""

    load: Literal["rate"] = "rate"
    rate: Annotated[float, Field(gt=0, le=1e6)]
    step: Annotated[int, Field(ge=0, le=1 << 16)]
    context: _Count
    index: _Count
    scheduled_ms: _Ms
    send_ms: _Ms | None = None
    send_error_ms: Annotated[float, Field(ge=-MAX_MS, le=MAX_MS)] | None = None
    in_flight: _Count = 0
    ttft_ms: _Ms | None = None
    done_ms: _Ms | None = None
    decode_tok_s: _Rate | None = None
    prompt_tokens: _Count | None = None
    completion_tokens: _Count | None = None
    cached_tokens: _Count | None = None
    status: Annotated[int, Field(ge=0, le=999)] | None = None
    error: Annotated[str, Field(max_length=MAX_TEXT)] | None = None
    chunk_ms: list[_Ms] = Field(default_factory=list, max_length=MAX_LIST)
    chunk_tokens: list[Annotated[float, Field(ge=0, le=1e7)]] = Field(
        default_factory=list, max_length=MAX_LIST
    )
    output_check: Annotated[str, Field(max_length=MAX_TEXT)] = ""

    @field_validator("chunk_ms")
    @classmethod
    def _ascending(cls, times: list[float]) -> list[float]:
        return _ascending_ms(times)


class SessionRow(_Doc):
    """One line of ``sessions.jsonl`` (:mod:`lair.bench.sessions`): ms after the cell's first send
    (``send_ms``) or after the request's own send (``ttft_ms``, ``chunk_ms``, ``done_ms``)."""

    load: Literal["session"] = "session"
    context: _Count
    session: Annotated[int, Field(ge=0, le=4096)]
    turn: Annotated[int, Field(ge=0, le=1024)]
    send_ms: _Ms | None = None
    ttft_ms: _Ms | None = None
    done_ms: _Ms | None = None
    decode_tok_s: _Rate | None = None
    prompt_tokens: _Count | None = None
    completion_tokens: _Count | None = None
    cached_tokens: _Count | None = None
    declared_reuse_tokens: _Count = 0
    status: Annotated[int, Field(ge=0, le=999)] | None = None
    error: Annotated[str, Field(max_length=MAX_TEXT)] | None = None
    chunk_ms: list[_Ms] = Field(default_factory=list, max_length=MAX_LIST)
    chunk_tokens: list[Annotated[float, Field(ge=0, le=1e7)]] = Field(
        default_factory=list, max_length=MAX_LIST
    )
    output_check: Annotated[str, Field(max_length=MAX_TEXT)] = ""

    @field_validator("chunk_ms")
    @classmethod
    def _ascending(cls, times: list[float]) -> list[float]:
        return _ascending_ms(times)


class SampleRow(_Doc):
    """One line of ``eval_samples.jsonl`` (:class:`lair.eval.SampleRecord` and its suite)."""

    suite: _Name
    doc_id: _Count
    repeat: Annotated[int, Field(ge=0, le=1 << 20)] = 0
    score: float
    verdict: _Name
    output: Annotated[str, Field(max_length=1 << 20)] = ""
    target: Annotated[str, Field(max_length=1 << 20)] = ""


def _where(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(x) for x in loc) or "(document)"


def _reasons(prefix: str, exc: ValidationError) -> list[str]:
    out = []
    for err in exc.errors(include_url=False):
        bad = err.get("input")
        msg = bad.why if isinstance(bad, _Bad) else str(err["msg"]).removeprefix("Value error, ")
        loc = tuple(err["loc"])
        if msg.startswith("@"):  # a validator named the place below its field: chunk_ms + 2
            at, _, msg = msg[1:].partition(": ")
            loc = (*loc, *at.split("."))
        out.append(f"{prefix}: {_where(loc)}: {msg}")
    return out


def _oversized(name: str, raw: bytes) -> str | None:
    limit = MAX_BYTES.get(name)
    if limit is not None and len(raw) > limit:
        return f"{name} is {len(raw):,} bytes (at most {limit:,})"
    return None


def parse_document(name: str, raw: bytes, model: type[_Doc]) -> tuple[dict[str, Any] | None, list[str]]:
    """(the document as parsed, []) or (None, every reason it is refused); ``model`` is
    :class:`Results` or :class:`Fingerprint`."""
    if (why := _oversized(name, raw)) is not None:
        return None, [why]
    try:
        doc = loads(raw)
    except ValueError as exc:
        return None, [f"{name} is not JSON: {exc}"]
    if not isinstance(doc, dict):
        return None, [f"{name}: (document): must be a JSON object, not {_kind(doc)}"]
    try:
        model.model_validate(doc)
    except ValidationError as exc:
        return None, _reasons(name, exc)[:MAX_REASONS]
    return doc, []


def _kind(value: Any) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


def parse_rows(
    raw: bytes, name: str = "requests.jsonl", model: type[_Doc] = RequestRow
) -> tuple[list[dict[str, Any]], list[str]]:
    """(the rows of a JSON Lines file as parsed, every reason one is refused); ``model`` is
    :class:`RequestRow` or :class:`SampleRow`."""
    if (why := _oversized(name, raw)) is not None:
        return [], [why]
    if (count := raw.count(b"\n")) > MAX_ROWS:  # counted before a list of lines is made
        return [], [f"{name} has {count:,} lines (at most {MAX_ROWS:,})"]
    lines = raw.split(b"\n")
    rows: list[dict[str, Any]] = []
    reasons: list[str] = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        if len(reasons) >= MAX_REASONS:
            reasons.append(f"{name}: lines after {i} not checked ({MAX_REASONS} reasons already)")
            break
        row, refused = _row(line, f"{name} line {i + 1}", model)
        reasons += refused
        if row is not None:
            rows.append(row)
    return rows, reasons


def _row(line: bytes, where: str, model: type[_Doc]) -> tuple[dict[str, Any] | None, list[str]]:
    if len(line) > MAX_LINE:
        return None, [f"{where}: {len(line):,} bytes (at most {MAX_LINE:,})"]
    try:
        row = loads(line)
    except ValueError as exc:
        return None, [f"{where} is not JSON: {exc}"]
    if not isinstance(row, dict):
        return None, [f"{where}: (row): must be a JSON object, not {_kind(row)}"]
    try:
        model.model_validate(row)
    except ValidationError as exc:
        return None, _reasons(where, exc)
    return row, []
