"""The certificate of each cell (how it was measured) and of the run, built from what the runner
recorded: the engine's prefix-cache counter around each repeat, the bench's own load, when the cell
ran and after how long an idle gap, and the GPU samples of its repeats' windows
(:mod:`lair.bench.telemetry`), turned into energy per token.

Energy of a cell is the sum over its repeats of the energy between a repeat's first send and its
last stream's end (the time between repeats, spent building prompts and reading ``/metrics``, is not
counted). Both per-token figures divide that same energy: ``j_per_output_token`` charges it all to
the output tokens, ``j_per_prompt_token`` all to the prompt tokens (no split between prefill and
decode is made: short prefills fall between two samples).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lair.bench import definitions as d
from lair.bench.machine import EngineProcesses, MachineSnapshot, cpu_window
from lair.bench.results import (
    BenchOptions,
    CacheCertificate,
    CellCertificate,
    CellResult,
    ClientCertificate,
    MachineCertificate,
    OutputCertificate,
    RunCertificate,
)
from lair.bench.server import ServerInfo
from lair.bench.telemetry import GpuSample, GpuSampler, cost_per_mtok, summarize_window, window_energy

__all__ = [
    "J_PER_KWH",
    "CellWindow",
    "ClientLoad",
    "Repeat",
    "cell_certificate",
    "energy_figures",
    "machine_certificate",
    "output_certificate",
    "run_certificate",
    "split_build",
]

J_PER_KWH = 3.6e6


@dataclass
class ClientLoad:
    """The bench's own load during one repeat."""

    cpu_s: float
    wall_s: float
    loop_lag_p99_ms: float
    batched_lag_p99_ms: float = 0.0
    interval_ms: float = 0.0

    @property
    def bound(self) -> bool:
        lags = (self.loop_lag_p99_ms, self.batched_lag_p99_ms, self.interval_ms)
        return d.is_client_bound(self.cpu_s, self.wall_s, *lags)


@dataclass
class Repeat:
    """One repeat of a cell: its timings, the client's load, the engine's metrics, its window on the
    perf_counter clock and the prefix-cache hit counter before and after it."""

    timings: list[d.RequestTiming]
    client: ClientLoad
    engine: dict[str, Any] = field(default_factory=dict)
    t0: float = 0.0
    t1: float = 0.0
    hits_before: float | None = None
    hits_after: float | None = None
    machine: tuple[MachineSnapshot, MachineSnapshot] | None = None
    """The machine right before and right after the timed window (None: no /proc/stat here)."""


@dataclass
class CellWindow:
    """A cell as it ran: its place in the order, the idle gap before it, its repeats."""

    position: int
    idle_gap_s: float
    reps: list[Repeat]
    cell: CellResult
    engine_pids: list[int] = field(default_factory=list)
    """The engine's process tree as taken at the cell's start (empty: unknown or a cgroup)."""
    gpu_processes: dict[str, Any] = field(default_factory=dict)
    """:func:`lair.bench.machine.gpu_processes` at the cell's end."""


def _cache(w: CellWindow) -> CacheCertificate:
    counted = [
        (r.hits_after - r.hits_before)
        for r in w.reps
        if r.hits_before is not None and r.hits_after is not None
    ]
    metric = next((m for r in w.reps if (m := (r.engine or {}).get("metrics_engine"))), None)
    proven = (["engine-counter"] if counted else []) + (
        ["responses"] if w.cell.cached_tokens is not None else []
    )
    return CacheCertificate(
        metric=metric if counted else None,
        hits_before=[r.hits_before for r in w.reps],
        hits_after=[r.hits_after for r in w.reps],
        counter_hit_tokens=sum(counted) if counted else None,
        response_cached_tokens=w.cell.cached_tokens,
        proven_by=proven,
        cold=bool(proven) and not w.cell.cache_hit,
    )


def _client(w: CellWindow, interval_ms: float) -> ClientCertificate:
    c = w.cell.client
    return ClientCertificate(
        cpu_fraction_max=float(c.get("cpu_fraction_max", 0.0)),
        loop_lag_p99_ms_max=float(c.get("loop_lag_p99_ms_max", 0.0)),
        batched_lag_p99_ms_max=float(c.get("batched_lag_p99_ms_max", 0.0)),
        read_interval_ms=interval_ms,
        bound=w.cell.client_bound,
        limits={"cpu_fraction": d.CLIENT_CPU_BOUND_FRACTION, "loop_lag_p99_ms": d.LOOP_LAG_BOUND_MS},
    )


def _engine_cpu(engine: EngineProcesses | None, pids: list[int]) -> str:
    if engine is not None and engine.cgroup:
        return f"cgroup {engine.cgroup}"
    if engine is not None and pids:
        return f"process tree of {', '.join(str(p) for p in engine.pids)} ({len(pids)} processes)"
    if engine is not None and engine.pids:
        return f"engine CPU unknown: process {', '.join(str(p) for p in engine.pids)} not found here"
    return engine.note if engine is not None else EngineProcesses().note


def machine_certificate(w: CellWindow, engine: EngineProcesses | None) -> MachineCertificate:
    """What else used the machine during the cell's timed windows, and the ``noisy`` verdict."""
    pairs = [r.machine for r in w.reps if r.machine is not None]
    cpu = cpu_window(pairs) if pairs else {}
    spread = {k: round(v, 4) for k, v in d.repeat_spread(w.cell.stats).items()}
    known = set(w.engine_pids) if w.engine_pids else None
    reasons = d.noise_reasons(cpu, spread, w.gpu_processes, known)
    return MachineCertificate(
        cpu=cpu,
        engine_cpu=_engine_cpu(engine, w.engine_pids),
        gpu_processes=w.gpu_processes,
        repeat_spread=spread,
        noisy=bool(reasons),
        reasons=reasons,
        limits=dict(d.NOISE_LIMITS),
    )


_EXAMPLES, _EXAMPLE_CHARS = 3, 80


def output_certificate(
    reps: Sequence[Sequence[d.RequestTiming]], want: int, force: bool
) -> OutputCertificate:
    """The validity gate over a cell's repeats (each repeat's prompts differ from one another)."""
    checked, bad = 0, []
    for i, rs in enumerate(reps):
        checked += sum(1 for r in rs if r.status == 200 and not r.error)
        for j, (r, problem) in enumerate(zip(rs, d.answer_problems(rs, want, force), strict=True)):
            if problem is not None:
                bad.append({"repeat": i, "index": j, "problem": problem, "text": r.text[:_EXAMPLE_CHARS]})
    return OutputCertificate(
        checked=checked,
        invalid=len(bad),
        examples=bad[:_EXAMPLES],
        token_bounds=list(d.output_token_bounds(want)) if force else None,
        valid=not bad,
    )


def split_build(reps: Sequence[Repeat]) -> tuple[int, int]:
    """(output tokens, prompt tokens) of a cell's successful requests, all repeats together."""
    ok = [r for rep in reps for r in rep.timings if r.ok]
    return sum(r.completion_tokens or 0 for r in ok), sum(r.prompt_tokens or 0 for r in ok)


def energy_figures(
    energy_j: float | None,
    seconds: float,
    output_tokens: int,
    prompt_tokens: int,
    *,
    peak_w: float | None = None,
    source: str | None = None,
    pricing: dict[str, float | None] | None = None,
) -> dict[str, Any] | None:
    """Joules per token, tokens per kWh, average watts and $/Mtok (output tokens) of ``energy_j``
    spent over ``seconds``; None without an energy figure."""
    if energy_j is None or seconds <= 0:
        return None
    out_rate = output_tokens / seconds if output_tokens else None
    j_out = energy_j / output_tokens if output_tokens else None
    p = pricing or {}
    return {
        "energy_j": energy_j,
        "energy_source": source,
        "seconds": seconds,
        "output_tokens": output_tokens,
        "prompt_tokens": prompt_tokens,
        "j_per_output_token": j_out,
        "j_per_prompt_token": energy_j / prompt_tokens if prompt_tokens else None,
        "output_tokens_per_kwh": output_tokens / (energy_j / J_PER_KWH) if energy_j > 0 else None,
        "avg_w": energy_j / seconds,
        "peak_w": peak_w,
        "output_tok_s": out_rate,
        "usd_per_mtok": cost_per_mtok(
            j_out,
            out_rate,
            power_price_kwh=p.get("power_price_kwh"),
            hardware_cost=p.get("hardware_cost"),
            hardware_life_years=p.get("hardware_life_years"),
        )
        if p
        else None,
    }


def _energy(w: CellWindow, samples: Sequence[GpuSample], opts: BenchOptions) -> dict[str, Any] | None:
    parts = [window_energy(samples, r.t0, r.t1) for r in w.reps]
    if not parts or any(e is None for e, _ in parts):
        return None
    seconds = sum(r.t1 - r.t0 for r in w.reps)
    out, prompt = split_build(w.reps)
    peak = summarize_window(samples, w.reps[0].t0, w.reps[-1].t1)["peak_w"]
    energy = sum(e for e, _ in parts if e is not None)
    return energy_figures(
        energy, seconds, out, prompt, peak_w=peak, source=parts[0][1], pricing=opts.pricing()
    )


def cell_certificate(
    w: CellWindow, samples: Sequence[GpuSample], opts: BenchOptions, t_first: float, telemetry: bool
) -> CellCertificate:
    """The certificate of one cell; ``t_first`` is when the first cell began, ``telemetry`` whether
    a GPU sampler ran."""
    t0, t1 = (w.reps[0].t0, w.reps[-1].t1) if w.reps else (t_first, t_first)
    gpu = summarize_window(samples, t0, t1) if telemetry and w.reps else None
    return CellCertificate(
        position=w.position,
        started_s=round(t0 - t_first, 6),
        duration_s=round(t1 - t0, 6),
        idle_gap_s=round(w.idle_gap_s, 6),
        cache=_cache(w),
        client=_client(w, opts.read_interval_ms),
        gpu=gpu,
        energy=_energy(w, samples, opts) if telemetry and w.reps else None,
        machine=machine_certificate(w, opts.engine),
        output=output_certificate([r.timings for r in w.reps], opts.decode_tokens, opts.force_output),
    )


def _build_info(info: ServerInfo) -> tuple[str | None, str | None]:
    """(version, commit): llama.cpp's ``b6500-abc1234`` splits in two; other engines give a version."""
    v = info.version
    if v and v.startswith("b") and "-" in v and v[1 : v.index("-")].isdigit():
        return v[: v.index("-")], v[v.index("-") + 1 :]
    return v, None


def run_certificate(
    info: ServerInfo, sampler: GpuSampler, opts: BenchOptions, order: list[tuple[int, int]], seed: int | None
) -> RunCertificate:
    version, commit = _build_info(info)
    software = {"engine": info.engine, "engine_version": version, "engine_commit": commit, **sampler.info()}
    return RunCertificate(
        order=opts.order,
        seed=seed,
        cells_in_order=[[ctx, c] for ctx, c in order],
        warmup_requests=opts.warmup_requests,
        idle_gap_s=opts.idle_gap_s,
        telemetry=sampler.backend,
        telemetry_note=sampler.why_none,
        telemetry_interval_s=opts.telemetry_interval_s,
        software=software,
        pricing=opts.pricing(),
    )
