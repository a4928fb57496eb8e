"""GPU telemetry during a bench: one sampler per run, each cell a window of its samples.

Two backends behind one interface (:class:`GpuSampler`), picked by :func:`open_sampler`:

- ``nvml``: NVIDIA's management library through ``nvidia-ml-py`` (imported only here, only when
  asked for): power, the board's energy counter (``nvmlDeviceGetTotalEnergyConsumption``, mJ), SM and
  memory clocks, temperature, memory used and the clock-event (throttle) reasons, on a thread every
  ``interval_s``;
- ``nvidia-smi``: ``nvidia-smi --query-gpu=... --format=csv,noheader,nounits -lms N`` read line by
  line (no energy counter there: energy is power integrated over time).

Where neither works, :class:`NoTelemetry` says why ("no GPU telemetry: ..."), and every figure that
needs a GPU sample is None, never zero. Timestamps are ``time.perf_counter`` at the sample (NVML) or
at the line's arrival (nvidia-smi), the clock the bench's cells are timed on.

Energy of a window (:func:`window_energy`): the energy counter's delta when every device's samples
carry it (interpolated linearly at the window's edges), else the trapezoid rule over power. Cost
(:func:`cost_per_mtok`): electricity from joules per token and a price per kWh, plus hardware cost
spread evenly over its life, charged at the cell's token rate (the rig kept that busy all its life).
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Protocol

__all__ = [
    "SMI_FIELDS",
    "THROTTLE_REASONS",
    "GpuSample",
    "GpuSampler",
    "NoTelemetry",
    "NvmlSampler",
    "SmiSampler",
    "cost_per_mtok",
    "open_sampler",
    "parse_smi_line",
    "summarize_window",
    "throttle_names",
    "window_energy",
]

THROTTLE_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
"""NVML's clock-event reason bits (``nvmlClocksEventReason*``, nvidia-smi's ``clocks_event_reasons``)."""
THERMAL = frozenset({"sw_thermal_slowdown", "hw_thermal_slowdown", "hw_slowdown"})
"""Reasons that mean heat limited the clocks (``hw_slowdown`` is thermal or power-brake)."""
POWER = frozenset({"sw_power_cap", "hw_power_brake_slowdown"})
"""Reasons that mean the power limit held the clocks down."""

SMI_FIELDS = (
    "index",
    "power.draw",
    "clocks.sm",
    "clocks.mem",
    "temperature.gpu",
    "memory.used",
    "clocks_event_reasons.active",
)
"""The ``--query-gpu`` fields the nvidia-smi backend reads, in order (older drivers spell the last
one ``clocks_throttle_reasons.active``: tried when the first spelling is refused)."""
_OLD_REASONS = "clocks_throttle_reasons.active"


@dataclass(frozen=True)
class GpuSample:
    """One reading of one GPU; None where the backend gave no value."""

    t_s: float
    gpu: int
    power_w: float | None = None
    energy_mj: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    temp_c: float | None = None
    mem_used_mib: float | None = None
    reasons: int | None = None


def throttle_names(mask: int | None) -> list[str]:
    """The names of the reason bits set in ``mask`` (``gpu_idle`` included: it is no throttle)."""
    return [name for bit, name in THROTTLE_REASONS.items() if mask and mask & bit]


class GpuSampler(Protocol):
    """What the bench asks of a telemetry backend."""

    backend: str
    """``nvml``, ``nvidia-smi`` or ``none``."""
    why_none: str
    """Why there is no telemetry (``none`` only), said plainly."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def samples(self) -> list[GpuSample]: ...

    def info(self) -> dict[str, Any]:
        """Driver, CUDA and NVML versions and the GPUs' names, as far as the backend tells."""
        ...


@dataclass
class NoTelemetry:
    why_none: str
    backend: str = "none"

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def samples(self) -> list[GpuSample]:
        return []

    def info(self) -> dict[str, Any]:
        return {}


@dataclass
class _Thread:
    """A polling thread: ``read()`` every ``interval_s`` until stopped."""

    read: Callable[[], list[GpuSample]]
    interval_s: float
    out: list[GpuSample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _loop(self) -> None:
        while True:
            self.out.extend(self.read())
            if self._stop.wait(self.interval_s):
                self.out.extend(self.read())  # one reading at the end, so a window's edge is covered
                return

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="lair-gpu-telemetry", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)


class NvmlSampler:
    """NVML through ``nvidia-ml-py``; :meth:`open` raises ``RuntimeError`` saying why it cannot."""

    backend = "nvml"
    why_none = ""

    def __init__(self, nvml: Any, interval_s: float) -> None:
        self._nvml = nvml
        n = nvml.nvmlDeviceGetCount()
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
        self._poll = _Thread(self._read, interval_s)
        self._info = self._read_info()  # before nvmlShutdown: the versions are read while NVML is up

    @classmethod
    def open(cls, interval_s: float) -> NvmlSampler:
        try:
            import pynvml  # nvidia-ml-py's module
        except ImportError as exc:
            raise RuntimeError("nvidia-ml-py is not installed (pip install 'lair[gpu]')") from exc
        try:
            pynvml.nvmlInit()
            return cls(pynvml, interval_s)
        except pynvml.NVMLError as exc:
            raise RuntimeError(f"NVML: {exc}") from exc

    def _get(self, fn: str, *args: Any) -> Any:
        try:
            return getattr(self._nvml, fn)(*args)
        except self._nvml.NVMLError:
            return None

    def _one(self, i: int, h: Any) -> GpuSample:
        nv = self._nvml
        power, energy = (
            self._get("nvmlDeviceGetPowerUsage", h),
            self._get("nvmlDeviceGetTotalEnergyConsumption", h),
        )
        mem = self._get("nvmlDeviceGetMemoryInfo", h)
        reasons = self._get("nvmlDeviceGetCurrentClocksEventReasons", h)
        if reasons is None:
            reasons = self._get("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        return GpuSample(
            t_s=time.perf_counter(),
            gpu=i,
            power_w=power / 1000 if power is not None else None,
            energy_mj=float(energy) if energy is not None else None,
            sm_clock_mhz=self._get("nvmlDeviceGetClockInfo", h, nv.NVML_CLOCK_SM),
            mem_clock_mhz=self._get("nvmlDeviceGetClockInfo", h, nv.NVML_CLOCK_MEM),
            temp_c=self._get("nvmlDeviceGetTemperature", h, nv.NVML_TEMPERATURE_GPU),
            mem_used_mib=mem.used / 2**20 if mem is not None else None,
            reasons=int(reasons) if reasons is not None else None,
        )

    def _read(self) -> list[GpuSample]:
        return [self._one(i, h) for i, h in enumerate(self._handles)]

    def start(self) -> None:
        self._poll.start()

    def stop(self) -> None:
        self._poll.stop()
        self._get("nvmlShutdown")

    def samples(self) -> list[GpuSample]:
        return list(self._poll.out)

    def info(self) -> dict[str, Any]:
        return dict(self._info)

    def _read_info(self) -> dict[str, Any]:
        def text(v: Any) -> str | None:
            return v.decode() if isinstance(v, bytes) else (str(v) if v is not None else None)

        cuda = self._get("nvmlSystemGetCudaDriverVersion")
        return {
            "driver": text(self._get("nvmlSystemGetDriverVersion")),
            "cuda": f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None,
            "nvml": text(self._get("nvmlSystemGetNVMLVersion")),
            "gpus": [text(self._get("nvmlDeviceGetName", h)) for h in self._handles],
        }


def _num(text: str) -> float | None:
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def parse_smi_line(line: str, t_s: float) -> GpuSample | None:
    """One line of ``--query-gpu`` CSV (:data:`SMI_FIELDS`, no units) as a sample; None for a line
    that is not one (a header, a warning, fewer fields)."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != len(SMI_FIELDS) or not parts[0].isdigit():
        return None
    reasons_text = parts[6]
    try:
        reasons = int(reasons_text, 16) if reasons_text.lower().startswith("0x") else None
    except ValueError:
        reasons = None
    return GpuSample(
        t_s=t_s,
        gpu=int(parts[0]),
        power_w=_num(parts[1]),
        sm_clock_mhz=_num(parts[2]),
        mem_clock_mhz=_num(parts[3]),
        temp_c=_num(parts[4]),
        mem_used_mib=_num(parts[5]),
        reasons=reasons,
    )


class SmiSampler:
    """``nvidia-smi -lms`` in a child process, its lines read on a thread as they arrive."""

    backend = "nvidia-smi"
    why_none = ""

    def __init__(self, exe: str, fields: Sequence[str], interval_s: float) -> None:
        self._exe, self._fields, self._ms = exe, list(fields), max(int(interval_s * 1000), 1)
        self._out: list[GpuSample] = []
        self._proc: subprocess.Popen[str] | None = None
        self._thread: threading.Thread | None = None
        self._info: dict[str, Any] = {}

    @classmethod
    def open(cls, interval_s: float) -> SmiSampler:
        exe = shutil.which("nvidia-smi")
        if exe is None:
            raise RuntimeError("nvidia-smi is not on PATH")
        for fields in (SMI_FIELDS, (*SMI_FIELDS[:-1], _OLD_REASONS)):
            out = _smi(exe, ["--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"])
            if out is not None and any(parse_smi_line(x, 0.0) for x in out.splitlines()):
                s = cls(exe, fields, interval_s)
                s._info = _smi_info(exe)
                return s
        raise RuntimeError("nvidia-smi answered no GPU readings")

    def _reader(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            sample = parse_smi_line(line, time.perf_counter())
            if sample is not None:
                self._out.append(sample)

    def start(self) -> None:
        query = [
            "--query-gpu=" + ",".join(self._fields),
            "--format=csv,noheader,nounits",
            "-lms",
            str(self._ms),
        ]
        self._proc = subprocess.Popen(
            [self._exe, *query],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
        self._thread = threading.Thread(target=self._reader, name="lair-nvidia-smi", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._proc is not None and self._proc.stdout is not None:
            self._proc.stdout.close()

    def samples(self) -> list[GpuSample]:
        return list(self._out)

    def info(self) -> dict[str, Any]:
        return dict(self._info)


def _smi(exe: str, args: list[str]) -> str | None:
    try:
        out = subprocess.run([exe, *args], capture_output=True, text=True, timeout=15, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def _smi_info(exe: str) -> dict[str, Any]:
    rows = (_smi(exe, ["--query-gpu=name,driver_version", "--format=csv,noheader"]) or "").splitlines()
    cells = [[c.strip() for c in r.split(",")] for r in rows if r.strip()]
    head = _smi(exe, []) or ""
    cuda = head.split("CUDA Version:", 1)[1].split()[0] if "CUDA Version:" in head else None
    driver = cells[0][1] if cells and len(cells[0]) > 1 else None
    return {"driver": driver, "cuda": cuda, "nvml": None, "gpus": [c[0] for c in cells]}


def open_sampler(kind: str = "auto", interval_s: float = 0.1) -> GpuSampler:
    """The sampler ``kind`` names (``auto``: NVML, else nvidia-smi, else none); a backend asked for
    by name that cannot run gives :class:`NoTelemetry` with its reason."""
    if kind == "none":
        return NoTelemetry("telemetry turned off (--telemetry none)")
    tried: list[str] = []
    openers: list[tuple[str, Callable[[float], GpuSampler]]] = [
        ("nvml", NvmlSampler.open),
        ("nvidia-smi", SmiSampler.open),
    ]
    for name, opener in openers:
        if kind not in ("auto", name):
            continue
        try:
            return opener(interval_s)
        except RuntimeError as exc:
            tried.append(f"{name}: {exc}")
    return NoTelemetry("no GPU telemetry: " + "; ".join(tried))


def _at(series: Sequence[GpuSample], t: float, key: str) -> float | None:
    """``key`` of one GPU's series at time ``t``, linearly interpolated (held at the ends)."""
    pts = [(s.t_s, v) for s in series if (v := getattr(s, key)) is not None]
    if not pts:
        return None
    if t <= pts[0][0]:
        return float(pts[0][1])
    for (t0, v0), (t1, v1) in pairwise(pts):
        if t0 <= t <= t1:
            return float(v0 + (v1 - v0) * (t - t0) / (t1 - t0)) if t1 > t0 else float(v1)
    return float(pts[-1][1])


def _trapezoid(series: Sequence[GpuSample], t0: float, t1: float) -> float | None:
    """Joules: power over [t0, t1] by the trapezoid rule, the edges interpolated."""
    inside = [(s.t_s, s.power_w) for s in series if s.power_w is not None and t0 < s.t_s < t1]
    p0, p1 = _at(series, t0, "power_w"), _at(series, t1, "power_w")
    if p0 is None or p1 is None:
        return None
    pts: list[tuple[float, float]] = [(t0, p0), *((t, float(p or 0.0)) for t, p in inside), (t1, p1)]
    return sum((tb - ta) * (pa + pb) / 2 for (ta, pa), (tb, pb) in pairwise(pts))


def _by_gpu(samples: Sequence[GpuSample]) -> dict[int, list[GpuSample]]:
    out: dict[int, list[GpuSample]] = {}
    for s in sorted(samples, key=lambda s: s.t_s):
        out.setdefault(s.gpu, []).append(s)
    return out


def window_energy(samples: Sequence[GpuSample], t0: float, t1: float) -> tuple[float | None, str | None]:
    """(joules of every GPU over [t0, t1], how: ``counter`` or ``power-integral``); (None, None)
    without samples that bracket the window."""
    gpus = _by_gpu(samples)
    if not gpus or t1 <= t0:
        return None, None
    if all(any(s.energy_mj is not None for s in ser) for ser in gpus.values()):
        deltas = [
            (_at(ser, t1, "energy_mj") or 0.0) - (_at(ser, t0, "energy_mj") or 0.0) for ser in gpus.values()
        ]
        return sum(deltas) / 1000, "counter"
    parts = [_trapezoid(ser, t0, t1) for ser in gpus.values()]
    if any(p is None for p in parts):
        return None, None
    return sum(p for p in parts if p is not None), "power-integral"


def _span(values: list[float]) -> dict[str, float] | None:
    return {"min": min(values), "max": max(values)} if values else None


def summarize_window(samples: Sequence[GpuSample], t0: float, t1: float) -> dict[str, Any]:
    """What the GPUs did during one cell: energy, average and peak watts (all GPUs together), clock
    and temperature ranges, memory used, and the throttle reasons seen (a reason seen in any sample
    of the window counts)."""
    inside = [s for s in samples if t0 <= s.t_s <= t1]
    energy, how = window_energy(samples, t0, t1)
    names = sorted({n for s in inside for n in throttle_names(s.reasons)} - {"gpu_idle"})

    def vals(key: str) -> list[float]:
        return [float(v) for s in inside if (v := getattr(s, key)) is not None]

    return {
        "samples": len(inside),
        "gpus": len({s.gpu for s in inside}),
        "energy_j": energy,
        "energy_source": how,
        "avg_w": energy / (t1 - t0) if energy is not None and t1 > t0 else None,
        "peak_w": _peak(inside),
        "sm_clock_mhz": _span(vals("sm_clock_mhz")),
        "mem_clock_mhz": _span(vals("mem_clock_mhz")),
        "temp_c_max": max(vals("temp_c"), default=None),
        "mem_used_mib_max": max(vals("mem_used_mib"), default=None),
        "throttle_reasons": names,
        "thermal_throttled": bool(THERMAL & set(names)),
        "power_throttled": bool(POWER & set(names)),
    }


def _peak(inside: Sequence[GpuSample]) -> float | None:
    """The highest reading of all GPUs' power summed over one round of readings (per GPU, each
    reading held until the next)."""
    last: dict[int, float] = {}
    peak: float | None = None
    for s in sorted(inside, key=lambda s: s.t_s):
        if s.power_w is None:
            continue
        last[s.gpu] = s.power_w
        total = sum(last.values())
        peak = total if peak is None else max(peak, total)
    return peak


def cost_per_mtok(
    j_per_token: float | None,
    tok_s: float | None,
    *,
    power_price_kwh: float | None,
    hardware_cost: float | None = None,
    hardware_life_years: float | None = None,
) -> dict[str, float | None]:
    """$ per million tokens: ``energy`` = J/token x 1e6 / 3.6e6 J/kWh x price; ``hardware`` = the
    hardware's cost over its life in seconds (365.25-day years), divided by ``tok_s`` tokens a second,
    x 1e6; ``total`` their sum (None where a part is unknown)."""
    energy = (
        j_per_token * 1e6 / 3.6e6 * power_price_kwh if j_per_token is not None and power_price_kwh else None
    )
    hardware = None
    if hardware_cost and hardware_life_years and tok_s:
        per_s = hardware_cost / (hardware_life_years * 365.25 * 86400)
        hardware = per_s / tok_s * 1e6
    parts = [p for p in (energy, hardware) if p is not None]
    return {"energy": energy, "hardware": hardware, "total": sum(parts) if parts else None}
