"""Weight and KV-cache formats: bits per weight from a ``quantization_config``, bytes per KV element.

A :class:`WeightFormat` says how many bits a quantized weight takes *including* its scales and zero
points (e.g. AWQ 4-bit with group 128: 4 + (16 + 4)/128 = 4.156 bits), which weights it covers
(``scope``: every linear layer, or only the routed experts), and which math format a GEMM on it can use
(``compute``: "fp4" / "fp8" weights can run on FP4 / FP8 tensor cores; integer weight-only formats are
dequantized and multiplied in bf16).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lair.errors import FitError

__all__ = ["WeightFormat", "kv_bytes_per_element", "weight_format"]


@dataclass(frozen=True)
class WeightFormat:
    """How the transformer-layer weights are stored."""

    name: str  # "bf16", "fp8", "awq-4bit", "gptq-4bit", "mxfp4", "nvfp4", "exl3-3.0bpw", ...
    bits: float  # bits per quantized weight, scales included
    scope: str = "linear"  # "linear" (every layer matrix) or "experts" (routed experts only)
    compute: str = "bf16"  # GEMM math format: "bf16" | "fp8" | "fp4"
    head_bits: float = 16.0  # lm_head (EXL3 quantizes it; others keep 16-bit)


def weight_format(config: dict[str, Any]) -> WeightFormat:
    """The weight format a Hugging Face ``config.json`` declares (unquantized: its ``torch_dtype``)."""
    qc = config.get("quantization_config")
    if not qc:  # engines load float32 checkpoints in 16 bits too
        dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
        return WeightFormat("fp16" if dtype == "float16" else "bf16", 16.0)
    method = str(qc.get("quant_method") or qc.get("quant_algo") or "").lower()
    reader = _READERS.get(method)
    if reader is None:
        raise FitError(
            f"unknown quantization method {method!r} in config.json",
            hint="known: " + ", ".join(sorted(_READERS)),
        )
    return reader(qc)


def _group_overhead(bits: float, group: Any, scale_bits: float = 16.0, zero: bool = True) -> float:
    g = int(group or 0)
    if g <= 0:  # per-channel scales: negligible per weight
        return bits
    return bits + (scale_bits + (bits if zero else 0.0)) / g


def _awq(qc: dict[str, Any]) -> WeightFormat:
    bits = float(qc.get("bits") or qc.get("w_bit") or 4)
    group = qc.get("group_size") or qc.get("q_group_size") or 128
    return WeightFormat(f"awq-{bits:g}bit", _group_overhead(bits, group))


def _gptq(qc: dict[str, Any]) -> WeightFormat:
    bits = float(qc.get("bits") or 4)
    return WeightFormat(f"gptq-{bits:g}bit", _group_overhead(bits, qc.get("group_size") or 128))


def _fp8(qc: dict[str, Any]) -> WeightFormat:
    block = qc.get("weight_block_size") or [128, 128]
    per = int(block[0]) * int(block[1]) if len(block) == 2 else 0
    return WeightFormat("fp8", 8.0 + (32.0 / per if per else 0.0), compute="fp8")


def _mxfp4(qc: dict[str, Any]) -> WeightFormat:
    # 4-bit e2m1 values plus one 8-bit e8m0 scale per 32; gpt-oss applies it to the routed experts only.
    scope = "experts" if any("attn" in str(m) for m in qc.get("modules_to_not_convert") or []) else "linear"
    return WeightFormat("mxfp4", 4.0 + 8.0 / 32, scope=scope, compute="fp4")


def _nvfp4() -> WeightFormat:
    # 4-bit e2m1 values plus one fp8 e4m3 scale per 16 (the per-tensor fp32 scale is negligible).
    return WeightFormat("nvfp4", 4.0 + 8.0 / 16, compute="fp4")


def _modelopt(qc: dict[str, Any]) -> WeightFormat:
    algo = str(qc.get("quant_algo") or qc.get("quantization", {}).get("quant_algo") or "").upper()
    if "FP4" in algo:
        return _nvfp4()
    if "FP8" in algo:
        return WeightFormat("fp8", 8.0, compute="fp8")
    raise FitError(f"unknown modelopt quant_algo {algo!r}")


def _compressed_tensors(qc: dict[str, Any]) -> WeightFormat:
    groups = qc.get("config_groups") or {}
    w = next((g.get("weights") or {} for g in groups.values()), {})
    bits, kind, group = int(w.get("num_bits") or 8), str(w.get("type") or "int"), w.get("group_size")
    if kind == "float" and bits == 4:
        return _nvfp4()
    if kind == "float" and bits == 8:
        return WeightFormat("fp8", 8.0, compute="fp8")
    zero = not bool(w.get("symmetric", True))
    return WeightFormat(f"int{bits}", _group_overhead(float(bits), group, zero=zero))


def _exl3(qc: dict[str, Any]) -> WeightFormat:
    bits = float(qc.get("bits") or qc.get("bpw") or 4.0)
    head = float(qc.get("head_bits") or 6.0)
    return WeightFormat(f"exl3-{bits:g}bpw", bits, head_bits=head)


def _bnb(qc: dict[str, Any]) -> WeightFormat:
    if qc.get("load_in_8bit"):
        return WeightFormat("bnb-int8", 8.0 + 32.0 / 4096)
    # NF4: one fp32 absmax per 64 (+0.5 bit); double quantization stores it in 8 bits (+0.127).
    extra = 8.0 / 64 + 32.0 / (64 * 256) if qc.get("bnb_4bit_use_double_quant") else 32.0 / 64
    return WeightFormat("bnb-nf4", 4.0 + extra)


_READERS = {
    "awq": _awq,
    "gptq": _gptq,
    "fp8": _fp8,
    "mxfp4": _mxfp4,
    "modelopt": _modelopt,
    "nvfp4": lambda qc: _nvfp4(),
    "compressed-tensors": _compressed_tensors,
    "exl3": _exl3,
    "bitsandbytes": _bnb,
}

# Bytes per stored KV element (scales included) for the names engines use for their cache types.
_KV_BYTES = {
    "auto": 2.0,
    "bf16": 2.0,
    "bfloat16": 2.0,
    "fp16": 2.0,
    "f16": 2.0,
    "float16": 2.0,
    "half": 2.0,
    "fp32": 4.0,
    "f32": 4.0,
    "float32": 4.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "int8": 1.0,
    "q8_0": 34 / 32,  # llama.cpp: 32 int8 + one fp16 scale per block of 32
    "q5_1": 24 / 32,
    "q5_0": 22 / 32,
    "q4_1": 20 / 32,
    "q4_0": 18 / 32,
    "iq4_nl": 18 / 32,
    "fp8_ds_mla": 656 / 576,  # vLLM's FlashMLA fp8 layout: 512 fp8 + 4 fp32 scales + 64 bf16 rope
    "fp4": 0.5 + 1 / 16,  # NVFP4 cache: 4-bit values + one fp8 scale per 16
    "nvfp4": 0.5 + 1 / 16,
}


def kv_bytes_per_element(dtype: str | None) -> float:
    """Bytes one KV-cache element takes for an engine's cache type name ("auto" = 16-bit)."""
    key = (dtype or "auto").lower()
    if key in _KV_BYTES:
        return _KV_BYTES[key]
    for prefix, size in (
        ("fp8", 1.0),
        ("int8", 1.0),
        ("nvfp4", _KV_BYTES["nvfp4"]),
        ("fp4", _KV_BYTES["fp4"]),
    ):
        if key.startswith(prefix):  # engine-specific variants (fp8_inc, fp8_e4m3fn, ...)
            return size
    raise FitError(f"unknown KV cache dtype {dtype!r}", hint="known: " + ", ".join(_KV_BYTES))
