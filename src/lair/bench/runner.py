"""Runs the cells (contexts x concurrency x repeats) and the needle against one server.

Per repeat of a cell: fresh prompts are built and all connections opened *before* anything is
timed; then every request is written back to back, the bench's own CPU time, wall time and event-loop
lag are watched, ``/metrics`` is snapshotted before and after (and sampled during) the cell, and only
when every stream has ended are the recorded bytes parsed.
"""

from __future__ import annotations

import asyncio
import gc
import json
import random
import secrets
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from lair.bench import definitions as d
from lair.bench.aggregate import aggregate_cell
from lair.bench.certificate import CellWindow, ClientLoad, Repeat, cell_certificate, run_certificate
from lair.bench.client import Endpoint, StreamProtocol, chat_request, http_request, open_stream, parse_stream
from lair.bench.machine import EngineProcesses, engine_tree, gpu_processes, snapshot
from lair.bench.metrics import MetricsWatch, cell_engine_metrics, metrics_table, scrape
from lair.bench.openloop import LoadPlan, run_load
from lair.bench.prompt import Counter, PromptSizer, needle_prompt
from lair.bench.rawstream import RawStream, open_raw_stream, pump
from lair.bench.results import BenchOptions, BenchResult, CellResult, NeedleResult
from lair.bench.row_times import ms_after, tokens_rounded
from lair.bench.server import ServerInfo, context_refusal, server_info
from lair.bench.sessions import SessionPlan, run_sessions
from lair.bench.telemetry import GpuSampler, NoTelemetry, open_sampler
from lair.errors import BenchError

__all__ = ["run_bench", "run_bench_async"]

_EXTRAS = ("ignore_eos", "min_tokens")
_NEEDLE_TOKENS = 64
_LAG_INTERVAL_S = 0.02
_SETTLE_S, _SETTLE_PER_CONN_S = 0.05, 0.0005
"""Pause after connecting, before the timed sends, so the server has accepted every connection."""


@dataclass
class _Session:
    ep: Endpoint
    model: str
    opts: BenchOptions
    sizer: PromptSizer
    extras: bool = True
    metrics: bool = False
    info: ServerInfo = field(default_factory=ServerInfo)
    sampler: GpuSampler = field(default_factory=lambda: NoTelemetry("not started"))
    windows: list[CellWindow] = field(default_factory=list)
    order: list[tuple[int, int]] = field(default_factory=list)
    seed: int | None = None
    last_end: float = 0.0
    """perf_counter when the last cell (or the warm-up) ended."""
    engine_pids: list[int] = field(default_factory=list)
    """The engine's processes as taken at the current cell's start."""


_Client = ClientLoad
_Repeat = Repeat


class _LagMonitor:
    """Measures how late the event loop wakes a task that sleeps ``_LAG_INTERVAL_S``."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self.task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(_LAG_INTERVAL_S)
            self.lags.append(time.perf_counter() - t - _LAG_INTERVAL_S)

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> float:
        """Stops and returns the p99 lag in ms."""
        assert self.task is not None
        self.task.cancel()
        try:
            await self.task
        except asyncio.CancelledError:
            pass
        return d.percentile(self.lags, 99) * 1000 if self.lags else 0.0


def _body(s: _Session, content: str, max_tokens: int, force: bool) -> dict[str, Any]:
    return _chat_body(s, [{"role": "user", "content": content}], max_tokens, force)


def _chat_body(s: _Session, messages: list[dict[str, str]], max_tokens: int, force: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": s.model,
        "messages": messages,
        "stream": True,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream_options": {"include_usage": True},
    }
    if s.extras:
        body["stream_options"]["continuous_usage_stats"] = True
        if force:
            body.update(ignore_eos=True, min_tokens=max_tokens)
    return body


async def _stream_all(
    s: _Session, contents: list[str], max_tokens: int, force: bool
) -> tuple[list[d.RequestTiming], _Client]:
    """Send every request together; return parsed timings and the client's own load."""
    return await _stream_bodies(s, [_body(s, c, max_tokens, force) for c in contents])


async def _stream_bodies(s: _Session, bodies: list[dict[str, Any]]) -> tuple[list[d.RequestTiming], _Client]:
    """Send every chat body together; return parsed timings and the client's own load."""
    payloads = [chat_request(s.ep, b, s.opts.api_key) for b in bodies]
    plain = s.ep.scheme == "http"
    opener = open_raw_stream if plain else open_stream
    streams: list[Any] = list(await asyncio.gather(*(opener(s.ep) for _ in payloads)))
    await asyncio.sleep(_SETTLE_S + _SETTLE_PER_CONN_S * len(streams))
    lag = _LagMonitor()
    if not plain:
        lag.start()
    gc.disable()  # no collector pauses while arrivals are being time-stamped
    try:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        late = await (_pump_raw(streams, payloads, s) if plain else _pump_asyncio(streams, payloads, s))
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        lag_ms = _read_lag_p99_ms(streams, batched=False) if plain else await lag.stop()
    finally:
        gc.enable()
    timings = []
    for st in streams:
        times = st.arrival_times() if plain else st.times
        timings.append(parse_stream(st.send_t, times, st.reads))
        if st in late:
            timings[-1].error = timings[-1].error or f"timed out after {s.opts.request_timeout_s:.0f} s"
    client = _Client(cpu, wall, lag_ms)
    if plain:
        client.batched_lag_p99_ms = _read_lag_p99_ms(streams, batched=True)
        client.interval_ms = s.opts.read_interval_ms
    return timings, client


def _read_lag_p99_ms(streams: list[RawStream], batched: bool) -> float:
    """p99 of (read time - when the bytes were due) over the eager (or the batched) reads: how far
    behind the reader ran."""
    lags = [lag for st in streams for lag in st.read_lags(batched)]
    return d.percentile(lags, 99) * 1000 if lags else 0.0


async def _pump_raw(streams: list[RawStream], payloads: list[bytes], s: _Session) -> list[RawStream]:
    loop = asyncio.get_running_loop()
    timeout, interval = s.opts.request_timeout_s, s.opts.read_interval_ms / 1000
    return await loop.run_in_executor(None, pump, streams, payloads, timeout, interval)


async def _pump_asyncio(
    protos: list[StreamProtocol], payloads: list[bytes], s: _Session
) -> list[StreamProtocol]:
    for p, payload in zip(protos, payloads, strict=True):
        p.send(payload)
    _, pending = await asyncio.wait([p.done for p in protos], timeout=s.opts.request_timeout_s)
    for p in protos:
        p.close()
    return [p for p in protos if p.done in pending]


async def _probe(s: _Session, content: str) -> int | None:
    """One 1-token request; falls back to plain OpenAI fields if the server rejects lair's extras."""
    timings, _ = await _stream_all(s, [content], 1, force=True)
    r = timings[0]
    if r.status == 400 and s.extras:
        s.extras = False
        timings, _ = await _stream_all(s, [content], 1, force=True)
        r = timings[0]
    if r.status != 200:
        raise BenchError(f"the server answered a probe request with: {r.error}")
    return r.prompt_tokens


def _hits(snap: dict[str, float] | None, table_of: dict[str, float] | None) -> float | None:
    """The engine's prefix-cache hit counter in ``snap`` (None: no snapshot or no such counter)."""
    t = metrics_table(table_of) if table_of else None
    return snap.get(t.hits) if snap is not None and t is not None and t.hits else None


async def _repeat(s: _Session, contents: list[str]) -> _Repeat:
    before = await scrape(s.ep, s.opts.api_key) if s.metrics else None
    watch = MetricsWatch(s.ep, s.opts.api_key, s.opts.scrape_interval_s)
    if before is not None:
        watch.start()
    engine = s.opts.engine or EngineProcesses()
    m0 = snapshot(engine, s.engine_pids)
    t0 = time.perf_counter()
    timings, client = await _stream_all(s, contents, s.opts.decode_tokens, s.opts.force_output)
    t1 = time.perf_counter()
    m1 = snapshot(engine, s.engine_pids)
    samples = await watch.stop()
    after = await scrape(s.ep, s.opts.api_key) if before is not None else None
    metrics = cell_engine_metrics(before, after, samples) if before is not None and after is not None else {}
    rep = _Repeat(timings, client, metrics, t0, t1, _hits(before, after), _hits(after, after))
    rep.machine = (m0, m1) if m0 is not None and m1 is not None else None
    return rep


async def _contents(s: _Session, ctx: int, c: int) -> list[str]:
    """``c`` prompts of ``ctx`` tokens: fresh nonces, or fixed ones (to show what a cache hit does)."""
    nonces: list[str | None] = [None] * c if s.opts.fresh_prompts else [f"fixed{i}" for i in range(c)]
    return [await s.sizer.fit(ctx, nonce) for nonce in nonces]


async def _server_counter(s: _Session) -> Counter | None:
    """The server's own tokenizer, when it has one: vLLM/SGLang ``/tokenize`` (prompt -> count/tokens)
    or llama.cpp's (content -> tokens). None when neither answers."""
    bodies = (
        lambda t: {"model": s.model, "prompt": t, "add_special_tokens": False},
        lambda t: {"content": t, "add_special": False},
    )
    for make in bodies:

        async def count(text: str, make: Any = make) -> int | None:
            try:
                status, body = await http_request(
                    s.ep, "POST", "/tokenize", json.dumps(make(text)).encode(), api_key=s.opts.api_key
                )
                doc = json.loads(body) if status == 200 else None
            except (BenchError, ValueError):
                return None
            if not isinstance(doc, dict):
                return None
            n = doc.get("count", len(doc["tokens"]) if isinstance(doc.get("tokens"), list) else None)
            return int(n) if isinstance(n, int) else None

        one, two = await count("hello world"), await count("hello world hello world")
        if one and two and two > one:  # a server that ignores the field answers with no tokens
            return count
    return None


def _flags(cell: CellResult, no_usage: bool, unproven: bool = False) -> list[str]:
    """``cold-cache-not-proven``: the server has no prefix-cache hit counter and no response
    carried ``cached_tokens``, so a cache hit could not have been seen."""
    pairs = [
        (cell.cache_hit, "cache-hit"),
        (unproven, "cold-cache-not-proven"),
        (cell.client_bound, "client-bound"),
        (not cell.output_length_ok, "short-output"),
        (cell.errors > 0, "errors"),
        (no_usage, "no-usage"),
    ]
    return [name for cond, name in pairs if cond]


def _cell(s: _Session, ctx: int, c: int, reps: list[_Repeat]) -> CellResult:
    fig = aggregate_cell(
        [rep.timings for rep in reps],
        [rep.engine.get("prefix_cache_hits_delta") for rep in reps],
        want_tokens=s.opts.decode_tokens,
        force_output=s.opts.force_output,
    )
    head = fig.headline()
    cell = CellResult(
        error_messages=_error_messages([r for rep in reps for r in rep.timings]),
        context=ctx,
        concurrency=c,
        client_bound=any(rep.client.bound for rep in reps),
        stats=fig.stats(),
        client=_client_summary(reps),
        engine_metrics=[rep.engine for rep in reps],
        **head,
    )
    cell.flags = _flags(cell, fig.usage_missing, not fig.cold_proven)
    return cell


def _error_messages(rs: list[d.RequestTiming]) -> list[dict[str, Any]]:
    """The distinct errors of a cell's requests, most frequent first, with their counts."""
    counts: dict[str, int] = {}
    for r in rs:
        if not r.ok:
            msg = r.error or "no content in the response"
            counts[msg] = counts.get(msg, 0) + 1
    return [{"message": m, "count": n} for m, n in sorted(counts.items(), key=lambda kv: -kv[1])]


def _client_summary(reps: list[_Repeat]) -> dict[str, float]:
    return {
        "cpu_s": sum(r.client.cpu_s for r in reps),
        "wall_s": sum(r.client.wall_s for r in reps),
        "cpu_fraction_max": max(r.client.cpu_s / r.client.wall_s if r.client.wall_s else 0.0 for r in reps),
        "loop_lag_p99_ms_max": max(r.client.loop_lag_p99_ms for r in reps),
        "batched_lag_p99_ms_max": max(r.client.batched_lag_p99_ms for r in reps),
    }


def request_rows(
    ctx: int, c: int, rep_i: int, rep: _Repeat, opts: BenchOptions | None = None
) -> list[dict[str, Any]]:
    """Per-request raw timings (ms relative to the repeat's first send) for the JSONL file, each
    with the validity gate's verdict on its answer (``output_check``: "" when valid)."""
    t0 = min(r.send_t for r in rep.timings)
    o = opts or BenchOptions()
    problems = d.answer_problems(rep.timings, o.decode_tokens, o.force_output)
    rows = []
    for i, r in enumerate(rep.timings):
        ttft = d.ttft_s(r)
        rows.append(
            {
                "context": ctx,
                "concurrency": c,
                "repeat": rep_i,
                "index": i,
                "send_ms": round((r.send_t - t0) * 1000, 3),
                "ttft_ms": round(ttft * 1000, 3) if ttft is not None else None,
                "decode_tok_s": d.per_stream_decode_tok_s(r),
                "prompt_tokens": r.prompt_tokens,
                "completion_tokens": r.completion_tokens,
                "cached_tokens": r.cached_tokens,
                "status": r.status,
                "error": r.error,
                "chunk_ms": ms_after(r.send_t, r.content_times),
                "chunk_tokens": tokens_rounded(r),
                "output_check": problems[i] or "",
            }
        )
    return rows


def _say(s: _Session, msg: str) -> None:
    if s.opts.progress:
        s.opts.progress(msg)


async def _run_cell(s: _Session, ctx: int, c: int, rows: list[dict[str, Any]]) -> CellResult:
    if s.opts.idle_gap_s > 0:
        await asyncio.sleep(s.opts.idle_gap_s)  # the engine and GPU idle before the cell (an option)
    began, began_wall = time.perf_counter(), time.time()
    s.engine_pids = engine_tree(s.opts.engine)
    reps: list[_Repeat] = []
    for i in range(s.opts.repeat):
        rep = await _repeat(s, await _contents(s, ctx, c))
        rows.extend(request_rows(ctx, c, i, rep, s.opts))
        reps.append(rep)
        _say(s, f"  ctx {ctx} x{c} repeat {i + 1}/{s.opts.repeat}: {_repeat_line(rep)}")
    cell = _cell(s, ctx, c, reps)
    gpu = await asyncio.to_thread(gpu_processes, began_wall)
    s.windows.append(CellWindow(len(s.windows), began - s.last_end, reps, cell, s.engine_pids, gpu))
    s.last_end = time.perf_counter()
    _say(s, _cell_line(cell))
    return cell


def _repeat_line(rep: _Repeat) -> str:
    failed = [r for r in rep.timings if not r.ok]
    if failed:
        return f"{len(failed)} of {len(rep.timings)} requests failed: {failed[0].error or 'no content'}"
    return f"ttft {1000 * (d.ttft_s(rep.timings[0]) or 0.0):.1f} ms"


def _cell_line(c: CellResult) -> str:
    def f(x: float | None) -> str:
        return "-" if x is None else f"{x:,.1f}"

    flags = f"  [{', '.join(c.flags)}]" if c.flags else ""
    if c.errors and c.ttft_ms_p50 is None:
        return f"ctx {c.context} x{c.concurrency}: every request failed: {c.error_messages[0]['message']}"
    return (
        f"ctx {c.context} x{c.concurrency}: prompt {c.prompt_tokens} tok, ttft p50 {f(c.ttft_ms_p50)} ms, "
        f"prefill {f(c.prefill_tok_s)} tok/s, decode {f(c.decode_tok_s_per_stream)} tok/s/stream, "
        f"{f(c.decode_tok_s_aggregate)} tok/s aggregate{flags}"
    )


async def _run_needle(s: _Session) -> NeedleResult:
    import secrets

    ctx = s.opts.needle_context or max(s.opts.contexts)
    secret = (
        s.opts.needle_secret
        or f"{secrets.choice(['amber', 'cobalt', 'violet'])}-{secrets.randbelow(9000) + 1000}"
    )
    content = needle_prompt(s.sizer.words_for(ctx), s.opts.needle_depth, secret)
    timings, _ = await _stream_all(s, [content], _NEEDLE_TOKENS, force=False)
    r = timings[0]
    ttft = d.ttft_s(r)
    found = secret.lower() in r.text.lower()
    _say(s, f"needle at ctx {ctx} depth {s.opts.needle_depth}: {'found' if found else 'not found'}")
    return NeedleResult(
        context=ctx,
        depth=s.opts.needle_depth,
        prompt_tokens=r.prompt_tokens,
        found=found,
        time_s=r.done_t - r.send_t,
        ttft_ms=ttft * 1000 if ttft is not None else None,
        answer=r.text[:200],
        error=r.error,
    )


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


async def _session(url: str, opts: BenchOptions) -> _Session:
    ep = Endpoint.parse(url)
    info = await server_info(ep, opts.api_key)
    model = opts.model or info.model
    if not model:
        raise BenchError(f"{url} lists no model", hint="give the served model name with --model")
    _refuse_long_contexts(info, opts)
    s = _Session(ep, model, opts, PromptSizer(tokenizer_path=opts.tokenizer), info=info)
    s.metrics = await scrape(ep, opts.api_key) is not None
    if not opts.tokenizer:
        s.sizer.counter = await _server_counter(s)
    await s.sizer.calibrate(lambda text: _probe(s, text))
    return s


def _refuse_long_contexts(info: ServerInfo, opts: BenchOptions) -> None:
    """Prompt sizes above the server's context are refused before anything is sent."""
    needle = [opts.needle_context or max(opts.contexts)] if opts.needle else []
    for sizes, out in ((opts.contexts, opts.decode_tokens), (needle, _NEEDLE_TOKENS)):
        refusal = context_refusal(info, sizes, out, opts.max_context)
        if refusal is not None:
            raise refusal


def _cell_order(s: _Session) -> list[tuple[int, int]]:
    """Contexts x concurrency as given (``fixed``), or shuffled by a recorded seed."""
    pairs = [(ctx, c) for ctx in s.opts.contexts for c in s.opts.concurrency]
    if s.opts.order == "fixed":
        return pairs
    s.seed = s.opts.seed if s.opts.seed is not None else secrets.randbelow(2**31)
    random.Random(s.seed).shuffle(pairs)
    return pairs


async def _warm_up(s: _Session) -> None:
    """Untimed requests on fresh prompts of the smallest context: CUDA graphs, allocators and caches
    of the engine warm before the first timed cell."""
    n = s.opts.warmup_requests
    if n > 0:
        ctx = min(s.opts.contexts)
        await _stream_all(s, await _contents(s, ctx, n), min(16, s.opts.decode_tokens), force=True)
        _say(s, f"warm-up: {n} request(s) at ctx {ctx}")
    s.last_end = time.perf_counter()


async def _run_cells(s: _Session, rows: list[dict[str, Any]]) -> list[CellResult]:
    """Every cell in the run's order; after a cell with failed requests, only with ``keep_going``.
    The cells come back in contexts x concurrency order (their certificates say when each ran)."""
    s.order = _cell_order(s)
    rank = {pair: i for i, pair in enumerate((x, c) for x in s.opts.contexts for c in s.opts.concurrency)}
    await _warm_up(s)
    cells: list[CellResult] = []
    for ctx, c in s.order:
        cells.append(await _run_cell(s, ctx, c, rows))
        if cells[-1].errors and not s.opts.keep_going:
            _say(s, "stopping after a cell with failed requests (--keep-going runs the rest)")
            break
    return sorted(cells, key=lambda cell: rank[(cell.context, cell.concurrency)])


def _certify(s: _Session) -> None:
    """Each cell's certificate, from its windows and the GPU samples (read after the sampler stopped,
    so the last cell's edge is covered)."""
    samples = s.sampler.samples()
    t_first = s.windows[0].reps[0].t0 if s.windows and s.windows[0].reps else 0.0
    for w in s.windows:
        cert = cell_certificate(w, samples, s.opts, t_first, s.sampler.backend != "none")
        w.cell.certificate = cert
        for kind in ("thermal", "power"):
            if cert.gpu and cert.gpu[f"{kind}_throttled"]:
                w.cell.flags.append(f"{kind}-throttled")
        if cert.machine is not None and cert.machine.noisy:
            w.cell.flags.append("noisy")
        if cert.output is not None and not cert.output.valid:
            w.cell.flags.append("invalid-output")


async def run_bench_async(url: str, options: BenchOptions | None = None) -> BenchResult:
    """Benchmark the OpenAI-compatible server at ``url``; see :mod:`lair.bench.definitions`."""
    opts = options or BenchOptions()
    started = _now()
    s = await _session(url, opts)
    _say(s, f"model {s.model}; /metrics {'found' if s.metrics else 'absent'}; lair extras {s.extras}")
    rows: list[dict[str, Any]] = []
    s.sampler = await asyncio.to_thread(open_sampler, opts.telemetry, opts.telemetry_interval_s)
    _say(s, s.sampler.why_none or f"GPU telemetry: {s.sampler.backend}")
    s.sampler.start()
    load: dict[str, Any] | None = None
    load_rows: list[dict[str, Any]] = []
    sessions: dict[str, Any] | None = None
    session_rows: list[dict[str, Any]] = []
    cells: list[CellResult] = []
    try:
        if opts.rates or opts.sweep:  # open-loop cells instead of the closed-loop ones
            await _warm_up(s)
            load, load_rows = await run_load(_load_plan(s))
        elif opts.sessions:  # warm multi-turn cells instead of the cold ones
            await _warm_up(s)
            sessions, session_rows = await run_sessions(_session_plan(s))
        else:
            cells = await _run_cells(s, rows)
    finally:
        await asyncio.to_thread(s.sampler.stop)
    _certify(s)
    complete = (
        load is not None or sessions is not None or len(cells) == len(opts.contexts) * len(opts.concurrency)
    )
    needle = await _run_needle(s) if opts.needle and complete else None
    return BenchResult(
        url=f"{s.ep.scheme}://{s.ep.netloc}{s.ep.prefix}",
        model=s.model,
        started_at=started,
        finished_at=_now(),
        options=opts.as_dict(),
        cells=cells,
        needle=needle,
        metrics_endpoint=s.metrics,
        server_version=s.info.label,
        server={"engine": s.info.engine, "version": s.info.version, "max_context": s.info.max_context},
        complete=complete,
        prompt_sizing={
            "tokens_per_word": s.sizer.tokens_per_word,
            "overhead_tokens": s.sizer.overhead,
            "calibrated": s.sizer.calibrated,
            "exact": bool(s.opts.tokenizer) or s.sizer.counter is not None,
            "tokenizer": str(opts.tokenizer) if opts.tokenizer else None,
            "extras_accepted": s.extras,
        },
        requests=rows,
        certificate=run_certificate(s.info, s.sampler, opts, s.order, s.seed),
        load=load,
        load_requests=load_rows,
        sessions=sessions,
        session_requests=session_rows,
    )


def _load_plan(s: _Session) -> LoadPlan:
    """The open-loop cells' view of the session: fresh prompts of a context, as request bytes."""

    async def payloads(ctx: int, n: int) -> list[bytes]:
        bodies = [_body(s, c, s.opts.decode_tokens, s.opts.force_output) for c in await _contents(s, ctx, n)]
        return [chat_request(s.ep, b, s.opts.api_key) for b in bodies]

    return LoadPlan(s.ep, payloads, s.opts, lambda msg: _say(s, msg))


def _session_plan(s: _Session) -> SessionPlan:
    """The warm cells' view of the session: fresh texts, lockstep sends, the engine's hit counter."""
    o = s.opts

    async def texts(tokens: int, n: int) -> list[str]:
        return await _contents(s, tokens, n)

    async def send(bodies: list[dict[str, Any]]) -> tuple[list[d.RequestTiming], float]:
        timings, client = await _stream_bodies(s, bodies)
        return timings, client.cpu_s / client.wall_s if client.wall_s > 0 else 0.0

    async def counter() -> tuple[str | None, float | None]:
        snap = await scrape(s.ep, o.api_key) if s.metrics else None
        table = metrics_table(snap) if snap else None
        if snap is None or table is None or table.hits is None or table.hits not in snap:
            return None, None
        return table.hits, snap[table.hits]

    def body(messages: list[dict[str, str]]) -> dict[str, Any]:
        return _chat_body(s, messages, o.decode_tokens, o.force_output)

    return SessionPlan(texts, send, body, counter, o, lambda msg: _say(s, msg))


def run_bench(url: str, options: BenchOptions | None = None) -> BenchResult:
    """Synchronous :func:`run_bench_async` (starts its own event loop)."""
    out: list[BenchResult] = []

    async def main() -> None:
        # the main task returns None: asyncio.run formats the task's repr (result included) when
        # it restores the SIGINT handler, and the repr of a whole result costs ~20 ms per 64k tokens
        out.append(await run_bench_async(url, options))

    asyncio.run(main())
    return out[0]
