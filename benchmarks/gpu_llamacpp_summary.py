"""The compact summary of ``benchmarks/gpu_llamacpp_sweep.sh``'s raw output (``$W/out`` of the GPU machine,
brought back as tarballs and unpacked): the card, driver, llama.cpp build, the model's shape, and per sweep
context every rate step (offered / achieved rate, TTFT p50/p99, TPOT p99, output tok/s, goodput, flags), the
knee, the max goodput, users at the speed and how the sweep stopped; plus the closed-loop sanity cells, the
warm multi-turn cells and the tune's trials when they ran.

    python benchmarks/gpu_llamacpp_summary.py OUT_DIR [OUT_DIR ...] \
        > benchmarks/results/gpu_llamacpp_sweep_h100.json

Reads only the report folders' ``results.json`` (``bench.load``, ``bench.cells``, ``bench.sessions``) and the
side files the script writes (gpu.csv, model.json, build.time, props.json, llama-server.version, tune.json).
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any


def _r(x: Any, nd: int = 2) -> Any:
    return round(x, nd) if isinstance(x, (int, float)) and not isinstance(x, bool) else x


def _p(stats: dict[str, Any] | None, q: str) -> Any:
    return _r((stats or {}).get(q), 1)


def _first(dirs: list[Path], name: str) -> Path | None:
    for d in dirs:
        if (d / name).exists():
            return d / name
    return None


def _json(path: Path | None) -> Any:
    if path is None:
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def machine(dirs: list[Path]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if p := _first(dirs, "gpu.csv"):
        rows = list(csv.reader(p.read_text().splitlines()))
        if len(rows) > 1:
            out["gpu"] = dict(zip([h.strip() for h in rows[0]], [v.strip() for v in rows[1]], strict=False))
    if m := _json(_first(dirs, "model.json")):
        out["model"] = m
    if p := _first(dirs, "build.time"):
        out["build"] = p.read_text().strip()
    if p := _first(dirs, "llama-server.version"):
        out["llama_server_version"] = p.read_text().strip()
    if props := _json(_first(dirs, "props.json")):
        out["server"] = {
            "build_info": props.get("build_info"),
            "total_slots": props.get("total_slots"),
            "n_ctx_per_slot": (props.get("default_generation_settings") or {}).get("n_ctx"),
        }
    return out


def load_cells(bench: dict[str, Any]) -> dict[int, list[dict[str, Any]]]:
    by_ctx: dict[int, list[dict[str, Any]]] = {}
    for c in (bench.get("load") or {}).get("cells", []):
        by_ctx.setdefault(c["context"], []).append(
            {
                "offered_rate": c["offered_rate"],
                "achieved_rate": _r(c.get("achieved_rate")),
                "requests": c.get("requests"),
                "completed": c.get("completed"),
                "ttft_ms_p50": _p(c.get("ttft_ms"), "p50"),
                "ttft_ms_p99": _p(c.get("ttft_ms"), "p99"),
                "tpot_ms_p50": _p(c.get("tpot_ms"), "p50"),
                "tpot_ms_p99": _p(c.get("tpot_ms"), "p99"),
                "e2e_ms_p99": _p(c.get("e2e_ms"), "p99"),
                "output_tok_s": _r(c.get("output_tok_s"), 1),
                "goodput_rps": _r(c.get("goodput_rps"), 3),
                "slo_met": c.get("slo_met"),
                "in_flight_max": (c.get("in_flight") or {}).get("max"),
                "oversaturated": c.get("oversaturated"),
                "failures": c.get("failures") or {},
                "flags": c.get("flags") or [],
                "output_invalid": (c.get("output") or {}).get("invalid"),
                "client_cpu_fraction": _r(c.get("client_cpu_fraction"), 3),
            }
        )
    return by_ctx


def sweeps(bench: dict[str, Any]) -> list[dict[str, Any]]:
    load = bench.get("load") or {}
    cells = load_cells(bench)
    out = []
    for sw in load.get("sweeps", []):
        out.append(
            {
                "context": sw["context"],
                "slo": sw.get("slo"),
                "user_speed_tok_s": load.get("user_speed"),
                "requests_per_step": load.get("requests_per_rate"),
                "steps": cells.get(sw["context"], []),
                "knee": sw.get("knee"),
                "max_goodput": sw.get("max_goodput"),
                "users_at_speed": sw.get("users"),
                "stopped": sw.get("stopped"),
            }
        )
    return out


def closed_cells(bench: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for c in bench.get("cells", []):
        out.append(
            {
                "context": c.get("context"),
                "concurrency": c.get("concurrency"),
                "prompt_tokens": c.get("prompt_tokens"),
                "ttft_ms_p50": _r(c.get("ttft_ms_p50"), 1),
                "prefill_tok_s": _r(c.get("prefill_tok_s"), 1),
                "decode_tok_s_per_stream": _r(c.get("decode_tok_s_per_stream"), 1),
                "decode_tok_s_aggregate": _r(c.get("decode_tok_s_aggregate"), 1),
                "flags": c.get("flags") or [],
            }
        )
    return out


def warm_cells(bench: dict[str, Any]) -> list[dict[str, Any]]:
    keep = (
        "context", "sessions", "turns", "turn_tokens", "requests", "completed", "hit_rate_declared",
        "hit_rate_responses", "hit_rate_engine", "ttft_ms", "ttft_ms_by_turn", "tpot_ms", "flags",
    )  # fmt: skip
    return [{k: c.get(k) for k in keep if k in c} for c in (bench.get("sessions") or {}).get("cells", [])]


def main(argv: list[str]) -> int:
    dirs = [Path(a) for a in argv]
    summary: dict[str, Any] = {"machine": machine(dirs), "sweeps": [], "closed_loop": [], "warm": []}
    for d in dirs:
        for res in sorted(d.glob("*/results.json")):
            doc = _json(res) or {}
            bench = doc.get("bench") or {}
            fp = doc.get("fingerprint") or {}
            summary.setdefault("fingerprint", {"gpus": fp.get("gpus"), "engine": fp.get("engine"),
                                               "lair_version": fp.get("lair_version")})  # fmt: skip
            entry = {"report": res.parent.name, "started_at": bench.get("started_at")}
            if bench.get("load"):
                summary["sweeps"] += [{**entry, **s} for s in sweeps(bench)]
            if bench.get("sessions"):
                summary["warm"].append({**entry, "cells": warm_cells(bench)})
            if bench.get("cells"):
                summary["closed_loop"].append({**entry, "cells": closed_cells(bench)})
    for d in dirs:
        t = _json(d / "tune.json")
        if t:
            summary["tune"] = t
    json.dump(summary, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
