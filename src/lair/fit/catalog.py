"""The hardware catalog: GPUs and unified-memory machines, with a source for every figure.

The data lives in ``catalog.toml`` beside this module (package data). :func:`find_device` matches a
name the way people write it ("RTX PRO 6000", "rtx-pro-6000", "H200", "DGX Spark") and raises
:class:`~lair.errors.FitError` with "did you mean" candidates when it cannot pick one.
:func:`find_device_by_gpu_name` takes only a name a driver tool prints (an entry's ``nvidia_smi``,
``amd_smi`` or ``system_profiler``), whole: what a run report's fingerprint names is matched this
way, never by a part of a name or a guess (:func:`find_device_by_smi_name` is its older name).
"""

from __future__ import annotations

import difflib
import functools
import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from lair.errors import FitError

__all__ = [
    "Device",
    "Source",
    "device_ids",
    "find_device",
    "find_device_by_gpu_name",
    "find_device_by_smi_name",
    "gpu_names",
    "is_amd_smi_name",
    "load_catalog",
    "pcie_gbs",
]

GIB = 1 << 30
_VENDOR_WORDS = ("nvidia", "geforce", "amd", "instinct", "apple")
_TOOLS = ("nvidia_smi", "amd_smi", "system_profiler")
"""The catalog fields of the names each driver tool prints, in the order they are matched."""


@dataclass(frozen=True)
class Source:
    """Where some of a device's figures come from."""

    title: str
    url: str
    figures: tuple[str, ...]
    names: tuple[str, ...] = ()
    """The driver-tool names (``amd_smi``, ``system_profiler``) this source shows a tool printing."""


@dataclass(frozen=True)
class Device:
    """One GPU or unified-memory machine. Throughputs are dense peaks; ``None`` = not published."""

    id: str
    name: str
    kind: str  # "gpu" (own memory) or "unified" (memory shared with the CPU)
    memory_gb: float
    memory_bandwidth_gbs: float
    bf16_tflops: float | None = None
    fp8_tflops: float | None = None
    fp4_tflops: float | None = None
    pcie: str | None = None
    nvlink_gbs: float | None = None
    network_gbps: float | None = None
    tdp_w: float | None = None
    """The vendor's maximum board power (TDP / TGP) in watts: no reading of one device is above it."""
    idle_w: float | None = None
    """A floor under the watts the device draws while powered up (lair's own: vendors publish none)."""
    aliases: tuple[str, ...] = ()
    nvidia_smi: tuple[str, ...] = ()
    """The names ``nvidia-smi --query-gpu=name`` prints for this card (a fingerprint's spelling)."""
    amd_smi: tuple[str, ...] = ()
    """The names ``amd-smi static --asic`` prints as ``MARKET_NAME`` for this card."""
    system_profiler: tuple[str, ...] = ()
    """The names ``system_profiler SPDisplaysDataType`` prints as ``Chipset Model``."""
    notes: str = ""
    sources: tuple[Source, ...] = field(default=())

    @property
    def memory_bytes(self) -> int:
        """Device memory in bytes (the vendor's GB read as GiB)."""
        return int(self.memory_gb * GIB)

    @property
    def bandwidth_bytes_s(self) -> float:
        return self.memory_bandwidth_gbs * 1e9

    def peak_flops(self, fmt: str) -> float | None:
        """Dense peak FLOP/s for a math format ("bf16", "fp8", "fp4"), falling back to wider formats."""
        order = {"fp4": ("fp4", "fp8", "bf16"), "fp8": ("fp8", "bf16"), "bf16": ("bf16",)}[fmt]
        for f in order:
            v = getattr(self, f"{f}_tflops")
            if v:
                return float(v) * 1e12
        return None

    def link_bytes_s(self) -> float | None:
        """GPU-to-GPU bandwidth per direction: NVLink-class if present, else PCIe, else network."""
        if self.nvlink_gbs:
            return self.nvlink_gbs * 1e9 / 2
        if self.pcie:
            return pcie_gbs(self.pcie) * 1e9
        if self.network_gbps:
            return self.network_gbps * 1e9 / 8
        return None


def pcie_gbs(spec: str) -> float:
    """GB/s per direction of a PCIe link written "GEN xLANES" (e.g. "5.0 x16" -> 63.0)."""
    m = re.fullmatch(r"\s*(\d\.\d)\s*x(\d+)\s*", spec)
    rates = _raw()["pcie_gbs_per_lane"]
    if not m or m.group(1) not in rates:
        raise FitError(f"cannot read PCIe link {spec!r}", hint='write it as "GEN xLANES", e.g. "4.0 x16"')
    return float(rates[m.group(1)]) * int(m.group(2))


@functools.cache
def _raw() -> dict[str, Any]:
    text = resources.files("lair.fit").joinpath("catalog.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def _device(d: dict[str, Any]) -> Device:
    d = dict(d)
    srcs = tuple(
        Source(s["title"], s["url"], tuple(s.get("figures", ())), tuple(s.get("names", ())))
        for s in d.pop("sources", [])
    )
    names = {k: tuple(d.get(k, ())) for k in ("aliases", *_TOOLS)}
    return Device(**{**d, **names, "sources": srcs})


@functools.cache
def load_catalog() -> tuple[Device, ...]:
    """Every device in the packaged catalog."""
    return tuple(_device(d) for d in _raw()["device"])


def device_ids() -> list[str]:
    return [d.id for d in load_catalog()]


def _norm(name: str) -> str:
    s = name.lower()
    for w in _VENDOR_WORDS:
        s = s.replace(w, "")
    return re.sub(r"[^a-z0-9]", "", s)


def _keys(d: Device) -> list[str]:
    return [_norm(k) for k in (d.id, d.name, *d.aliases, *gpu_names(d))]


def _smi(name: str) -> str:
    return " ".join(name.split()).casefold()


def gpu_names(d: Device) -> tuple[str, ...]:
    """Every name a driver tool prints for ``d``: nvidia-smi's, amd-smi's, system_profiler's."""
    return tuple(n for tool in _TOOLS for n in getattr(d, tool))


def find_device_by_gpu_name(name: str) -> Device | None:
    """The catalog device a driver tool (nvidia-smi, amd-smi, system_profiler) calls ``name``
    (whole, ignoring case and runs of spaces), else None: no partial match, no vendor words
    dropped, no guess."""
    q = _smi(name)
    return next((d for d in load_catalog() if q in {_smi(n) for n in gpu_names(d)}), None)


def is_amd_smi_name(name: str) -> bool:
    """Whether amd-smi prints ``name`` for a catalog device (whole, as :func:`find_device_by_gpu_name`)."""
    q = _smi(name)
    return any(q in {_smi(n) for n in d.amd_smi} for d in load_catalog())


find_device_by_smi_name = find_device_by_gpu_name
"""The older name of :func:`find_device_by_gpu_name` (from when only nvidia-smi names were read)."""


def find_device(name: str) -> Device:
    """The catalog device called ``name``: its id, name or an alias, ignoring case, spaces, dashes and
    vendor words; else the one device whose names contain it."""
    q = _norm(name)
    devices = load_catalog()
    exact = [d for d in devices if q and q in _keys(d)]
    if exact:
        return exact[0]
    partial = [d for d in devices if q and any(q in k for k in _keys(d))]
    if len(partial) == 1:
        return partial[0]
    names = [d.name for d in partial] or _close(name, devices)
    raise FitError(
        f"{'ambiguous' if partial else 'unknown'} GPU {name!r}"
        + (f"; did you mean {', '.join(repr(n) for n in names)}?" if names else ""),
        hint="`lair fit --list-gpus` lists the catalog",
    )


def _close(name: str, devices: tuple[Device, ...]) -> list[str]:
    by_key = {k: d.name for d in devices for k in _keys(d)}
    hits = difflib.get_close_matches(_norm(name), list(by_key), n=3, cutoff=0.5)
    return list(dict.fromkeys(by_key[h] for h in hits))
