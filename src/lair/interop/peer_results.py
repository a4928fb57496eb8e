"""The peers' benchmark result files, read into lair cells.

    vllm-bench    ``vllm bench serve --save-result`` JSON (vLLM 0.32 ``vllm/benchmarks/serve.py``);
                  with ``--save-detailed`` it carries per-request ``start_times``, ``ttfts``, ``itls``,
                  ``input_lens``, ``output_lens``, ``errors``: the cell is then recomputed with lair's
                  own definitions (:mod:`lair.bench.definitions`), else mapped from its summary.
    llama-bench   ``llama-bench -o json`` (llama.cpp ``tools/llama-bench``): one entry per test; a
                  ``pp`` test (n_gen 0) is a prefill figure, a ``tg`` test (n_prompt 0) a decode one.
    aiperf        AIPerf 0.13's ``profile_export_aiperf.json`` (``JsonExportData``: one
                  ``{unit, avg, p50, p90, ...}`` per metric tag), mapped from its summary; or its
                  per-request ``profile_export.jsonl`` (``MetricRecordInfo``: ``metadata.request_start_ns``
                  / ``request_end_ns``, ``metrics.time_to_first_token``, ``input_sequence_length``,
                  ``output_sequence_length``), recomputed with lair's definitions.
    guidellm      guidellm 0.8's benchmarks JSON (``GenerativeBenchmarksReport``): one cell per
                  benchmark, recomputed from its per-request stats (``request_start_time``,
                  ``prompt_tokens``, ``output_tokens``, and ``info.timings.first_token_iteration``
                  / ``last_token_iteration``: guidellm 0.8.1 writes the iteration times only
                  there) with lair's definitions.

Every figure whose peer definition is not lair's is listed in :attr:`PeerRun.differs`; every field
read but not carried, in :attr:`PeerRun.unmapped`. Budgets: :data:`MAX_RESULT_BYTES` per file,
:data:`MAX_REQUESTS` per-request rows, :data:`MAX_ENTRIES` llama-bench tests; past them, or on a
value of the wrong type, an :class:`~lair.errors.InteropError` names the file and the field.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lair.bench.definitions import (
    RequestTiming,
    aggregate_decode_tok_s,
    per_stream_decode_tok_s,
    percentile,
    ttft_s,
)
from lair.errors import InteropError
from lair.interop.conversion import Unmapped

__all__ = ["MAX_ENTRIES", "MAX_REQUESTS", "MAX_RESULT_BYTES", "RESULT_FORMATS", "PeerRun", "read_results"]

MAX_RESULT_BYTES = 64 << 20
"""Largest result file read (64 MiB: a detailed vLLM run of 10,000 requests is ~20 MiB)."""
MAX_REQUESTS = 100_000
"""Most per-request rows read from one file."""
MAX_ENTRIES = 10_000
"""Most llama-bench tests read from one file."""
RESULT_FORMATS = ("vllm-bench", "llama-bench", "aiperf", "guidellm")

VLLM_SUMMARY_DIFFERS = [
    "decode_tok_s_per_stream: 1000 / vLLM's median TPOT, (latency - TTFT) / (output tokens - 1) per "
    "request; lair's is (completion tokens - first chunk's tokens) / (last chunk - first chunk)",
    "decode_tok_s_aggregate: vLLM's output_throughput, all output tokens / the whole run (prefill "
    "included); lair's is decode tokens / the cell's decode span",
    "ttft_ms_p50: vLLM's median TTFT, from the request's start to the first token; lair's from the "
    "write to the socket to the first content chunk",
]
VLLM_DETAILED_DIFFERS = [
    "every request's chunk times are vLLM's (start + ttft + inter-token gaps); its tokens are shared "
    "out evenly over the chunks (lair: continuous usage or text length)",
    "a vLLM run keeps max_concurrency requests in flight over num_prompts requests; a lair cell sends "
    "its concurrency at once: prefill_tok_s is recomputed only at concurrency 1, the aggregate decode "
    "over the whole run",
]
LLAMA_DIFFERS = [
    "prefill_tok_s: llama-bench's avg_ts of a pp test, n_prompt tokens / the time of one batched "
    "decode in-process (no HTTP, no tokenizer, no TTFT); lair's is prompt tokens / TTFT from a server",
    "decode_tok_s_per_stream: llama-bench's avg_ts of a tg test, n_gen tokens / their generation time "
    "in-process; lair's is measured from streamed chunks",
]


@dataclass
class PeerRun:
    """A peer's result file as lair cells, with what it is and what it lost."""

    tool: str
    version: str
    sha256: str
    file: str
    cells: list[dict[str, Any]]
    recomputed: bool
    differs: list[str] = field(default_factory=list)
    unmapped: list[Unmapped] = field(default_factory=list)
    model: str = ""

    def provenance(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "version": self.version,
            "sha256": self.sha256,
            "file": self.file,
            "recomputed": self.recomputed,
            "differs": self.differs,
            "unmapped": [u.as_dict() for u in self.unmapped],
        }


def read_results(fmt: str, path: Path, version: str | None = None) -> PeerRun:
    """The lair cells of a peer's result file (``version``: the tool's, where the file does not say)."""
    raw = _bytes(path)
    sha = hashlib.sha256(raw).hexdigest()
    if fmt == "aiperf" and raw.lstrip().startswith(b"{") and b"\n{" in raw.strip():
        return _aiperf_records(raw, str(path), sha, version)
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise InteropError(str(path), "", f"not JSON: {exc}") from exc
    if fmt == "aiperf":
        return _aiperf(data, str(path), sha, version)
    if fmt == "guidellm":
        return _guidellm(data, str(path), sha, version)
    if fmt == "vllm-bench":
        return _vllm(data, str(path), sha, version)
    if fmt == "llama-bench":
        return _llama(data, str(path), sha, version)
    raise ValueError(f"unknown result format {fmt!r}")


def _bytes(path: Path) -> bytes:
    try:
        size = path.stat().st_size
        if size > MAX_RESULT_BYTES:
            raise InteropError(str(path), "", f"{size} bytes is over the {MAX_RESULT_BYTES}-byte budget")
        return path.read_bytes()
    except OSError as exc:
        raise InteropError(str(path), "", f"cannot read: {exc.strerror or exc}") from exc


def _num(data: dict[str, Any], key: str, file: str, *, required: bool = True) -> float | None:
    value = data.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InteropError(file, key, f"a number, not {value!r}")
    return float(value)


# ---- vllm bench serve -----------------------------------------------------------------------

VLLM_READ = {"completed", "failed", "total_input_tokens", "total_output_tokens", "num_prompts"}
VLLM_READ |= {"max_concurrency", "median_ttft_ms", "p90_ttft_ms", "median_tpot_ms", "output_throughput"}
VLLM_READ |= {"model_id", "start_times", "ttfts", "itls", "input_lens", "output_lens", "errors"}
VLLM_KEPT_ASIDE = {"date", "backend", "endpoint_type", "label", "tokenizer_id", "request_rate", "burstiness"}


def _vllm(data: Any, file: str, sha: str, version: str | None) -> PeerRun:
    if not isinstance(data, dict) or "completed" not in data:
        raise InteropError(file, "", "not a `vllm bench serve` result (no completed count)")
    completed = int(_num(data, "completed", file) or 0)
    if completed < 1:
        raise InteropError(file, "completed", "no request completed")
    requests = _vllm_requests(data, file)
    concurrency = data.get("max_concurrency") or data.get("num_prompts") or completed
    context = round((_num(data, "total_input_tokens", file) or 0) / completed)
    cell: dict[str, Any] = {"context": max(context, 1), "concurrency": int(concurrency), "repeats": 1}
    cell |= {"prompt_tokens": context, "errors": int(_num(data, "failed", file, required=False) or 0)}
    cell["completion_tokens"] = round((_num(data, "total_output_tokens", file) or 0) / completed)
    if requests:
        cell |= _recomputed(requests, int(concurrency))
        differs = VLLM_DETAILED_DIFFERS
    else:
        tpot = _num(data, "median_tpot_ms", file, required=False)
        cell["ttft_ms_p50"] = _num(data, "median_ttft_ms", file, required=False)
        cell["ttft_ms_p90"] = _num(data, "p90_ttft_ms", file, required=False)
        cell["decode_tok_s_per_stream"] = 1000.0 / tpot if tpot else None
        cell["decode_tok_s_aggregate"] = _num(data, "output_throughput", file, required=False)
        differs = VLLM_SUMMARY_DIFFERS
    lost = [
        Unmapped(k, v, "no lair cell field")
        for k, v in data.items()
        if k not in VLLM_READ and not isinstance(v, list) and v is not None
    ]
    lost += [Unmapped(k, f"{len(v)} values", "per-request data lair does not use") for k, v in data.items()
             if isinstance(v, list) and k not in VLLM_READ]  # fmt: skip
    ver = version or str(data.get("vllm_version") or "unknown (the file does not say; pass --tool-version)")
    return PeerRun(
        "vllm-bench", ver, sha, file, [cell], bool(requests), differs, lost, str(data.get("model_id") or "")
    )


def _vllm_requests(data: dict[str, Any], file: str) -> list[RequestTiming]:
    """The per-request timings of a ``--save-detailed`` result (empty without them)."""
    keys = ("start_times", "ttfts", "itls", "input_lens", "output_lens")
    if not all(isinstance(data.get(k), list) for k in keys):
        return []
    n = len(data["ttfts"])
    if n > MAX_REQUESTS:
        raise InteropError(file, "ttfts", f"{n} requests is over the budget of {MAX_REQUESTS}")
    if any(len(data[k]) != n for k in keys):
        raise InteropError(
            file, "ttfts", "start_times, ttfts, itls, input_lens, output_lens differ in length"
        )
    errors = data.get("errors") or [""] * n
    out = []
    for i in range(n):
        out.append(_vllm_request(data, i, str(errors[i] or "") if i < len(errors) else "", file))
    return out


def _vllm_request(data: dict[str, Any], i: int, error: str, file: str) -> RequestTiming:
    start, ttft, itls = data["start_times"][i], data["ttfts"][i], data["itls"][i]
    if error or not ttft:
        return RequestTiming(send_t=float(start or 0.0), error=error or "no first token")
    if not isinstance(itls, list) or len(itls) > MAX_REQUESTS:
        raise InteropError(file, f"itls[{i}]", "a list of inter-token gaps within the budget")
    times = [float(start) + float(ttft)]
    for gap in itls:
        if not isinstance(gap, int | float) or gap < 0:
            raise InteropError(file, f"itls[{i}]", f"a gap is {gap!r}, not a number of seconds >= 0")
        times.append(times[-1] + float(gap))
    return RequestTiming(
        send_t=float(start),
        content_times=times,
        content_chars=[1] * len(times),
        done_t=times[-1],
        prompt_tokens=int(data["input_lens"][i]),
        completion_tokens=int(data["output_lens"][i]),
        status=200,
    )


def _p(values: list[float], q: float) -> float | None:
    return percentile(values, q) if values else None


def _recomputed(rs: list[RequestTiming], concurrency: int) -> dict[str, Any]:
    """The cell's figures from per-request timings, with lair's own definitions."""
    ok = [r for r in rs if r.ok]
    ttfts = [t * 1000 for t in (ttft_s(r) for r in ok) if t is not None]
    decode = [d for d in (per_stream_decode_tok_s(r) for r in ok) if d is not None]
    prefill = [(r.prompt_tokens or 0) / t for r in ok if (t := ttft_s(r))] if concurrency == 1 else []
    return {
        "ttft_ms_p50": _p(ttfts, 50),
        "ttft_ms_p90": _p(ttfts, 90),
        "prefill_tok_s": _p(prefill, 50),
        "decode_tok_s_per_stream": _p(decode, 50),
        "decode_tok_s_aggregate": aggregate_decode_tok_s(ok) if ok else None,
        "errors": len(rs) - len(ok),
    }


# ---- llama-bench -o json --------------------------------------------------------------------

LLAMA_READ = {"n_prompt", "n_gen", "n_depth", "avg_ts", "build_commit", "build_number", "model_filename"}


def _llama(data: Any, file: str, sha: str, version: str | None) -> PeerRun:
    if not isinstance(data, list) or not data:
        raise InteropError(file, "", "not `llama-bench -o json` output (a list of tests)")
    if len(data) > MAX_ENTRIES:
        raise InteropError(file, "", f"{len(data)} tests is over the budget of {MAX_ENTRIES}")
    cells: dict[int, dict[str, Any]] = {}
    lost: list[Unmapped] = []
    for i, entry in enumerate(data):
        if not isinstance(entry, dict):
            raise InteropError(file, f"[{i}]", "a test is a JSON object")
        _llama_entry(entry, i, file, cells, lost)
    first = data[0]
    ver = version or f"b{first.get('build_number', '?')} ({first.get('build_commit', '?')})"
    aside = sorted({k for e in data for k in e if k not in LLAMA_READ})
    lost.append(Unmapped("[*]", aside, "test settings and hardware lair's cells do not carry"))
    return PeerRun(
        "llama-bench",
        ver,
        sha,
        file,
        list(cells.values()),
        False,
        LLAMA_DIFFERS,
        lost,
        str(first.get("model_filename") or ""),
    )


def _llama_entry(
    entry: dict[str, Any], i: int, file: str, cells: dict[int, dict[str, Any]], lost: list[Unmapped]
) -> None:
    n_prompt, n_gen = int(_num(entry, "n_prompt", file) or 0), int(_num(entry, "n_gen", file) or 0)
    depth = int(_num(entry, "n_depth", file, required=False) or 0)
    rate = _num(entry, "avg_ts", file)
    if n_prompt and n_gen:
        lost.append(Unmapped(f"[{i}]", f"pp{n_prompt}+tg{n_gen}", "a mixed test: neither prefill nor decode"))
        return
    context = max(depth + n_prompt, 1)
    cell = cells.setdefault(context, {"context": context, "concurrency": 1, "repeats": 1})
    if n_prompt:
        cell |= {"prompt_tokens": n_prompt + depth, "prefill_tok_s": rate}
    else:
        cell |= {"decode_tok_s_per_stream": rate, "decode_tok_s_aggregate": rate, "completion_tokens": n_gen}


# ---- AIPerf --------------------------------------------------------------------------------

AIPERF_DIFFERS = [
    "decode_tok_s_per_stream: AIPerf's output_token_throughput_per_user p50, per request 1000 / its "
    "inter-token latency (latency - TTFT) / (output tokens - 1); lair's counts from the first to the "
    "last content chunk",
    "decode_tok_s_aggregate: AIPerf's output_token_throughput, all output tokens / the benchmark "
    "duration (prefill included); lair's is decode tokens / the cell's decode span",
    "ttft_ms_p50: AIPerf's time_to_first_token p50, from the request's start to the first token",
]
AIPERF_RECORD_DIFFERS = [
    "a request's chunks are its first token (start + time_to_first_token) and its end "
    "(request_end_ns): lair's per-stream decode is then (output tokens - 1) / (end - first token)",
    "an AIPerf run keeps its concurrency in flight over many requests; a lair cell sends it at once: "
    "prefill_tok_s is recomputed only at concurrency 1, the aggregate decode over the whole run",
]
AIPERF_READ = {"aiperf_version", "time_to_first_token", "input_sequence_length", "output_sequence_length"}
AIPERF_READ |= {"output_token_throughput_per_user", "output_token_throughput", "error_request_count"}
AIPERF_READ |= {"request_count", "input_config"}


def _metric(data: dict[str, Any], tag: str, stat: str, file: str) -> float | None:
    block = data.get(tag)
    if block is None:
        return None
    if not isinstance(block, dict):
        raise InteropError(file, tag, "a metric is {unit, avg, p50, ...}")
    return _num(block, stat, file, required=False) if stat in block else None


def _concurrency(config: Any, depth: int = 0) -> int | None:
    """The first integer ``concurrency`` in AIPerf's ``input_config`` (its load settings; AIPerf
    0.13.0 writes them in a list, ``input_config.phases[0].concurrency``)."""
    if depth > 8 or not isinstance(config, dict | list):
        return None
    value = config.get("concurrency") if isinstance(config, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    for v in config.values() if isinstance(config, dict) else config[:MAX_ENTRIES]:
        found = _concurrency(v, depth + 1) if isinstance(v, dict | list) else None
        if found:
            return found
    return None


def _aiperf(data: Any, file: str, sha: str, version: str | None) -> PeerRun:
    if not isinstance(data, dict) or "time_to_first_token" not in data:
        raise InteropError(file, "", "not AIPerf's profile_export_aiperf.json (no time_to_first_token)")
    context = round(_metric(data, "input_sequence_length", "avg", file) or 0)
    cell: dict[str, Any] = {"context": max(context, 1), "prompt_tokens": context, "repeats": 1}
    cell["concurrency"] = _concurrency(data.get("input_config")) or 1
    cell["ttft_ms_p50"] = _metric(data, "time_to_first_token", "p50", file)
    cell["ttft_ms_p90"] = _metric(data, "time_to_first_token", "p90", file)
    cell["decode_tok_s_per_stream"] = _metric(data, "output_token_throughput_per_user", "p50", file)
    cell["decode_tok_s_aggregate"] = _metric(data, "output_token_throughput", "avg", file)
    cell["completion_tokens"] = round(_metric(data, "output_sequence_length", "avg", file) or 0)
    cell["errors"] = round(_metric(data, "error_request_count", "avg", file) or 0)
    lost = [
        Unmapped(k, v, "no lair cell field")
        for k, v in data.items()
        if k not in AIPERF_READ and v is not None
    ]
    ver = version or str(data.get("aiperf_version") or "unknown (the file does not say; pass --tool-version)")
    return PeerRun("aiperf", ver, sha, file, [cell], False, AIPERF_DIFFERS, lost)


def _aiperf_records(raw: bytes, file: str, sha: str, version: str | None) -> PeerRun:
    lines = [line for line in raw.splitlines() if line.strip()]
    if len(lines) > MAX_REQUESTS:
        raise InteropError(file, "", f"{len(lines)} records is over the budget of {MAX_REQUESTS}")
    requests = [_aiperf_record(line, i, file) for i, line in enumerate(lines)]
    done = [r for r in requests if r.ok]
    if not done:
        raise InteropError(file, "", "no request completed")
    context = round(sum(r.prompt_tokens or 0 for r in done) / len(done))
    concurrency = _in_flight(requests)
    cell: dict[str, Any] = {"context": max(context, 1), "concurrency": concurrency, "repeats": 1}
    cell |= {
        "prompt_tokens": context,
        "completion_tokens": round(sum(r.completion_tokens or 0 for r in done) / len(done)),
    }
    cell |= _recomputed(requests, concurrency)
    ver = version or "unknown (profile_export.jsonl does not say; pass --tool-version)"
    lost = [
        Unmapped("[*].metrics", "other per-request metrics", "not lair's definitions; recomputed instead")
    ]
    return PeerRun("aiperf", ver, sha, file, [cell], True, AIPERF_RECORD_DIFFERS, lost)


def _aiperf_record(line: bytes, i: int, file: str) -> RequestTiming:
    where = f"line {i + 1}"
    try:
        rec = json.loads(line)
        meta, metrics = rec["metadata"], rec.get("metrics") or {}
        start, end = int(meta["request_start_ns"]) / 1e9, int(meta["request_end_ns"]) / 1e9
    except (ValueError, KeyError, TypeError) as exc:
        raise InteropError(
            file, where, f"not an AIPerf record (metadata.request_start_ns, request_end_ns): {exc}"
        ) from exc
    if rec.get("error") or "time_to_first_token" not in metrics:
        return RequestTiming(send_t=start, error=str(rec.get("error") or "no first token"))

    def value(tag: str) -> float:
        v = (metrics.get(tag) or {}).get("value")
        if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
            raise InteropError(file, f"{where}: metrics.{tag}.value", f"a number >= 0, not {v!r}")
        return float(v)

    first = start + value("time_to_first_token") / 1000.0
    out_tokens = int(value("output_sequence_length"))
    times = [first, end] if out_tokens > 1 and end > first else [first]
    return RequestTiming(
        send_t=start,
        content_times=times,
        content_chars=[1, max(out_tokens - 1, 0)][: len(times)],
        done_t=end,
        prompt_tokens=int(value("input_sequence_length")),
        completion_tokens=out_tokens,
        status=200,
    )


def _in_flight(rs: list[RequestTiming]) -> int:
    """The most requests in flight at once (AIPerf's concurrency, as its records show it)."""
    edges = sorted(
        [(r.send_t, 1) for r in rs] + [(r.done_t or r.send_t, -1) for r in rs], key=lambda e: (e[0], e[1])
    )
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return max(most, 1)


# ---- guidellm ------------------------------------------------------------------------------

GUIDELLM_DIFFERS = [
    "a request's chunks are its first and last token iterations (guidellm's timings): lair's "
    "per-stream decode is then (output tokens - 1) / (last - first token)",
    "a guidellm benchmark keeps its streams in flight over many requests; a lair cell sends them at "
    "once: prefill_tok_s is recomputed only at concurrency 1, the aggregate decode over the benchmark",
]


def _guidellm(data: Any, file: str, sha: str, version: str | None) -> PeerRun:
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise InteropError(file, "", "not guidellm's benchmarks JSON (no benchmarks list)")
    if len(data["benchmarks"]) > MAX_ENTRIES:
        raise InteropError(
            file, "benchmarks", f"{len(data['benchmarks'])} is over the budget of {MAX_ENTRIES}"
        )
    cells, lost, seen = [], [], 0
    for b, bench in enumerate(data["benchmarks"]):
        where = f"benchmarks[{b}]"
        groups = (bench.get("requests") or {}) if isinstance(bench, dict) else None
        if not isinstance(groups, dict):
            raise InteropError(file, where, "a benchmark with requests {successful, errored, incomplete}")
        rows = [(f"{where}.requests.{k}[{i}]", r, k) for k in ("successful", "errored", "incomplete")
                for i, r in enumerate(groups.get(k) or [])]  # fmt: skip
        seen += len(rows)
        if seen > MAX_REQUESTS:
            raise InteropError(file, where, f"over the budget of {MAX_REQUESTS} requests")
        requests = [_guidellm_request(r, w, kind, file) for w, r, kind in rows]
        cells.append(_guidellm_cell(bench, requests, where, file))
        lost.append(Unmapped(f"{where}.metrics", "guidellm's own summaries", "recomputed from the requests"))
    meta = data.get("metadata") or {}
    ver = version or str(meta.get("guidellm_version") or "unknown (pass --tool-version)")
    return PeerRun("guidellm", ver, sha, file, cells, True, GUIDELLM_DIFFERS, lost)


def _guidellm_request(r: Any, where: str, kind: str, file: str) -> RequestTiming:
    if not isinstance(r, dict):
        raise InteropError(file, where, "a request's stats are a JSON object")
    start = _num(r, "request_start_time", file, required=False)
    if start is None:
        raise InteropError(file, f"{where}.request_start_time", "missing")
    if kind != "successful":
        return RequestTiming(send_t=start, error=kind)
    timings = (r.get("info") or {}).get("timings") if isinstance(r.get("info"), dict) else None
    at = timings if isinstance(timings, dict) and "first_token_iteration" in timings else r
    first, last = (
        _num(at, k, file, required=False) for k in ("first_token_iteration", "last_token_iteration")
    )
    out_tokens = int(_num(r, "output_tokens", file, required=False) or 0)
    if first is None:
        return RequestTiming(send_t=start, error="no first token")
    times = [first, last] if last is not None and last > first and out_tokens > 1 else [first]
    return RequestTiming(
        send_t=start,
        content_times=times,
        content_chars=[1, max(out_tokens - 1, 0)][: len(times)],
        done_t=times[-1],
        prompt_tokens=int(_num(r, "prompt_tokens", file, required=False) or 0),
        completion_tokens=out_tokens,
        status=200,
    )


def _guidellm_cell(bench: dict[str, Any], rs: list[RequestTiming], where: str, file: str) -> dict[str, Any]:
    done = [r for r in rs if r.ok]
    if not done:
        raise InteropError(file, where, "no request completed")
    strategy = ((bench.get("config") or {}).get("strategy")) or {}
    kind = strategy.get("type_")
    streams = strategy.get("streams") if kind == "concurrent" else 1 if kind == "synchronous" else None
    concurrency = int(streams) if isinstance(streams, int) and streams > 0 else _in_flight(rs)
    context = round(sum(r.prompt_tokens or 0 for r in done) / len(done))
    cell: dict[str, Any] = {"context": max(context, 1), "concurrency": concurrency, "repeats": 1}
    cell |= {
        "prompt_tokens": context,
        "completion_tokens": round(sum(r.completion_tokens or 0 for r in done) / len(done)),
    }
    return cell | _recomputed(rs, concurrency)
