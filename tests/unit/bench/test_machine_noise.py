"""The machine certificate's arithmetic against hand computations: ``/proc/stat`` and
``/proc/PID/stat`` text, process trees and cgroups in folders laid out as the kernel does, the noisy
verdict at each limit, and replication's inconclusive outcome."""

from __future__ import annotations

from pathlib import Path

import pytest

from lair.bench import definitions as d
from lair.bench.machine import (
    EngineProcesses,
    MachineSnapshot,
    cgroup_of,
    cpu_window,
    engine_cpu_s,
    parse_proc_stat,
    pid_cpu_ticks,
    process_tree,
)
from lair.replication import INCONCLUSIVE, NOT_REPRODUCED, REPLICATED, compare, verdict

BEFORE = """\
cpu  1000 50 300 5000 100 20 30 10 0 0
cpu0 500 25 150 2500 50 10 15 5 0 0
cpu1 500 25 150 2500 50 10 15 5 0 0
intr 12345 0 0
ctxt 999
procs_running 3
procs_blocked 0
"""
AFTER = """\
cpu  1400 50 500 5300 120 30 40 70 0 0
cpu0 700 25 250 2650 60 15 20 35 0 0
cpu1 700 25 250 2650 60 15 20 35 0 0
procs_running 5
"""


def test_proc_stat_fields_by_hand() -> None:
    s = parse_proc_stat(BEFORE)
    # busy = user 1000 + nice 50 + system 300 + irq 20 + softirq 30; idle = 5000 + iowait 100
    assert (s.busy, s.idle, s.steal, s.cpus, s.procs_running) == (1400, 5100, 10, 2, 3)
    assert s.total == 1400 + 5100 + 10


def _snap(text: str, engine_s: float | None, client_s: float, wall: float) -> MachineSnapshot:
    return MachineSnapshot(parse_proc_stat(text), engine_s, client_s, wall)


def test_cpu_window_by_hand() -> None:
    # d(busy) = 2020 - 1400 = 620, d(idle) = 5420 - 5100 = 320, d(steal) = 70 - 10 = 60: 1000 ticks
    # busy cores = 620 / 1000 x 2 = 1.24; engine 1.0 s / 2 s = 0.5; client 0.5 s / 2 s = 0.25
    # other = 1.24 - 0.5 - 0.25 = 0.49 cores = 24.5% of 2
    w = cpu_window([(_snap(BEFORE, 3.0, 1.0, 10.0), _snap(AFTER, 4.0, 1.5, 12.0))])
    assert w == {
        "cpus": 2,
        "window_s": 2.0,
        "system_busy_cores": 1.24,
        "steal_fraction": 0.06,
        "client_cpu_cores": 0.25,
        "engine_cpu_cores": 0.5,
        "other_cpu_cores": 0.49,
        "other_cpu_fraction": 0.245,
        "run_queue_max": 5,
    }
    # 24.5% is under the 25% limit; 6% steal is over its 5%
    assert d.noise_reasons(w, {}) == ["CPU steal 6.0% (limit 5%)"]


def test_other_cpu_past_the_limit_and_an_unknown_engine() -> None:
    # the engine used 0.9 s: 0.45 cores, other = 1.24 - 0.45 - 0.25 = 0.54 cores = 27% of 2
    w = cpu_window([(_snap(BEFORE, 3.0, 1.0, 10.0), _snap(AFTER, 3.9, 1.5, 12.0))])
    assert w["other_cpu_cores"] == 0.54 and w["other_cpu_fraction"] == 0.27
    assert d.noise_reasons(w, {})[0] == "other processes used 0.54 of 2 cores (27%, limit 25%)"
    unknown = cpu_window([(_snap(BEFORE, None, 1.0, 10.0), _snap(AFTER, None, 1.5, 12.0))])
    assert unknown["engine_cpu_cores"] is None and unknown["other_cpu_cores"] is None
    assert d.noise_reasons(unknown, {}) == ["CPU steal 6.0% (limit 5%)"]  # no CPU verdict without it


def test_two_windows_are_summed_before_dividing() -> None:
    # the same 1000-tick window twice, of 2 s each: the figures of one window
    a, b = _snap(BEFORE, 3.0, 1.0, 10.0), _snap(AFTER, 4.0, 1.5, 12.0)
    one, two = cpu_window([(a, b)]), cpu_window([(a, b), (a, b)])
    assert {k: v for k, v in two.items() if k != "window_s"} == {
        k: v for k, v in one.items() if k != "window_s"
    }
    assert two["window_s"] == 4.0


def test_pid_stat_with_parentheses_in_the_name() -> None:
    text = "1234 (my (odd) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 1 0 5000\n"
    assert pid_cpu_ticks(text) == (1, 325)  # parent 1; utime 250 + stime 75


def _proc(root: Path, pid: int, ppid: int, utime: int, stime: int) -> None:
    (root / str(pid)).mkdir(parents=True)
    fields = f"S {ppid} {pid} {pid} 0 -1 0 0 0 0 0 {utime} {stime} 0 0 20 0 1 0 100"
    (root / str(pid) / "stat").write_text(f"{pid} (engine) {fields}\n")


def test_process_tree_and_its_cpu(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    for pid, ppid, u, s in (
        (1, 0, 0, 0),
        (10, 1, 100, 20),
        (11, 10, 30, 10),
        (12, 11, 5, 5),
        (20, 1, 999, 1),
    ):
        _proc(proc, pid, ppid, u, s)
    (proc / "stat").write_text(BEFORE)
    tree = process_tree([10], str(proc))
    assert tree == [10, 11, 12]  # 20 is a sibling, not a descendant
    # (100 + 20) + (30 + 10) + (5 + 5) = 170 ticks at 100 per second
    assert engine_cpu_s(EngineProcesses(pids=[10]), tree, str(proc)) == pytest.approx(170 / 100)
    assert engine_cpu_s(EngineProcesses(), [], str(proc)) is None


def test_a_containers_cgroup_v2_and_v1(tmp_path: Path) -> None:
    proc, root = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "77").mkdir(parents=True)
    (proc / "77" / "cgroup").write_text("0::/system.slice/docker-abc.scope\n")
    v2 = root / "system.slice" / "docker-abc.scope"
    v2.mkdir(parents=True)
    (v2 / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n")
    assert cgroup_of(77, str(proc), str(root)) == str(v2)
    assert engine_cpu_s(EngineProcesses(pids=[77], cgroup=str(v2)), []) == 2.5
    (proc / "78").mkdir()
    (proc / "78" / "cgroup").write_text("5:memory:/docker/def\n4:cpu,cpuacct:/docker/def\n")
    v1 = root / "cpu,cpuacct" / "docker" / "def"
    v1.mkdir(parents=True)
    (v1 / "cpuacct.usage").write_text("1500000000\n")  # nanoseconds
    assert cgroup_of(78, str(proc), str(root)) == str(v1)
    assert engine_cpu_s(EngineProcesses(cgroup=str(v1)), []) == 1.5
    (proc / "79").mkdir()
    (proc / "79" / "cgroup").write_text("0::/\n")  # the root cgroup is the whole machine: never the engine's
    assert cgroup_of(79, str(proc), str(root)) is None


def test_repeat_spread_at_the_limit() -> None:
    stats = {
        "prefill_tok_s": {"p50": 150.0, "p90": 240.0, "min": 100.0, "max": 250.0, "n": 3},
        "decode_tok_s_aggregate": {"p50": 40.0, "p90": 55.0, "min": 30.0, "max": 60.0, "n": 3},
        "ttft_ms": {"p50": 1.0, "p90": 9.0, "min": 1.0, "max": 9.0, "n": 3},  # per request: not a repeat
    }
    spread = d.repeat_spread(stats)
    assert spread == {"prefill_tok_s": 2.5, "decode_tok_s_aggregate": 2.0}
    # 2.5 > 2.0 is noisy; 2.0 itself is not (the limit is "above")
    assert d.noise_reasons({}, spread) == ["prefill_tok_s repeats spread 2.50x max/min (limit 2x)"]
    one = {"prefill_tok_s": {"p50": 1.0, "p90": 1.0, "min": 1.0, "max": 1.0, "n": 1}}
    assert d.repeat_spread(one) == {}


def test_other_gpu_processes() -> None:
    gpu = {
        "checked": True,
        "processes": [
            {"gpu": 0, "pid": 5, "memory_mib": 900.0, "sm_pct": 50.0},
            {"gpu": 0, "pid": 9, "memory_mib": 100.0, "sm_pct": 3.0},  # idle: under 5%
            {"gpu": 1, "pid": 6, "memory_mib": 100.0, "sm_pct": 40.0},
        ],
    }
    assert d.noise_reasons({}, {}, gpu, {5, 6}) == []
    assert d.noise_reasons({}, {}, gpu, {6}) == ["process 5 used 50% of GPU 0's SMs (limit 5%)"]
    assert d.noise_reasons({}, {}, gpu, None) == []  # unknown engine: one busy process per GPU is it
    gpu["processes"][1]["sm_pct"] = 30.0
    assert d.noise_reasons({}, {}, gpu, None) == [
        "process 5 used 50% of GPU 0's SMs (limit 5%)",
        "process 9 used 30% of GPU 0's SMs (limit 5%)",
    ]
    assert d.noise_reasons({}, {}, {"checked": False, "note": "no NVML"}, None) == []


ROW = {"decode_tok_s": 100.0}
ROW_STATS = {"decode_tok_s_aggregate": {"min": 95.0, "max": 105.0, "n": 3}}


def _yours(value: float, lo: float, hi: float) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    return {"decode_tok_s_aggregate": value}, {"decode_tok_s_aggregate": {"min": lo, "max": hi, "n": 3}}


def test_a_run_spreading_wider_than_the_band_is_inconclusive() -> None:
    # the band: 95 x 0.95 = 90.25 .. 105 x 1.05 = 110.25, high / low = 1.2216
    cell, stats = _yours(100.0, 80.0, 100.0)  # 100 / 80 = 1.25 > 1.2216
    (c,) = compare(ROW, ROW_STATS, cell, stats)
    assert c.band.ratio == pytest.approx(110.25 / 90.25)
    assert c.spread == 1.25 and not c.conclusive and c.inside
    assert verdict([c]) == INCONCLUSIVE  # inside the band, but by its own noise alone it could be outside
    cell, stats = _yours(100.0, 90.0, 105.0)  # 105 / 90 = 1.1667: narrower than the band
    assert verdict(compare(ROW, ROW_STATS, cell, stats)) == REPLICATED
    cell, stats = _yours(50.0, 48.0, 52.0)  # far outside, and its own spread is narrow
    assert verdict(compare(ROW, ROW_STATS, cell, stats)) == NOT_REPRODUCED
    cell, stats = _yours(50.0, 40.0, 60.0)  # far outside, but its repeats spread 1.5x: no verdict
    assert verdict(compare(ROW, ROW_STATS, cell, stats)) == INCONCLUSIVE
    assert (
        verdict(compare(ROW, ROW_STATS, {"decode_tok_s_aggregate": 50.0})) == NOT_REPRODUCED
    )  # spread unknown
