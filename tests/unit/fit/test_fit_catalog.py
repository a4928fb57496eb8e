"""The hardware catalog: every figure sourced, names matched the way people write them."""

from __future__ import annotations

import dataclasses

import pytest

from lair.errors import FitError
from lair.fit import find_device, load_catalog
from lair.fit.catalog import find_device_by_gpu_name, find_device_by_smi_name, gpu_names, pcie_gbs

FIGURES = (
    "memory_gb",
    "memory_bandwidth_gbs",
    "bf16_tflops",
    "fp8_tflops",
    "fp4_tflops",
    "pcie",
    "nvlink_gbs",
    "network_gbps",
    "tdp_w",
    "idle_w",
)
REQUIRED = (
    "RTX PRO 6000",
    "RTX 5090",
    "RTX 4090",
    "RTX 3090",
    "L40S",
    "A100 40GB",
    "A100 80GB",
    "H100",
    "H200",
    "B200",
    "GB10",
    "DGX Spark",
    "MI300X",
    "M3 Ultra",
    "M4 Max",
)


def test_every_figure_has_a_source() -> None:
    for d in load_catalog():
        named = {f for s in d.sources for f in s.figures}
        given = {f for f in FIGURES if getattr(d, f) is not None}
        assert given <= named, f"{d.id}: no source for {sorted(given - named)}"
        assert all(s.url.startswith("https://") and s.title for s in d.sources)


def test_the_issue_s_devices_are_there() -> None:
    for name in REQUIRED:
        d = find_device(name)
        assert d.memory_gb > 0 and d.memory_bandwidth_gbs > 0


@pytest.mark.parametrize(
    ("query", "device_id"),
    [
        ("RTX PRO 6000", "rtx-pro-6000"),
        ("rtx-pro-6000", "rtx-pro-6000"),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "rtx-pro-6000"),
        ("H200", "h200"),
        ("nvidia h200", "h200"),
        ("GeForce RTX 4090", "rtx-4090"),
        ("dgx spark", "dgx-spark"),
        ("MI300X", "mi300x"),
        ("H20", "h20"),
    ],
)
def test_fuzzy_names(query: str, device_id: str) -> None:
    assert find_device(query).id == device_id


def test_ambiguous_and_unknown_names_say_what_they_could_be() -> None:
    with pytest.raises(FitError, match=r"ambiguous GPU 'A100'; did you mean .*40GB.*80GB"):
        find_device("A100")
    with pytest.raises(FitError, match=r"unknown GPU 'H2OO'.*did you mean"):
        find_device("H2OO")


def test_links_and_peaks() -> None:
    assert pcie_gbs("4.0 x16") == pytest.approx(1.969 * 16)
    with pytest.raises(FitError):
        pcie_gbs("fast")
    h200, pro, spark = find_device("H200"), find_device("RTX PRO 6000"), find_device("DGX Spark")
    assert h200.link_bytes_s() == 450e9  # NVLink 900 GB/s both ways
    assert pro.link_bytes_s() == pytest.approx(3.938 * 16 * 1e9)  # PCIe 5.0 x16, one way
    assert spark.link_bytes_s() == 25e9  # 200 Gb/s ConnectX-7
    assert spark.kind == "unified"
    assert spark.peak_flops("bf16") is None and spark.peak_flops("fp4") == 500e12
    assert h200.peak_flops("fp4") == 1979e12  # no FP4 on Hopper: FP8 is the fastest it has
    assert dataclasses.replace(h200, memory_gb=1).memory_bytes == 2**30


def test_every_gpu_a_fingerprint_can_name_has_a_power_ceiling_and_floor() -> None:
    """The registry holds a verified row's watts between them (the vendors' spec sheets: H100 SXM
    700 W, H100 PCIe 350 W, H200 700 W, B200 1,000 W, RTX 4090 450 W, RTX PRO 6000 600 W)."""
    tdp = {d.id: d.tdp_w for d in load_catalog()}
    assert (tdp["h100-sxm"], tdp["h100-pcie"], tdp["h200"], tdp["b200"]) == (700, 350, 700, 1000)
    assert (tdp["rtx-4090"], tdp["rtx-pro-6000"]) == (450, 600)
    for d in load_catalog():
        if d.kind == "gpu" and gpu_names(d):
            assert d.tdp_w and d.idle_w and 0 < d.idle_w < d.tdp_w, d.id


def _key(name: str) -> str:
    return " ".join(name.split()).casefold()


def test_every_amd_smi_and_system_profiler_name_has_a_source_and_names_one_device() -> None:
    """Each name a source shows amd-smi (or system_profiler) printing, or the table it prints from:
    no name without one, no source naming another entry's card, no name on two entries."""
    seen: dict[str, str] = {}
    for d in load_catalog():
        shown = {n for s in d.sources for n in s.names}
        listed = {*d.amd_smi, *d.system_profiler}
        assert listed <= shown, f"{d.id}: no source for {sorted(listed - shown)}"
        assert shown <= listed, f"{d.id}: sources name {sorted(shown - listed)}, not its names"
        for name in gpu_names(d):
            assert seen.setdefault(_key(name), d.id) == d.id, f"{name!r}: {seen[_key(name)]} and {d.id}"
            assert find_device_by_gpu_name(name) is d, name


def test_amd_smi_names_and_only_those_name_amd_cards() -> None:
    for name in ("AMD Instinct MI300X", "MI300X-O", "AMD Instinct MI300X VF"):
        assert find_device_by_gpu_name(name).id == "mi300x", name  # type: ignore[union-attr]
    assert find_device_by_gpu_name("AMD Instinct MI325X VF").id == "mi325x"  # type: ignore[union-attr]  # printed "Mi325X"
    assert find_device_by_gpu_name("AMD  Instinct MI350X").id == "mi355x"  # type: ignore[union-attr]  # its faster sibling
    assert find_device_by_gpu_name("Radeon 8060S Graphics").id == "strix-halo"  # type: ignore[union-attr]
    # amd-smi prints none of these: the catalog's own name, an alias, a part of a name, libdrm's fallback
    for name in ("MI300X", "AMD Instinct", "AMD Instinct MI300X OAM", "Radeon 8060S", "AMD Radeon Graphics"):
        assert find_device_by_gpu_name(name) is None, name
    assert find_device_by_smi_name is find_device_by_gpu_name  # the older name, still read


def test_the_h20_is_the_china_hopper() -> None:
    h20 = find_device_by_gpu_name("NVIDIA H20")
    assert h20 is not None and h20.id == "h20"
    assert (h20.memory_gb, h20.memory_bandwidth_gbs, h20.fp8_tflops, h20.bf16_tflops) == (96, 4000, 296, 148)
    assert h20.tdp_w == 500  # the power limit nvidia-smi shows, above NVIDIA's 400 W TDP
