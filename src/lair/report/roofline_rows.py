"""Each measured row of a run report as a % of its roofline (``lair report show``).

The ceiling needs two things the report may or may not carry: model facts (``--model``, else the
recipe-as-run's ``model`` when it is a local folder, GGUF file or Hugging Face cache entry) and the
GPUs (``--gpu``/``--gpus``, else the recipe's ``meta.hardware``, else the GPUs in the report's
fingerprint). Without either, rows are shown without a ceiling and the reason is said.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lair.errors import FitError, LairError
from lair.table import markdown_table

__all__ = ["RooflineRows", "rate_report"]


@dataclass
class RooflineRows:
    """Per-cell ratings (same order as the report's cells), or why there are none."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    hardware: str = ""
    model: str = ""
    missing: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "hardware": self.hardware, "model": self.model, "missing": self.missing}


def _recipe(report: Path, doc: dict[str, Any]) -> Any:
    name = (doc.get("recipe") or {}).get("file")
    if not name or not (report / name).is_file():
        return None
    from lair.recipe import load_recipe

    try:
        return load_recipe(report / name)
    except LairError:
        return None


def _model_path(recipe: Any, given: str | None) -> str | None:
    if given or recipe is None:
        return given
    from lair.fit.recipe_layout import recipe_model_path

    return recipe_model_path(recipe)


def _hardware_spec(
    recipe: Any, doc: dict[str, Any], gpu: str | None, gpus: int | None
) -> tuple[str, int] | None:
    if gpu:
        return gpu, gpus or 1
    hw = recipe.meta.hardware if recipe is not None else None
    if hw and hw.gpu_model:
        return hw.gpu_model, gpus or hw.gpu_count or 1
    found = (doc.get("fingerprint") or {}).get("gpus") or {}
    models = found.get("models") or []
    if models:
        return str(models[0]), gpus or int(found.get("count") or len(models))
    return None


def rate_report(
    report: str | Path,
    doc: dict[str, Any],
    *,
    model: str | None = None,
    gpu: str | None = None,
    gpus: int | None = None,
) -> RooflineRows:
    """Rate every cell of a loaded report against its decode and prefill ceilings."""
    from lair.fit import (
        Hardware,
        Layout,
        Measured,
        find_device,
        layout_from_recipe,
        rate_row,
        read_model_facts,
    )

    recipe = _recipe(Path(report), doc)
    path = _model_path(recipe, model)
    spec = _hardware_spec(recipe, doc, gpu, gpus)
    if path is None or spec is None:
        what = [x for x, ok in (("model facts (--model)", path), ("GPUs (--gpu/--gpus)", spec)) if not ok]
        return RooflineRows(missing="no roofline: needs " + " and ".join(what))
    try:
        facts = read_model_facts(path)
        hw = Hardware(find_device(spec[0]), gpus=spec[1])
    except FitError as exc:
        return RooflineRows(missing=f"no roofline: {exc.message}")
    layout = layout_from_recipe(recipe) if recipe is not None else Layout()
    rows = []
    for cell in doc["bench"]["cells"]:
        measured = Measured(
            context=int(cell.get("prompt_tokens") or cell["context"]),
            concurrency=int(cell["concurrency"]),
            prefill_tok_s=cell.get("prefill_tok_s"),
            decode_tok_s=cell.get("decode_tok_s_per_stream"),
        )
        row = rate_row(facts, hw, layout, measured, decode_is_aggregate=False).as_dict()
        # rated at the prompt the server counted; labelled with the cell's context, as every table is
        row.update(context=int(cell["context"]), prompt_tokens=cell.get("prompt_tokens"))
        rows.append(row)
    return RooflineRows(rows=rows, hardware=f"{spec[1]}x {hw.device.name}", model=facts.name or str(path))


def _pct(v: Any) -> str:
    return "-" if v is None else f"{v:.1f}%"


def _num(v: Any) -> str:
    return "-" if v is None else f"{v:,.1f}"


ROOFLINE_HEAD = ("context", "conc", "decode tok/s/stream", "ceiling", "% of roofline", "prefill tok/s",
                 "ceiling", "% of roofline", "")  # fmt: skip


def roofline_table(rr: RooflineRows) -> tuple[str, list[list[str]]]:
    """The section title and the rows of :data:`ROOFLINE_HEAD` (none: ``rr.missing`` says why)."""
    if not rr.rows:
        return "Roofline", []
    rows = []
    for r in rr.rows:
        flag = "IMPLAUSIBLE: " + r["why"] if r["implausible"] else ""
        cells = [f"{r['context']:,}", str(r["concurrency"]), _num(r["decode_tok_s"])]
        cells += [_num(r["decode_roofline_tok_s"]), _pct(r["decode_pct"]), _num(r["prefill_tok_s"])]
        cells += [_num(r["prefill_roofline_tok_s"]), _pct(r["prefill_pct"]), flag]
        rows.append(cells)
    return f"Roofline ({rr.hardware}; {rr.model})", rows


def roofline_markdown(rr: RooflineRows) -> str:
    """The ratings as a Markdown section (or the reason there are none)."""
    title, rows = roofline_table(rr)
    if not rows:
        return f"\n## {title}\n{rr.missing}\n"
    return f"\n## {title}\n{markdown_table(ROOFLINE_HEAD, rows)}\n"


__all__ += ["ROOFLINE_HEAD", "roofline_markdown", "roofline_table"]
