"""GPU telemetry on a real NVIDIA GPU: both samplers of :mod:`lair.bench.telemetry` side by side.

Runs a load on GPU 0 (torch matmuls, when torch is there) for ``--seconds``, sampled at once by the
NVML backend (the board's energy counter) and the nvidia-smi backend (power integrated by the
trapezoid rule), and writes what each recorded: the versions they read (driver, CUDA, NVML), the
energy of the load window, average and peak watts, clocks, temperature and throttle reasons. The two
energies come from independent sources (a hardware counter, sampled power), so their ratio checks
both. Loads ``telemetry.py`` by path: it needs only the standard library and ``nvidia-ml-py``.

    python benchmarks/gpu_telemetry.py --seconds 20 --out results/gpu_telemetry.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "lair" / "bench" / "telemetry.py"


def _telemetry():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("lair_telemetry", SRC)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["lair_telemetry"] = mod
    spec.loader.exec_module(mod)
    return mod


def _load(seconds: float) -> dict[str, object]:
    try:
        import torch
    except ImportError:
        time.sleep(seconds)
        return {"load": "none (no torch): idle board"}
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(20):
            a @ b  # the work is the point
        torch.cuda.synchronize()
        n += 20
    took = time.perf_counter() - t0
    return {"load": "fp16 matmul 8192^3", "matmuls": n, "tflops": 2 * 8192**3 * n / took / 1e12}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--interval", type=float, default=0.1)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    tel = _telemetry()
    samplers = {kind: tel.open_sampler(kind, args.interval) for kind in ("nvml", "nvidia-smi")}
    for s in samplers.values():
        s.start()
    time.sleep(1.0)
    t0 = time.perf_counter()
    load = _load(args.seconds)
    t1 = time.perf_counter()
    time.sleep(1.0)
    out: dict[str, object] = {"window_s": t1 - t0, **load}
    for kind, s in samplers.items():
        s.stop()
        out[kind] = {
            "backend": s.backend,
            "why_none": s.why_none,
            "info": s.info(),
            "window": tel.summarize_window(s.samples(), t0, t1),
        }
    e = [out[k]["window"]["energy_j"] for k in samplers]  # type: ignore[index]
    out["energy_ratio_smi_over_nvml"] = e[1] / e[0] if all(e) else None
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
