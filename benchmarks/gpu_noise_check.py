"""The quiet-machine certificate's GPU part on a real GPU: does NVML show a second process on the card,
with its SM use, and does ``lair.bench.definitions.noise_reasons`` call the cell noisy for it?

Run on a machine with an NVIDIA GPU, PyTorch and nvidia-ml-py (``pynvml``):

    python benchmarks/gpu_noise_check.py OUT.json

Three windows of 3 s each: (1) the "engine" alone (a bf16 matmul loop in a child process, as an
engine's decode keeps the SMs busy), (2) the engine and a second process doing the same (another
engine on the GPU), (3) nothing. In each, ``gpu_processes`` lists what NVML sees and
``noise_reasons`` judges it with the engine's PID known and unknown. Only the two stdlib modules are
loaded from the source tree, by path: the GPU machine needs none of lair's dependencies.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[1] / "src" / "lair" / "bench"
LOOP = """
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
print("ready", flush=True)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(20):
        a @ b
    torch.cuda.synchronize()
"""


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"lair_bench_{name}", SRC / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _busy(seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", LOOP, str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def _window(machine: Any, definitions: Any, engine: int | None, seconds: float = 3.0) -> dict[str, Any]:
    since = time.time()
    time.sleep(seconds)  # the window being measured: what ran on the GPU during it
    gpu = machine.gpu_processes(since)
    quiet_cpu: dict[str, Any] = {"other_cpu_fraction": None}
    known = definitions.noise_reasons(quiet_cpu, {}, gpu, {engine} if engine else None)
    unknown = definitions.noise_reasons(quiet_cpu, {}, gpu, None)
    return {"gpu": gpu, "reasons_engine_known": known, "reasons_engine_unknown": unknown}


def main() -> None:
    machine, definitions = _load("machine"), _load("definitions")
    out: dict[str, Any] = {"limit_sm_pct": definitions.GPU_OTHER_SM_NOISY_PCT}
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    )
    out["gpu_name"] = smi.stdout.strip()
    engine = _busy(20)
    try:
        out["engine_pid"] = engine.pid
        out["engine_alone"] = _window(machine, definitions, engine.pid)
        other = _busy(8)
        try:
            out["other_pid"] = other.pid
            out["engine_and_other"] = _window(machine, definitions, engine.pid)
        finally:
            other.kill()
            other.wait()
    finally:
        engine.kill()
        engine.wait()
    out["nothing"] = _window(machine, definitions, None)
    Path(sys.argv[1]).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
