"""The fingerprint's GPUs, read from fake driver tools first on PATH: amd-smi's JSON in both shapes
it prints (a list up to ROCm 6.4, ``{"gpu_data": [...]}`` from ROCm 7), copied from real outputs,
into the shape nvidia-smi's reading has; a missing tool or output it cannot read gives None."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from lair.fit import find_device_by_gpu_name
from lair.report.fingerprint import MAX_TOOL_OUTPUT, fingerprint
from lair.report.render import _fingerprint_lines

# `amd-smi static` on an 8x MI300X host, from AMD's ROCm blog "Getting to Know Your GPU: A Deep Dive
# into AMD SMI" (Sep 2024, ROCm 6.2; github.com/ROCm/rocm-blogs,
# blogs/software-tools-optimization/amd-smi-overview/README.md): GPU 0's ASIC block as the blog prints
# it, in the keys amd-smi's --json writes (amdsmi_cli/amdsmi_commands.py's asic_dict), and the VRAM
# block as the blog's `amd-smi static --json | jq '.[0]["vram"]'` prints it; GPU 1 is the host's
# second MI300X (the blog lists eight) with the fields this reading uses.
VRAM = {"type": "HBM", "vendor": "N/A", "size": {"value": 196592, "unit": "MB"}}
MI300X_ROCM6 = [
    {
        "gpu": 0,
        "asic": {
            "market_name": "MI300X-O", "vendor_id": "0x1002",
            "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]", "subvendor_id": "0x1002",
            "device_id": "0x74a1", "rev_id": "0x00", "asic_serial": "0xAF54E92B0A5D57C8", "oam_id": 7,
        },
        "vram": VRAM,
    },
    {"gpu": 1, "asic": {"market_name": "MI300X-O", "device_id": "0x74a1"}, "vram": VRAM},
]  # fmt: skip
# `amd-smi version` as ROCm/k8s-device-plugin issue #157 shows it printed ("AMDSMI Tool: 25.3.0+ede62f2 |
# AMDSMI Library version: 25.3.0 | ROCm version: 6.4.0"), in the keys its --json writes (a list of one).
VERSION = [
    {
        "tool": "AMDSMI Tool",
        "version": "25.3.0+ede62f2",
        "amdsmi_library_version": "25.3.0",
        "rocm_version": "6.4.0",
    }
]
# `amd-smi static --bus --ifwi --asic --board --vbios --driver --vram --ras -g 0 1` on an MI350X, from
# ROCm/rocm-systems PR #2987 (ROCm 7: the {"gpu_data": [...]} document): GPU 0's ASIC and DRIVER
# blocks, in the keys --json writes (the excerpt shows no VRAM block, so none is here).
MI350X_ROCM7 = {
    "gpu_data": [
        {
            "gpu": 0,
            "asic": {
                "market_name": "AMD Instinct MI350X", "vendor_id": "0x1002",
                "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]", "subvendor_id": "0x1002",
                "device_id": "0x75a0", "subsystem_id": "0x75a0", "rev_id": "0x00",
                "asic_serial": "<redacted>", "oam_id": 6, "num_compute_units": 128,
                "target_graphics_version": "gfx950", "flags": 16,
            },
            "driver": {"name": "amdgpu", "version": "6.18.3", "os_kernel_version": "5.15.0-164-generic"},
        }
    ]
}  # fmt: skip
# amd-smi under Python 3.14 prints warnings before its JSON (nathaninline/ajean issue #39)
WARNING = (
    "/usr/lib/python3.14/site-packages/amdsmi/amdsmi_interface.py:3569: SyntaxWarning: 'return' in a"
    " 'finally' block\n  return return_dictionary\n"
)


def _tool(bin_dir: Path, name: str, outputs: dict[str, str]) -> None:
    """A fake ``name`` in ``bin_dir``: prints ``outputs`` of its first argument; exits 1 for others."""
    exe = bin_dir / name
    exe.write_text(
        f"#!{sys.executable}\nimport sys\nout = {outputs!r}\n"
        "arg = sys.argv[1] if len(sys.argv) > 1 else ''\n"
        "sys.exit(1) if arg not in out else sys.stdout.write(out[arg])\n"
    )
    exe.chmod(0o755)


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty folder that is the whole PATH: no real nvidia-smi or amd-smi is found."""
    d = tmp_path / "bin"
    d.mkdir()
    monkeypatch.setenv("PATH", str(d))
    return d


def _gpus(where: Path) -> Any:
    return fingerprint(where)["gpus"]


def test_amd_smi_s_list_of_gpus_rocm_6(bin_dir: Path) -> None:
    _tool(bin_dir, "amd-smi", {"static": json.dumps(MI300X_ROCM6, indent=4), "version": json.dumps(VERSION)})
    gpus = _gpus(bin_dir)
    assert gpus == {
        "vendor": "amd", "count": 2, "models": ["MI300X-O"], "driver": None,
        "memory": ["196592 MB", "196592 MB"], "cuda": None, "rocm": "6.4.0",
    }  # fmt: skip
    assert find_device_by_gpu_name(gpus["models"][0]).id == "mi300x"  # type: ignore[union-attr]
    assert _fingerprint_lines({"gpus": gpus})[0] == "- GPU: 2 x MI300X-O (driver None, ROCm 6.4.0)"


def test_amd_smi_s_gpu_data_document_rocm_7_after_a_warning(bin_dir: Path) -> None:
    _tool(bin_dir, "amd-smi", {"static": WARNING + json.dumps(MI350X_ROCM7, indent=4), "version": "N/A\n"})
    gpus = _gpus(bin_dir)
    assert gpus == {
        "vendor": "amd", "count": 1, "models": ["AMD Instinct MI350X"], "driver": "6.18.3",
        "memory": [], "cuda": None, "rocm": None,
    }  # fmt: skip
    assert find_device_by_gpu_name(gpus["models"][0]).id == "mi355x"  # type: ignore[union-attr]


def test_nvidia_smi_comes_first(bin_dir: Path) -> None:
    """nvidia-smi as it prints on an H20 (deepseek-ai/DeepGEMM issue #268), and amd-smi beside it."""
    _tool(bin_dir, "amd-smi", {"static": json.dumps(MI300X_ROCM6)})
    header = "| NVIDIA-SMI 550.54.14   Driver Version: 550.54.14   CUDA Version: 12.6 |\n"
    csv = "NVIDIA H20, 550.54.14, 97871 MiB\n"
    _tool(bin_dir, "nvidia-smi", {"": header, "--query-gpu=name,driver_version,memory.total": csv})
    assert _gpus(bin_dir) == {
        "vendor": "nvidia", "count": 1, "models": ["NVIDIA H20"], "driver": "550.54.14",
        "memory": ["97871 MiB"], "cuda": "12.6",
    }  # fmt: skip


@pytest.mark.parametrize(
    "static",
    [
        None,  # amd-smi fails (exit 1)
        "GPU: 0\n    ASIC:\n        MARKET_NAME: MI300X-O\n",  # its human-readable form, not JSON
        '{"gpu_data": []}',  # no GPU
        "[1, 2, 3]",  # no GPU objects
        json.dumps(MI300X_ROCM6) + " " * MAX_TOOL_OUTPUT,  # past the output budget
    ],
)
def test_what_amd_smi_cannot_say_gives_none(bin_dir: Path, static: str | None) -> None:
    _tool(bin_dir, "amd-smi", {"static": static} if static is not None else {})
    assert _gpus(bin_dir) is None


def test_no_tool_gives_none(bin_dir: Path) -> None:
    assert _gpus(bin_dir) is None
