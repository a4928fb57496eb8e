"""A fake ``nvidia-smi`` for tests of GPU telemetry on machines without an NVIDIA driver: one H200
drawing 650 W at 84 C with its clocks held down by the power cap and by heat (clock-event reasons
0x24: ``sw_power_cap`` + ``sw_thermal_slowdown``). It answers the queries lair makes: the
fingerprint's (name, driver, memory), the bare banner (CUDA version), a one-shot ``--query-gpu`` and
the sampler's ``-lms`` loop (a line every 20 ms, for at most 8 s)."""

from __future__ import annotations

import stat
from pathlib import Path

__all__ = ["FAKE_SMI", "fake_smi"]

FAKE_SMI = """#!/bin/sh
# a fake nvidia-smi: one H200 drawing 650 W at 84 C, clocks held down by the power cap and heat
case "$*" in
  *-lms*) i=0; while [ $i -lt 400 ]; do
      echo "0, 650.5, 1755, 3201, 84, 20000, 0x0000000000000024"; sleep 0.02; i=$((i+1))
    done;;
  *name,driver_version*) echo "NVIDIA H200, 580.159.04, 143771 MiB";;
  *--query-gpu*) echo "0, 80.0, 1980, 3201, 40, 0, 0x0000000000000001";;
  "") echo "| NVIDIA-SMI 580.159.04      Driver Version: 580.159.04     CUDA Version: 13.0     |";;
esac
"""


def fake_smi(folder: Path) -> Path:
    """A folder holding a fake ``nvidia-smi`` (:data:`FAKE_SMI`), to put first on PATH."""
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "nvidia-smi"
    exe.write_text(FAKE_SMI)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return folder
