"""Model facts from the files on disk: a model folder (config.json and safetensors headers), a GGUF
file or folder, or a Hugging Face cache entry (followed to its snapshot). The facts' model and the
config arithmetic are :mod:`lair.fit.model_facts`; the GGUF reader is :mod:`lair.fit._gguf`."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from lair.errors import FitError
from lair.fit._gguf import read_gguf
from lair.fit._safetensors import TensorTotals, scan_safetensors, totals_from_headers
from lair.fit.hub_cache import entry_of_snapshot, load_safetensors_headers
from lair.fit.model_facts import ModelFacts, facts_from_config

__all__ = ["find_in_hf_cache", "read_model_facts", "resolve_model_path"]


def resolve_model_path(path: str | Path) -> Path:
    """The folder (or GGUF file) that holds the model: follows a Hugging Face cache entry
    ``models--org--name`` through ``refs/main`` (else the newest snapshot) to ``snapshots/<rev>``."""
    p = Path(path).expanduser()
    if not p.exists():
        raise FitError(
            f"model path {p} does not exist", hint="give a model folder, a GGUF file or an HF cache entry"
        )
    snaps = p / "snapshots"
    if p.is_dir() and snaps.is_dir():
        ref = p / "refs" / "main"
        if ref.is_file() and (snaps / ref.read_text().strip()).is_dir():
            return snaps / ref.read_text().strip()
        revs = sorted((d for d in snaps.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime)
        if not revs:
            raise FitError(f"{p}: Hugging Face cache entry has no snapshot")
        return revs[-1]
    return p


def find_in_hf_cache(repo_id: str) -> Path | None:
    """The local Hugging Face cache entry of ``org/name`` (``$HF_HUB_CACHE``, ``$HF_HOME/hub`` or
    ``~/.cache/huggingface/hub``), or None. Offline: only looks at the disk."""
    if repo_id.count("/") != 1 or repo_id.startswith(("/", ".", "~")):
        return None
    home = os.environ.get("HF_HOME") or str(Path("~/.cache/huggingface").expanduser())
    hub = Path(os.environ.get("HF_HUB_CACHE") or Path(home) / "hub")
    entry = hub / ("models--" + repo_id.replace("/", "--"))
    return entry if (entry / "snapshots").is_dir() else None


def read_model_facts(path: str | Path) -> ModelFacts:
    """Facts for the model at ``path`` (folder with config.json, GGUF file/folder, HF cache entry)."""
    p = resolve_model_path(path)
    if p.is_file() and p.suffix == ".gguf":
        return read_gguf([p])
    config = p / "config.json"
    if not config.is_file():
        ggufs = sorted(p.glob("*.gguf"))
        if ggufs:
            return read_gguf(_first_split(ggufs))
        raise FitError(f"{p}: no config.json and no .gguf file", hint="point at the model's folder")
    facts = facts_from_config(json.loads(config.read_text()), name=_model_name(p))
    return _with_weight_files(facts, p)


def _first_split(files: list[Path]) -> list[Path]:
    """All parts of the first GGUF model in a folder (``name-00001-of-00003.gguf`` parts together)."""
    first = files[0].name
    stem = first.split("-00001-of-")[0] if "-00001-of-" in first else None
    return [f for f in files if stem and f.name.startswith(stem + "-0")] if stem else [files[0]]


def _model_name(p: Path) -> str:
    for part in reversed(p.parts):
        if part.startswith("models--"):
            return part.removeprefix("models--").replace("--", "/")
    return p.name


def _cached_headers(folder: Path, facts: ModelFacts) -> TensorTotals | None:
    """Totals of the safetensors headers read over HTTP for this snapshot (:mod:`lair.fit.hub_cache`)."""
    found = entry_of_snapshot(folder)
    headers = load_safetensors_headers(*found) if found else None
    if not headers:
        return None
    return totals_from_headers(list(headers.values()), facts.n_layers, facts.tied_embeddings)


def _with_weight_files(facts: ModelFacts, folder: Path) -> ModelFacts:
    st = scan_safetensors(folder, facts.n_layers, facts.tied_embeddings)
    where = ""
    if st is None and (st := _cached_headers(folder, facts)) is not None:
        where = " read from the Hub"
    if st is not None:
        return replace(
            facts,
            weight_bytes=st.weight_bytes,
            expert_bytes=st.expert_bytes,
            embedding_bytes=st.embedding_bytes,
            extra_bytes=st.extra_bytes,
            source=f"config.json + {st.files} safetensors header(s){where}",
        )
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        total = int(json.loads(index.read_text()).get("metadata", {}).get("total_size") or 0)
        if total:
            scale = total / facts.weight_bytes
            return replace(
                facts,
                weight_bytes=total,
                expert_bytes=int(facts.expert_bytes * scale),
                embedding_bytes=int(facts.embedding_bytes * scale),
                source="config.json + model.safetensors.index.json total_size",
            )
    return facts
