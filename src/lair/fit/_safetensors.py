"""Weight sizes from safetensors headers, without reading the weights.

A ``.safetensors`` file starts with an 8-byte little-endian header length and a JSON header that maps
each tensor name to its dtype, shape and byte range. Only those bytes are read here.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lair.errors import FitError

__all__ = ["TensorTotals", "read_header", "scan_safetensors", "totals_from_headers"]

_MAX_HEADER = 100 * 1024 * 1024
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_EMBED = ("embed_tokens.weight", "wte.weight", "tok_embeddings.weight", "word_embeddings.weight")
_EXTRA = ("vision_tower", "vision_model", "visual.", "multi_modal_projector", "mm_projector", "audio_tower")
_WIDE = {"F32": 2.0, "F64": 4.0}  # engines load float32/float64 checkpoints as 16-bit: bytes shrink by this


@dataclass(frozen=True)
class TensorTotals:
    """Bytes of the tensors an engine loads, split by role."""

    weight_bytes: int
    expert_bytes: int
    embedding_bytes: int
    extra_bytes: int
    skipped_bytes: int  # layers past num_hidden_layers (multi-token-prediction heads), not loaded
    files: int


def read_header(path: Path) -> dict[str, Any]:
    """The JSON header of one safetensors file."""
    with path.open("rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise FitError(f"{path}: not a safetensors file (too short)")
        (n,) = struct.unpack("<Q", raw)
        if n > _MAX_HEADER:
            raise FitError(f"{path}: safetensors header of {n} bytes is not believable")
        header: dict[str, Any] = json.loads(f.read(n))
    return header


def _role(name: str, n_layers: int, tied: bool) -> str:
    m = _LAYER.search(name)
    if m and int(m.group(1)) >= n_layers and not any(x in name for x in _EXTRA):
        return "skipped"
    if any(x in name for x in _EXTRA):
        return "extra"
    if ".experts" in name and "shared_expert" not in name:
        return "expert"
    if not tied and name.endswith(_EMBED):
        return "embedding"
    return "dense"


def scan_safetensors(folder: Path, n_layers: int, tied: bool) -> TensorTotals | None:
    """Totals over every ``*.safetensors`` in ``folder`` (None when there is none)."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    return totals_from_headers([read_header(p) for p in files], n_layers, tied)


def totals_from_headers(headers: list[dict[str, Any]], n_layers: int, tied: bool) -> TensorTotals:
    """Totals over safetensors headers (one per file; each maps a tensor name to its ``dtype`` and
    ``data_offsets``), read from disk or over HTTP."""
    sums = {"dense": 0.0, "expert": 0.0, "embedding": 0.0, "extra": 0.0, "skipped": 0.0}
    for header in headers:
        for name, info in header.items():
            if name == "__metadata__":
                continue
            start, end = info["data_offsets"]
            sums[_role(name, n_layers, tied)] += (end - start) / _WIDE.get(info["dtype"], 1.0)
    loaded = sums["dense"] + sums["expert"] + sums["embedding"] + sums["extra"]
    return TensorTotals(
        weight_bytes=int(loaded),
        expert_bytes=int(sums["expert"]),
        embedding_bytes=int(sums["embedding"]),
        extra_bytes=int(sums["extra"]),
        skipped_bytes=int(sums["skipped"]),
        files=len(headers),
    )
