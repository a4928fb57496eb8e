"""A peer's result file as a lair report folder (the layout of :mod:`lair.report.folder`) whose rows
a registry stores as reported, never verified.

results.json carries the cells and an ``imported`` block: the tool, its version, the sha256 and name
of the peer's file, whether the cells were recomputed from per-request timings with lair's
definitions, which definitions differ and what was not carried. fingerprint.json says the rig is
unknown (the peer's file describes no machine lair can check; this machine's is not the one that
ran it). requests.jsonl is empty: lair has no raw timings of its own to verify. The peer's file is
kept beside them as ``peer/<its name>``.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lair import __version__
from lair.bench import SCHEMA_VERSION
from lair.interop.peer_results import PeerRun
from lair.recipe import load_recipe
from lair.recipe.digest import model_sha256
from lair.report.fingerprint import sha256_file

__all__ = ["write_imported_report"]


def write_imported_report(run: PeerRun, recipe_path: str | Path, out_dir: str | Path) -> Path:
    """Write the report folder of ``run`` (the rows of the recipe at ``recipe_path``) into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    recipe = Path(recipe_path)
    stem = recipe.name.split(".")[0]
    # the recipe as the registry published it: the peer's file gives no placeholder values to fill in
    (out / f"{stem}.recipe.toml").write_text(recipe.read_text(encoding="utf-8"))
    fp: dict[str, Any] = {"imported_from": run.tool, "lair_version": __version__}
    doc = {
        "schema_version": SCHEMA_VERSION,
        "kind": "lair.run_report",
        "run_name": f"{run.tool}-{run.sha256[:12]}",
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "lair_version": __version__,
        "recipe": {
            "source": str(recipe),
            "file": f"{stem}.recipe.toml",
            "sha256": sha256_file(recipe),
            "model_sha256": model_sha256(load_recipe(recipe)),
        },
        "bench": {"model": run.model or load_recipe(recipe).model, "options": {}, "cells": run.cells},
        "fingerprint": fp,
        "logs": [],
        "imported": run.provenance(),
    }
    _dump(out / "results.json", doc)
    _dump(out / "fingerprint.json", fp)
    (out / "requests.jsonl").write_text("")
    (out / "peer").mkdir(exist_ok=True)
    shutil.copyfile(run.file, out / "peer" / Path(run.file).name)
    (out / "report.md").write_text(_markdown(doc, run))
    return out


def _markdown(doc: dict[str, Any], run: PeerRun) -> str:
    lines = [
        f"# {doc['run_name']}: imported from {run.tool} {run.version}",
        "",
        f"File {Path(run.file).name}, sha256 {run.sha256}. Reported figures: never verified.",
        "",
        "| context | concurrency | TTFT p50 ms | prefill tok/s | decode tok/s/stream | decode tok/s |",
        "|---|---|---|---|---|---|",
    ]
    for c in run.cells:
        figures = [c.get(k) for k in ("ttft_ms_p50", "prefill_tok_s", "decode_tok_s_per_stream")]
        figures.append(c.get("decode_tok_s_aggregate"))
        shown = " | ".join("" if v is None else f"{v:,.1f}" for v in figures)
        lines.append(f"| {c['context']} | {c['concurrency']} | {shown} |")
    lines += ["", "Definitions that differ from lair's:", *[f"- {d}" for d in run.differs], ""]
    return "\n".join(lines)


def _dump(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
