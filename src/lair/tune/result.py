"""What a tune hands back: its trials (best first, the Pareto front with two objectives), the chart
of the objective per trial, the tune's folder, and the winning recipe written as a new file.

    rows = trial_rows(study, objectives)           # every trial, best first
    text = trials_table(rows, objectives)          # lair.table text (markdown_table for report.md)
    svg = objective_chart(rows, objectives[0])     # objective per trial, best so far
    write_winner(recipe_path, out_path, knobs, stamp)   # lair set-style: comments kept, [meta.tune]
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lair.tune.space import UNSET

if TYPE_CHECKING:
    import optuna

    from lair.tune.objective import Objective

__all__ = ["duplicate_trials", "objective_chart", "pareto", "trial_rows", "trials_table", "write_winner"]

_ORDER = {"ok": 0, "rejected": 1, "failed": 2, "refused": 3, "interrupted": 4, "duplicate": 5}


def pareto(rows: Sequence[dict[str, Any]], objectives: Sequence[Objective]) -> set[int]:
    """Trial numbers of the ``ok`` trials no other ``ok`` trial dominates."""
    ok = [r for r in rows if r["outcome"] == "ok"]

    def dominates(a: list[float], b: list[float]) -> bool:
        ge = all(not o.better(y, x) for o, x, y in zip(objectives, a, b, strict=True))
        return ge and any(o.better(x, y) for o, x, y in zip(objectives, a, b, strict=True))

    return {r["trial"] for r in ok if not any(dominates(q["values"], r["values"]) for q in ok if q is not r)}


def trial_rows(study: optuna.Study, objectives: Sequence[Objective]) -> list[dict[str, Any]]:
    """One row per trial (duplicates left out), best first: ``ok`` by the first objective (the
    Pareto front first when there are two or more), then rejected, failed, refused, interrupted."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        a = t.user_attrs
        if a.get("outcome") in (None, "duplicate"):
            continue
        rows.append(
            {
                "trial": t.number,
                "baseline": bool(a.get("baseline")),
                "knobs": a.get("knobs") or {k: str(v) for k, v in t.params.items()},
                "outcome": a["outcome"],
                "values": a.get("values"),
                "stage": a.get("stage"),
                "reason": a.get("reason"),
                "checks": a.get("checks", {}),
                "guard_score": a.get("guard_score"),
                "client_bound": bool(a.get("client_bound")),
                "report": a.get("report"),
                "seconds": round(t.duration.total_seconds(), 1) if t.duration else None,
            }
        )
    front = pareto(rows, objectives) if len(objectives) > 1 else set()
    first = objectives[0]

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        v = r["values"][0] if r["values"] else 0.0
        return (_ORDER[r["outcome"]], r["trial"] not in front, -v if first.goal == "max" else v, r["trial"])

    rows.sort(key=key)
    for r in rows:
        r["pareto"] = r["trial"] in front
    return rows


def _knob_text(knobs: dict[str, str]) -> str:
    return " ".join(f"{k}={'-' if v == UNSET else v}" for k, v in knobs.items())


def _what(r: dict[str, Any]) -> str:
    if r["outcome"] == "ok":
        marks = ["pareto" if r["pareto"] else "", "baseline" if r["baseline"] else ""]
        marks.append("client-bound" if r.get("client_bound") else "")
        return " ".join(m for m in marks if m)
    return f"{r['stage'] or ''}: {r['reason'] or ''}".strip(": ")


def _cells(r: dict[str, Any], objectives: Sequence[Objective]) -> list[str]:
    vals = r["values"] or []
    return [f"{v:.4g}" for v in vals] if vals else ["-"] * len(objectives)


def duplicate_trials(study: optuna.Study) -> list[dict[str, Any]]:
    """The trials the sampler proposed again (nothing ran): ``{"trial", "reason"}`` each, in order."""
    return [
        {"trial": t.number, "reason": str(t.user_attrs.get("reason") or "")}
        for t in study.get_trials(deepcopy=False)
        if t.user_attrs.get("outcome") == "duplicate"
    ]


def trials_table(
    rows: Sequence[dict[str, Any]],
    objectives: Sequence[Objective],
    markdown: bool = False,
    duplicates: Sequence[dict[str, Any]] = (),
) -> str:
    """The trials, best first; a last line names the trial numbers the sampler spent on knobs it had
    tried already (the table would skip them without a word)."""
    from lair.table import markdown_table, text_table

    head = ["trial", "knobs", *(o.label for o in objectives), "outcome", "note"]
    body = [
        [str(r["trial"]), _knob_text(r["knobs"]), *_cells(r, objectives), r["outcome"], _what(r)[:160]]
        for r in rows
    ]
    table = (markdown_table if markdown else text_table)(head, body)
    if not duplicates:
        return table
    said = "; ".join(f"{d['trial']} ({d['reason']})" if d["reason"] else str(d["trial"]) for d in duplicates)
    return f"{table}\nnot run, the sampler proposed tried knobs again: trial {said}"


def objective_chart(rows: Sequence[dict[str, Any]], objective: Objective, index: int = 0) -> str:
    """The objective per trial (dots: results; crosses at the axis: trials without one) and the best
    so far, as a clean inline SVG (lair.report.charts' sanitiser and palette)."""
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure

    from lair.report.charts import COLOURS, clean_svg

    done = sorted((r for r in rows if r["values"]), key=lambda r: r["trial"])
    fig = Figure(figsize=(5.2, 3.1), layout="constrained")
    FigureCanvasSVG(fig)
    ax = fig.add_subplot()
    ok = [r for r in done if r["outcome"] == "ok"]
    ax.scatter([r["trial"] for r in ok], [r["values"][index] for r in ok], color=COLOURS[0], label="result")
    bad = [r for r in done if r["outcome"] != "ok"]
    if bad:
        ax.scatter(
            [r["trial"] for r in bad],
            [r["values"][index] for r in bad],
            color=COLOURS[1],
            marker="x",
            label="over a limit",
        )
    best: list[tuple[int, float]] = []
    for r in ok:
        v = r["values"][index]
        if not best or objective.better(v, best[-1][1]):
            best.append((r["trial"], v))
        else:
            best.append((r["trial"], best[-1][1]))
    if best:
        ax.step(
            [t for t, _ in best], [v for _, v in best], where="post", color=COLOURS[2], label="best so far"
        )
    missing = [r["trial"] for r in rows if not r["values"]]
    if missing:
        ax.scatter(missing, [0.0] * len(missing), color="#9ca3af", marker="|", label="no result")
    ax.set_xlabel("trial")
    ax.set_ylabel(objective.label)
    ax.set_ylim(bottom=0)
    ax.legend(frameon=False, fontsize=8)
    buf = io.BytesIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    return clean_svg(buf.getvalue(), f"{objective.label} per trial")


def write_winner(recipe: Path, out: Path, knobs: dict[str, str], stamp: dict[str, Any]) -> Path:
    """The starting recipe with the winning knobs (comments and layout kept) and ``[meta.tune]``;
    written only if it checks."""
    import tomlkit

    from lair.errors import RecipeError
    from lair.recipe import check_text
    from lair.tune.space import apply

    doc = tomlkit.parse(apply(recipe.read_text(encoding="utf-8"), knobs))
    meta = doc.setdefault("meta", tomlkit.table())
    title = str(meta.get("title") or doc.get("name") or recipe.stem)
    if not title.endswith("(tuned)"):
        meta["title"] = f"{title} (tuned)"
    meta.pop("slug", None)  # a new recipe: its own slug when published (or a fork's)
    table = tomlkit.table()
    for k, v in stamp.items():
        if v is not None:
            table[k] = v
    meta["tune"] = table
    text = tomlkit.dumps(doc)
    result = check_text(text, str(out), "toml")
    if not result.ok:
        raise RecipeError(result.errors)
    out.write_text(text, encoding="utf-8")
    return out
