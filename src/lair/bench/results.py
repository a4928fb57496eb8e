"""The bench's result model: options, one cell per (context, concurrency), the needle, the run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lair.bench.arrivals import ARRIVALS
from lair.bench.definitions import OVERSATURATION_MIN_SENDS
from lair.bench.machine import EngineProcesses
from lair.bench.slo import parse_slo
from lair.errors import BenchError, ConfigError

__all__ = [
    "OPTION_LIMITS",
    "SCHEMA_VERSION",
    "BenchOptions",
    "BenchResult",
    "CacheCertificate",
    "CellCertificate",
    "CellResult",
    "ClientCertificate",
    "MachineCertificate",
    "NeedleResult",
    "OutputCertificate",
    "RunCertificate",
    "check_options",
]

SCHEMA_VERSION = 1

OPTION_LIMITS: dict[str, tuple[type, float, float]] = {
    "decode_tokens": (int, 1, 131_072),
    "repeat": (int, 1, 100),
    "warmup_requests": (int, 0, 1_000),
    "idle_gap_s": (float, 0.0, 3_600.0),
    "request_timeout_s": (float, 0.001, 86_400.0),
    "read_interval_ms": (float, 0.0, 1_000.0),
    "scrape_interval_s": (float, 0.01, 300.0),
    "telemetry_interval_s": (float, 0.01, 60.0),
    "needle_depth": (float, 0.0, 1.0),
    "contexts": (int, 1, 10_000_000),
    "concurrency": (int, 1, 4_096),
    "max_context": (int, 1, 10_000_000),
    "seed": (int, 0, 2**63 - 1),
    "rates": (float, 0.001, 100_000.0),
    "burstiness": (float, 0.01, 100.0),
    "rate_requests": (int, 1, 100_000),
    "max_duration_s": (float, 1.0, 86_400.0),
    "max_requests": (int, 1, 1_000_000),
    "max_open": (int, 1, 65_536),
    "user_speed": (float, 0.001, 1_000_000.0),
    "sessions": (int, 1, 4_096),
    "turns": (int, 1, 256),
    "turn_tokens": (int, 1, 1_000_000),
}
"""Every numeric bench option's (type, least, most), for each value of a list option. The command
line and a report's options (``lair reproduce`` / ``rebench`` run a stranger's report again) are
held to the same limits, in :meth:`BenchOptions.__post_init__`: a published report cannot make a
reproduction repeat a cell 1e9 times or idle for a day before each cell. The most a limit allows is
far beyond any real bench (100 repeats, an hour of idle), so it refuses only what no one runs."""

_LIST_LIMIT = 64
"""At most this many contexts or concurrency levels (cells = contexts x concurrency)."""
_CHOICES = {
    "order": ("shuffled", "fixed"),
    "telemetry": ("auto", "nvml", "nvidia-smi", "none"),
    "arrival": ARRIVALS,
}
_FLAGS = ("force_output", "fresh_prompts", "keep_going", "needle", "sweep")
_OPTIONAL = ("max_context", "seed", "rates", "user_speed", "sessions")
_LISTS = ("contexts", "concurrency", "rates")


def _number_ok(kind: type, value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, int) if kind is int else value == value  # NaN is not a number here


def _check_value(name: str, value: object) -> None:
    kind, least, most = OPTION_LIMITS[name]
    if not _number_ok(kind, value) or not least <= value <= most:  # type: ignore[operator]
        what = "an integer" if kind is int else "a number"
        raise ConfigError(
            f"bench option {name} = {value!r}: must be {what} from {least:g} to {most:g}",
            hint="the same limits hold on the command line and in a report's options",
        )


def check_options(opts: BenchOptions) -> None:
    """Raise ConfigError (naming the option) unless every option is within :data:`OPTION_LIMITS`."""
    for name in OPTION_LIMITS:
        value = getattr(opts, name)
        if value is None and name in _OPTIONAL:
            continue
        values = value if name in _LISTS else [value]
        if not isinstance(values, list) or not 0 < len(values) <= _LIST_LIMIT:
            raise ConfigError(f"bench option {name}: 1 to {_LIST_LIMIT} values, got {value!r}")
        for v in values:
            _check_value(name, v)
    for name, allowed in _CHOICES.items():
        if getattr(opts, name) not in allowed:
            raise ConfigError(f"bench option {name} = {getattr(opts, name)!r}: one of {', '.join(allowed)}")
    for name in _FLAGS:
        if not isinstance(getattr(opts, name), bool):
            raise ConfigError(f"bench option {name} = {getattr(opts, name)!r}: true or false")
    if opts.slo is not None:
        if not isinstance(opts.slo, str):
            raise ConfigError(f"bench option slo = {opts.slo!r}: a spec such as ttft_p99<=2s,tpot<=50ms")
        parse_slo(opts.slo)
    if opts.sweep and opts.rate_requests < OVERSATURATION_MIN_SENDS:
        raise ConfigError(
            f"bench option rate_requests = {opts.rate_requests}: a sweep's step needs at least "
            f"{OVERSATURATION_MIN_SENDS} requests to tell a growing queue from noise"
        )


"""Version of the ``results.json`` layout; bumped on any incompatible change."""


@dataclass
class BenchOptions:
    """What to measure. ``contexts`` are target prompt sizes in server tokens."""

    model: str | None = None
    contexts: list[int] = field(default_factory=lambda: [2048])
    concurrency: list[int] = field(default_factory=lambda: [1])
    decode_tokens: int = 128
    repeat: int = 3
    needle: bool = False
    needle_context: int | None = None
    needle_depth: float = 0.5
    needle_secret: str | None = None
    api_key: str | None = field(default=None, repr=False)
    tokenizer: Path | None = None
    force_output: bool = True
    fresh_prompts: bool = True
    request_timeout_s: float = 900.0
    scrape_interval_s: float = 1.0
    """Longest pause between ``/metrics`` samples during a cell (the first come after 50 ms, then
    every doubling interval up to this one, so a short cell is sampled too)."""
    keep_going: bool = False
    """Run the remaining cells after a cell with failed requests (else the bench stops there)."""
    max_context: int | None = None
    """The recipe's context limit, used when the server does not say its own."""
    order: str = "shuffled"
    """``shuffled``: the cells run in a random order (``seed``, recorded); ``fixed``: contexts x
    concurrency as given."""
    seed: int | None = None
    """Seed of the shuffled order (None: a fresh one, recorded in the results)."""
    warmup_requests: int = 1
    """Untimed requests before the first cell (fresh prompts: they share no prefix with the cells)."""
    idle_gap_s: float = 0.0
    """Pause before each cell, so a cell starts from an idle engine and GPU."""
    telemetry: str = "auto"
    """GPU telemetry: ``auto`` (NVML, else nvidia-smi, else none), ``nvml``, ``nvidia-smi``, ``none``."""
    telemetry_interval_s: float = 0.1
    power_price_kwh: float | None = None
    """Electricity price per kWh (the rig's ``power_price_kwh``) for $/Mtok."""
    hardware_cost: float | None = None
    """What the rig cost, spread over ``hardware_life_years`` in $/Mtok."""
    hardware_life_years: float | None = None
    read_interval_ms: float = 20.0
    """Plain-HTTP streams: after its first content chunk, a stream is read once per this interval
    (chunks in between are stamped at most this late; TTFT and the last chunk keep their exact
    arrival). 0 reads every chunk as it arrives, at about twice the CPU cost."""
    rates: list[float] | None = None
    """Open-loop load: offered request rates per second, one cell per context and rate (None: the
    closed-loop cells instead). With ``sweep``, the first rate is where the sweep starts (default 1)."""
    arrival: str = "poisson"
    """How open-loop requests arrive: ``poisson``, ``gamma`` (shape ``burstiness``), ``constant``."""
    burstiness: float = 1.0
    """Gamma shape of the inter-arrival times (``vllm bench serve --burstiness``): CV 1/sqrt(B)."""
    rate_requests: int = 64
    """Requests per open-loop cell."""
    sweep: bool = False
    """Step the rate up (x2 from the first ``rates``, else 1/s) until throughput stops growing, the
    SLO breaks, the server over-saturates or a budget is spent."""
    slo: str | None = None
    """``ttft_p99<=2s,tpot<=50ms`` (:mod:`lair.bench.slo`): goodput counts requests meeting it."""
    user_speed: float | None = None
    """Tokens per second per user for "users at S tok/s"."""
    max_duration_s: float = 600.0
    """A sweep runs no step that would take it past this many seconds."""
    max_requests: int = 2000
    """A sweep sends at most this many requests in all."""
    max_open: int = 1024
    """At most this many open-loop requests open at once (more due are client-side failures)."""
    sessions: int | None = None
    """Warm (agentic) cells instead of the closed-loop ones: this many multi-turn sessions side by side
    per context, the context being their shared system prompt (:mod:`lair.bench.sessions`)."""
    turns: int = 4
    """Turns of each session; each appends the previous answer and ``turn_tokens`` of new user text."""
    turn_tokens: int = 64
    """Tokens of new user text per turn."""
    progress: Callable[[str], None] | None = field(default=None, repr=False, compare=False)
    engine: EngineProcesses | None = field(default=None, repr=False, compare=False)
    """The engine's processes on this machine, when the caller knows them (``lair launch --bench``):
    their CPU is told apart from other processes' in each cell's machine certificate."""

    def __post_init__(self) -> None:
        check_options(self)

    def pricing(self) -> dict[str, float | None]:
        """The rig's prices as given ({} without an electricity price or a hardware cost)."""
        if self.power_price_kwh is None and self.hardware_cost is None:
            return {}
        return {
            "power_price_kwh": self.power_price_kwh,
            "hardware_cost": self.hardware_cost,
            "hardware_life_years": self.hardware_life_years,
        }

    def as_dict(self) -> dict[str, Any]:
        """The options as recorded in results (never the API key)."""
        d = {k: v for k, v in asdict(self).items() if k not in ("api_key", "progress", "engine")}
        d["tokenizer"] = str(self.tokenizer) if self.tokenizer else None
        d["api_key_given"] = bool(self.api_key)
        return d


@dataclass
class CacheCertificate:
    """The prefix cache during a cell: the engine's hit counter before and after each repeat (None:
    the engine has none), and the hit tokens it counted and the responses reported."""

    metric: str | None
    hits_before: list[float | None]
    hits_after: list[float | None]
    counter_hit_tokens: float | None
    """Sum of the counter's deltas over the repeats (None: no counter)."""
    response_cached_tokens: int | None
    """Sum of the responses' ``cached_tokens`` (None: no response reported it)."""
    proven_by: list[str]
    """What could have seen a hit: ``engine-counter``, ``responses`` (empty: cold not proven)."""
    cold: bool
    """No hit beyond the chat template's allowance, and something was there to see one."""


@dataclass
class ClientCertificate:
    """The bench's own load during a cell (the worst repeat) and the verdict drawn from it."""

    cpu_fraction_max: float
    loop_lag_p99_ms_max: float
    batched_lag_p99_ms_max: float
    read_interval_ms: float
    bound: bool
    limits: dict[str, float]
    """The bounds the verdict holds the load against (``cpu_fraction``, ``loop_lag_p99_ms``)."""


@dataclass
class MachineCertificate:
    """What else used the machine during a cell (:mod:`lair.bench.machine`) and the ``noisy``
    verdict drawn from it and from the spread of the cell's repeats
    (:func:`lair.bench.definitions.noise_reasons`)."""

    cpu: dict[str, Any]
    """:func:`lair.bench.machine.cpu_window`: cores busy, steal, the client's, the engine's (None:
    unknown) and the other processes' CPU, the run queue; {} where /proc/stat cannot be read."""
    engine_cpu: str
    """How the engine's CPU was known (``process tree of PIDS``, ``cgroup DIR``), or why not."""
    gpu_processes: dict[str, Any]
    """:func:`lair.bench.machine.gpu_processes` at the cell's end (``checked``: False with a note
    where NVML is absent)."""
    repeat_spread: dict[str, float]
    """max / min of each per-repeat figure (prefill, aggregate decode) over the repeats."""
    noisy: bool
    reasons: list[str]
    """Each figure past its limit, with the figure and the limit (empty: not noisy)."""
    limits: dict[str, float]
    """:data:`lair.bench.definitions.NOISE_LIMITS`."""


@dataclass
class OutputCertificate:
    """The validity gate on the cell's answers (:func:`lair.bench.definitions.output_problem`): how
    many successful answers were judged, how many failed and a few of them, text truncated."""

    checked: int
    invalid: int
    examples: list[dict[str, Any]]
    """Up to three failing answers: ``repeat``, ``index``, ``problem``, ``text`` (first 80 characters)."""
    token_bounds: list[int] | None
    """[least, most] completion tokens allowed (forced output), None when output was not forced."""
    valid: bool


@dataclass
class CellCertificate:
    """How one cell was measured: what says its number is honest (see docs/bench.md)."""

    position: int
    """0 for the first cell that ran."""
    started_s: float
    """Seconds after the bench's first cell began (the first cell: 0)."""
    duration_s: float
    idle_gap_s: float
    """Seconds since the previous cell (or the warm-up) ended."""
    cache: CacheCertificate
    client: ClientCertificate
    gpu: dict[str, Any] | None
    """:func:`lair.bench.telemetry.summarize_window` of the cell; None: no GPU telemetry."""
    energy: dict[str, Any] | None = None
    """Joules per token, tokens per kWh, watts; None without an energy figure."""
    machine: MachineCertificate | None = None
    """What else used the machine, and the ``noisy`` verdict (None: a report from before it)."""
    output: OutputCertificate | None = None
    """The validity gate on the answers (None: a report from before it)."""


@dataclass
class RunCertificate:
    """What holds for every cell of a run: order, warm-up, telemetry and software."""

    order: str
    seed: int | None
    cells_in_order: list[list[int]]
    """``[context, concurrency]`` of each cell as it ran."""
    warmup_requests: int
    idle_gap_s: float
    telemetry: str
    """``nvml``, ``nvidia-smi`` or ``none``."""
    telemetry_note: str
    """Why there is no telemetry, said plainly ("" with telemetry)."""
    telemetry_interval_s: float
    software: dict[str, Any]
    """Engine, engine version and commit (as the server says), driver, CUDA and NVML versions,
    GPU names; the report writer adds the image digest."""
    pricing: dict[str, float | None] = field(default_factory=dict)
    """The rig's ``power_price_kwh``, ``hardware_cost``, ``hardware_life_years`` when known."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CellResult:
    """One (context, concurrency) cell over its repeats. Headline numbers are p50s (see definitions)."""

    context: int
    concurrency: int
    repeats: int
    prompt_tokens: int | None
    ttft_ms_p50: float | None
    ttft_ms_p90: float | None
    prefill_tok_s: float | None
    decode_tok_s_per_stream: float | None
    decode_tok_s_aggregate: float | None
    completion_tokens: int | None
    cached_tokens: int | None  # None: no response reported cached_tokens
    cache_hit: bool
    client_bound: bool
    output_length_ok: bool
    errors: int
    error_messages: list[dict[str, Any]] = field(default_factory=list)
    """The distinct errors of the failed requests (``message``, ``count``), most frequent first."""
    flags: list[str] = field(default_factory=list)
    stats: dict[str, dict[str, float] | None] = field(default_factory=dict)
    client: dict[str, float] = field(default_factory=dict)
    engine_metrics: list[dict[str, Any]] = field(default_factory=list)
    certificate: CellCertificate | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class NeedleResult:
    """Needle in a haystack at one context and depth."""

    context: int
    depth: float
    prompt_tokens: int | None
    found: bool
    time_s: float
    ttft_ms: float | None
    answer: str
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class BenchResult:
    """A whole bench run: what ``results.json`` holds (plus the per-request rows kept apart)."""

    url: str
    model: str
    started_at: str
    finished_at: str
    options: dict[str, Any]
    cells: list[CellResult]
    needle: NeedleResult | None = None
    metrics_endpoint: bool = False
    server_version: str | None = None
    server: dict[str, Any] = field(default_factory=dict)
    complete: bool = True
    """False when the bench stopped after a cell with failed requests."""
    prompt_sizing: dict[str, Any] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    certificate: RunCertificate | None = None
    load: dict[str, Any] | None = None
    """The open-loop section (:func:`lair.bench.openloop.run_load`): rate cells, sweeps; None without
    ``rates`` or ``sweep``."""
    load_requests: list[dict[str, Any]] = field(default_factory=list)
    sessions: dict[str, Any] | None = None
    """The warm multi-turn cells (:func:`lair.bench.sessions.run_sessions`); None without ``--sessions``."""
    session_requests: list[dict[str, Any]] = field(default_factory=list)
    """Their per-request rows (``sessions.jsonl``)."""
    """The open-loop cells' per-request rows (``load.jsonl``), kept apart from the closed-loop ones."""

    @property
    def failed_cells(self) -> list[CellResult]:
        return [c for c in self.cells if c.errors]

    @property
    def noisy_cells(self) -> list[CellResult]:
        """Cells whose machine certificate says ``noisy`` (something else used the machine, or
        their repeats disagree)."""
        return [
            c for c in self.cells if c.certificate and c.certificate.machine and c.certificate.machine.noisy
        ]

    def noise_lines(self) -> list[str]:
        """``ctx C xN: reason; reason`` per noisy cell."""
        return [
            f"ctx {c.context} x{c.concurrency}: {'; '.join(c.certificate.machine.reasons)}"
            for c in self.noisy_cells
            if c.certificate and c.certificate.machine
        ]

    def failure(self) -> BenchError | None:
        """The error for cells with failed requests, naming each cell and its distinct server
        messages; None when every request succeeded."""
        if not self.failed_cells:
            return None
        lines = []
        for c in self.failed_cells:
            msgs = "; ".join(f"{m['message']} (x{m['count']})" for m in c.error_messages)
            lines.append(f"ctx {c.context} x{c.concurrency}: {c.errors} failed: {msgs}")
        hint = (
            "" if self.complete else "the bench stopped at the first failed cell; --keep-going runs the rest"
        )
        return BenchError("requests failed\n  " + "\n  ".join(lines), hint=hint)

    def as_dict(self, with_requests: bool = False) -> dict[str, Any]:
        d: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "url": self.url,
            "model": self.model,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "options": self.options,
            "metrics_endpoint": self.metrics_endpoint,
            "server_version": self.server_version,
            "server": self.server,
            "complete": self.complete,
            "prompt_sizing": self.prompt_sizing,
            "cells": [c.as_dict() for c in self.cells],
            "needle": self.needle.as_dict() if self.needle else None,
            "certificate": self.certificate.as_dict() if self.certificate else None,
        }
        if self.load is not None:
            d["load"] = self.load
        if self.sessions is not None:
            d["sessions"] = self.sessions
        if with_requests:
            d["requests"] = self.requests
        return d
