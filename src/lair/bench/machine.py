"""What else used the machine while a cell ran: the whole machine's CPU (``/proc/stat``: busy, steal,
the run queue), the engine's own CPU when the bench knows its processes (a native run's process tree
from ``/proc/PID/stat``, a container's cgroup), the bench client's own CPU, and the other processes
on the GPUs (NVML, ``nvidia-ml-py``). The verdict drawn from them is
:func:`lair.bench.definitions.noise_reasons`.

The CPU figures are deltas between snapshots taken right before and right after each repeat's timed
window (prompts are built and ``/metrics`` read outside it), summed over the cell's repeats::

    busy ticks  = user + nice + system + irq + softirq      (guest time is inside user already)
    total ticks = busy + idle + iowait + steal
    system busy cores = d(busy) / d(total) x cpus
    steal fraction    = d(steal) / d(total)
    other cores       = system busy cores - engine cores - client cores      (>= 0)

where the engine's and the client's cores are their CPU seconds over the same wall seconds.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "EngineProcesses",
    "MachineSnapshot",
    "ProcStat",
    "cgroup_of",
    "cpu_window",
    "engine_cpu_s",
    "engine_tree",
    "gpu_processes",
    "parse_proc_stat",
    "pid_cpu_ticks",
    "process_tree",
    "snapshot",
]

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
"""Ticks per second of ``/proc`` CPU times (100 on Linux)."""


@dataclass
class EngineProcesses:
    """What the bench knows of the engine it measures: the root PIDs of its process trees on this
    machine (a native run), or a cgroup folder whose CPU use is the engine's (a container); with
    neither, ``note`` says why its CPU is unknown."""

    pids: list[int] = field(default_factory=list)
    cgroup: str | None = None
    note: str = "engine CPU unknown: the bench was given only a URL"

    @property
    def known(self) -> bool:
        return bool(self.pids or self.cgroup)


@dataclass(frozen=True)
class ProcStat:
    """The machine-wide line of ``/proc/stat`` in ticks, the number of CPUs and ``procs_running``."""

    busy: int
    idle: int
    steal: int
    cpus: int
    procs_running: int | None

    @property
    def total(self) -> int:
        return self.busy + self.idle + self.steal


def parse_proc_stat(text: str) -> ProcStat:
    """The ``cpu`` line (user nice system idle iowait irq softirq steal ...), the count of ``cpuN``
    lines and ``procs_running`` of ``/proc/stat``'s text."""
    busy = idle = steal = cpus = 0
    running: int | None = None
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "cpu":
            v = [int(x) for x in parts[1:9]] + [0] * (8 - len(parts[1:9]))
            busy, idle, steal = v[0] + v[1] + v[2] + v[5] + v[6], v[3] + v[4], v[7]
        elif parts[0].startswith("cpu") and parts[0][3:].isdigit():
            cpus += 1
        elif parts[0] == "procs_running" and len(parts) > 1:
            running = int(parts[1])
    return ProcStat(busy, idle, steal, max(cpus, 1), running)


def pid_cpu_ticks(stat_text: str) -> tuple[int, int]:
    """(parent pid, utime + stime in ticks) from the text of ``/proc/PID/stat`` (the command name, in
    parentheses, may hold spaces: fields are counted after its closing parenthesis)."""
    rest = stat_text.rsplit(")", 1)[1].split()
    return int(rest[1]), int(rest[11]) + int(rest[12])


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def process_tree(roots: Iterable[int], proc: str = "/proc") -> list[int]:
    """``roots`` and every live descendant of them, from each process's parent in ``/proc``."""
    parent: dict[int, int] = {}
    for entry in os.scandir(proc):
        if entry.name.isdigit() and (text := _read(f"{proc}/{entry.name}/stat")):
            with contextlib.suppress(ValueError, IndexError):
                parent[int(entry.name)] = pid_cpu_ticks(text)[0]
    tree = {r for r in roots if r in parent}
    grew = True
    while grew:
        more = {p for p, pp in parent.items() if pp in tree and p not in tree}
        tree |= more
        grew = bool(more)
    return sorted(tree)


def engine_tree(engine: EngineProcesses | None, proc: str = "/proc") -> list[int]:
    """The engine's processes now: its cgroup's ``cgroup.procs``, else its roots' process trees."""
    if engine is None:
        return []
    if engine.cgroup:
        text = _read(f"{engine.cgroup}/cgroup.procs") or ""
        return sorted({int(x) for x in text.split() if x.isdigit()})
    return process_tree(engine.pids, proc) if engine.pids else []


def _cgroup_cpu_s(folder: str) -> float | None:
    """CPU seconds a cgroup used: v2 ``cpu.stat`` ``usage_usec``, v1 ``cpuacct.usage`` (ns)."""
    text = _read(f"{folder}/cpu.stat")
    for line in (text or "").splitlines():
        if line.startswith("usage_usec "):
            return int(line.split()[1]) / 1e6
    usage = _read(f"{folder}/cpuacct.usage")
    return int(usage) / 1e9 if usage and usage.strip().isdigit() else None


def cgroup_of(pid: int, proc: str = "/proc", root: str = "/sys/fs/cgroup") -> str | None:
    """The cgroup folder whose CPU counter holds ``pid`` (a container's: v2 ``0::/path``, or v1's
    ``cpuacct`` hierarchy), None for the root cgroup (the whole machine) or when none can be read."""
    for line in (_read(f"{proc}/{pid}/cgroup") or "").splitlines():
        _, controllers, path = line.split(":", 2) if line.count(":") >= 2 else ("", "", "")
        if path.strip() in ("", "/"):
            continue
        if controllers == "":
            folders = [f"{root}{path}", f"{root}/unified{path}"]
        elif "cpuacct" in controllers.split(","):
            folders = [f"{root}/{controllers}{path}", f"{root}/cpuacct{path}", f"{root}/cpu,cpuacct{path}"]
        else:
            continue
        for folder in folders:
            if _cgroup_cpu_s(folder) is not None:
                return folder
    return None


def engine_cpu_s(engine: EngineProcesses, pids: Sequence[int], proc: str = "/proc") -> float | None:
    """The engine's CPU seconds so far: its cgroup's, else the sum over ``pids`` (its tree as taken
    at the cell's start; a process gone since counts nothing); None when unknown."""
    if engine.cgroup:
        return _cgroup_cpu_s(engine.cgroup)
    if not pids:
        return None
    ticks = 0
    for pid in pids:
        text = _read(f"{proc}/{pid}/stat")
        with contextlib.suppress(ValueError, IndexError):
            ticks += pid_cpu_ticks(text)[1] if text else 0
    return ticks / CLK_TCK


@dataclass(frozen=True)
class MachineSnapshot:
    """One moment: the machine's ``/proc/stat``, the engine's and the client's CPU seconds."""

    stat: ProcStat
    engine_s: float | None
    client_s: float
    wall: float


def snapshot(engine: EngineProcesses, pids: Sequence[int], proc: str = "/proc") -> MachineSnapshot | None:
    """Now, or None where ``/proc/stat`` cannot be read (not Linux)."""
    text = _read(f"{proc}/stat")
    if text is None:
        return None
    return MachineSnapshot(
        parse_proc_stat(text), engine_cpu_s(engine, pids, proc), time.process_time(), time.perf_counter()
    )


def cpu_window(pairs: Sequence[tuple[MachineSnapshot, MachineSnapshot]]) -> dict[str, Any]:
    """The CPU figures of the windows (before, after), summed (see the module docstring)."""
    cpus = pairs[0][0].stat.cpus
    d_total = sum(b.stat.total - a.stat.total for a, b in pairs)
    d_busy = sum(b.stat.busy - a.stat.busy for a, b in pairs)
    d_steal = sum(b.stat.steal - a.stat.steal for a, b in pairs)
    wall = sum(b.wall - a.wall for a, b in pairs)
    client = sum(b.client_s - a.client_s for a, b in pairs) / wall if wall > 0 else 0.0
    engines = [(a.engine_s, b.engine_s) for a, b in pairs]
    known = all(x is not None and y is not None for x, y in engines)
    engine = sum((y or 0.0) - (x or 0.0) for x, y in engines) / wall if known and wall > 0 else None
    busy = d_busy / d_total * cpus if d_total > 0 else 0.0
    other = max(0.0, busy - (engine or 0.0) - client) if engine is not None else None
    queue = [s.stat.procs_running for pair in pairs for s in pair if s.stat.procs_running is not None]
    return {
        "cpus": cpus,
        "window_s": round(wall, 6),
        "system_busy_cores": round(busy, 4),
        "steal_fraction": round(d_steal / d_total, 4) if d_total > 0 else 0.0,
        "client_cpu_cores": round(client, 4),
        "engine_cpu_cores": None if engine is None else round(engine, 4),
        "other_cpu_cores": None if other is None else round(other, 4),
        "other_cpu_fraction": None if other is None else round(other / cpus, 4),
        "run_queue_max": max(queue) if queue else None,
    }


def _nvml_processes(nv: Any, handle: Any) -> list[tuple[int, float | None]]:
    """(pid, MiB) of every compute and graphics process on one GPU."""
    procs = {}
    for get in (nv.nvmlDeviceGetComputeRunningProcesses, nv.nvmlDeviceGetGraphicsRunningProcesses):
        with contextlib.suppress(nv.NVMLError):
            for p in get(handle):
                used = getattr(p, "usedGpuMemory", None)
                procs[int(p.pid)] = used / 2**20 if isinstance(used, int) else None
    return sorted(procs.items())


def _nvml_sm(nv: Any, handle: Any, since_us: int) -> dict[int, float]:
    """pid -> SM use (%) over the samples NVML kept since ``since_us`` (none: {})."""
    try:
        samples = nv.nvmlDeviceGetProcessUtilization(handle, since_us)
    except nv.NVMLError:
        return {}
    out: dict[int, float] = {}
    for s in samples:
        out[int(s.pid)] = max(out.get(int(s.pid), 0.0), float(s.smUtil))
    return out


def gpu_processes(since_s: float) -> dict[str, Any]:
    """Every process on this machine's GPUs with its memory and SM use since ``since_s`` (wall clock,
    ``time.time()``): ``{"checked": True, "processes": [{gpu, pid, memory_mib, sm_pct}]}``; without
    NVML, ``{"checked": False, "note": why}``."""
    try:
        import pynvml as nv  # nvidia-ml-py's module
    except ImportError:
        return {"checked": False, "note": "nvidia-ml-py not installed: other GPU processes not checked"}
    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        return {
            "checked": False,
            "note": f"NVML unavailable ({type(exc).__name__}): other GPU processes not checked",
        }
    try:
        rows = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            sm = _nvml_sm(nv, h, int(since_s * 1e6))
            for pid, mib in _nvml_processes(nv, h):
                rows.append({"gpu": i, "pid": pid, "memory_mib": mib, "sm_pct": sm.get(pid)})
        return {"checked": True, "processes": rows}
    except nv.NVMLError as exc:
        return {"checked": False, "note": f"NVML failed ({exc}): other GPU processes not checked"}
    finally:
        with contextlib.suppress(nv.NVMLError):
            nv.nvmlShutdown()
