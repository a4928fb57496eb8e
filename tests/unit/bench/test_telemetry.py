"""GPU telemetry: energy of a window from a recorded sample series (the energy counter's delta, and
the trapezoid rule over power), joules per token and $/Mtok against hand computations, and the
nvidia-smi backend reading a fake ``nvidia-smi`` that reports throttling."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from lair.bench.certificate import energy_figures
from lair.bench.telemetry import (
    GpuSample,
    SmiSampler,
    cost_per_mtok,
    open_sampler,
    parse_smi_line,
    summarize_window,
    window_energy,
)
from lair.testing.gpu import fake_smi

# One GPU sampled at t = 10.0, 10.5, 11.0, 11.5, 12.0 s: power 100, 300, 300, 200, 100 W; the
# board's energy counter (mJ) at 5,000,000 then +100 J, +150 J, +125 J, +75 J (what those watts give).
TIMES = [10.0, 10.5, 11.0, 11.5, 12.0]
WATTS = [100.0, 300.0, 300.0, 200.0, 100.0]
COUNTER_MJ = [5_000_000.0, 5_100_000.0, 5_250_000.0, 5_375_000.0, 5_450_000.0]


def _series(counter: bool) -> list[GpuSample]:
    return [
        GpuSample(t_s=t, gpu=0, power_w=w, energy_mj=e if counter else None)
        for t, w, e in zip(TIMES, WATTS, COUNTER_MJ, strict=True)
    ]


def test_energy_from_the_counter_delta_interpolated_at_the_window_edges() -> None:
    # [10.25, 11.75]: the counter at 10.25 is halfway 5,000,000..5,100,000 = 5,050,000 mJ; at 11.75
    # halfway 5,375,000..5,450,000 = 5,412,500 mJ; delta 362,500 mJ = 362.5 J
    energy, how = window_energy(_series(counter=True), 10.25, 11.75)
    assert how == "counter"
    assert energy == pytest.approx(362.5)


def test_energy_by_the_trapezoid_rule_without_a_counter() -> None:
    # power at 10.25 = 200 W (interpolated), then 300 @10.5, 300 @11.0, 200 @11.5, 150 @11.75:
    # 0.25*(200+300)/2 + 0.5*(300+300)/2 + 0.5*(300+200)/2 + 0.25*(200+150)/2
    # = 62.5 + 150 + 125 + 43.75 = 381.25 J
    energy, how = window_energy(_series(counter=False), 10.25, 11.75)
    assert how == "power-integral"
    assert energy == pytest.approx(381.25)


def test_two_gpus_add_up_and_a_window_without_samples_has_no_energy() -> None:
    two = _series(counter=False) + [GpuSample(t_s=t, gpu=1, power_w=50.0) for t in TIMES]
    energy, _ = window_energy(two, 10.0, 12.0)
    # GPU 0 over [10, 12]: 100 + 150 + 125 + 75 = 450 J; GPU 1: 50 W x 2 s = 100 J
    assert energy == pytest.approx(550.0)
    assert window_energy([], 10.0, 12.0) == (None, None)


def test_joules_per_token_tokens_per_kwh_and_watts_of_a_cell() -> None:
    summary = summarize_window(_series(counter=True), 10.0, 12.0)
    assert summary["energy_j"] == pytest.approx(450.0) and summary["energy_source"] == "counter"
    assert summary["avg_w"] == pytest.approx(225.0) and summary["peak_w"] == 300.0
    e = energy_figures(summary["energy_j"], 2.0, 300, 1500, peak_w=summary["peak_w"], source="counter")
    assert e is not None
    assert e["j_per_output_token"] == pytest.approx(1.5)  # 450 J / 300 tokens
    assert e["j_per_prompt_token"] == pytest.approx(0.3)  # 450 J / 1500 tokens
    assert e["output_tokens_per_kwh"] == pytest.approx(300 / (450 / 3.6e6))  # = 2,400,000
    assert e["output_tokens_per_kwh"] == pytest.approx(2_400_000)
    assert e["avg_w"] == pytest.approx(225.0) and e["output_tok_s"] == pytest.approx(150.0)
    assert e["usd_per_mtok"] is None  # no price given


def test_dollars_per_million_tokens_by_hand() -> None:
    # 1.5 J/token -> 1.5e6 J per Mtok = 0.41667 kWh x $0.31 = $0.129167
    # $7200 over 3 years = 7200 / (3 x 365.25 x 86400 = 94,672,800 s) = $7.60514e-5 a second; at
    # 150 tok/s a Mtok takes 6,666.67 s -> $0.507009; together $0.636176
    cost = cost_per_mtok(1.5, 150.0, power_price_kwh=0.31, hardware_cost=7200, hardware_life_years=3)
    assert cost["energy"] == pytest.approx(0.129167, rel=1e-5)
    assert cost["hardware"] == pytest.approx(0.507009, rel=1e-5)
    assert cost["total"] == pytest.approx(0.636176, rel=1e-5)
    only_power = cost_per_mtok(1.5, 150.0, power_price_kwh=0.31)
    assert only_power == {
        "energy": pytest.approx(0.129167, rel=1e-5),
        "hardware": None,
        "total": pytest.approx(0.129167, rel=1e-5),
    }
    e = energy_figures(
        450.0,
        2.0,
        300,
        1500,
        pricing={"power_price_kwh": 0.31, "hardware_cost": 7200, "hardware_life_years": 3},
    )
    assert e is not None and e["usd_per_mtok"]["total"] == pytest.approx(0.636176, rel=1e-5)


def test_an_nvidia_smi_line_and_its_throttle_reasons() -> None:
    s = parse_smi_line("0, 650.50, 1755, 3201, 84, 20000, 0x0000000000000024", 1.0)
    assert s == GpuSample(1.0, 0, 650.5, None, 1755.0, 3201.0, 84.0, 20000.0, 0x24)
    assert parse_smi_line("0, [N/A], 1755, 3201, 84, 20000, 0x0", 1.0).power_w is None  # type: ignore[union-attr]
    assert parse_smi_line("index, power.draw", 1.0) is None


def test_the_nvidia_smi_backend_reads_a_fake_nvidia_smi_and_sees_the_throttling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{fake_smi(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}")
    sampler = open_sampler("nvidia-smi", 0.02)
    assert isinstance(sampler, SmiSampler)
    assert sampler.info() == {"driver": "580.159.04", "cuda": "13.0", "nvml": None, "gpus": ["NVIDIA H200"]}
    sampler.start()
    deadline = time.monotonic() + 20
    while len(sampler.samples()) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)  # polls the reader thread, bounded by the deadline
    sampler.stop()
    samples = sampler.samples()
    assert len(samples) >= 5
    w = summarize_window(samples, samples[0].t_s, samples[-1].t_s)
    assert w["throttle_reasons"] == ["sw_power_cap", "sw_thermal_slowdown"]
    assert w["thermal_throttled"] and w["power_throttled"]
    assert w["energy_source"] == "power-integral"
    assert w["energy_j"] == pytest.approx(650.5 * (samples[-1].t_s - samples[0].t_s))
    assert w["temp_c_max"] == 84.0 and w["sm_clock_mhz"] == {"min": 1755.0, "max": 1755.0}


def test_no_gpu_telemetry_is_said_plainly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi; NVML has no driver library here
    sampler = open_sampler("auto")
    assert sampler.backend == "none"
    assert sampler.why_none.startswith("no GPU telemetry: nvml: ")
    assert "nvidia-smi: nvidia-smi is not on PATH" in sampler.why_none
    assert open_sampler("none").why_none == "telemetry turned off (--telemetry none)"
