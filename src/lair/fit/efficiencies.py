"""The measured rows a prediction rests on (:mod:`lair.fit.predict`): the bundled table and the rows a
registry serves.

The bundled table, ``efficiencies.toml``, is written by ``benchmarks/efficiency_table.py`` from the GPU
runs under ``benchmarks/results`` (never edited by hand). A registry serves its verified rows, each as
its % of the roofline, at ``/api/v1/efficiencies`` (:func:`rows_from_json` reads the answer).
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

from lair.errors import FitError
from lair.fit.predict import EfficiencyRow

__all__ = ["TABLE", "bundled_rows", "rows_from_json"]

TABLE = Path(__file__).with_name("efficiencies.toml")


@cache
def bundled_rows() -> tuple[EfficiencyRow, ...]:
    """The rows of the bundled table."""
    raw = tomllib.loads(TABLE.read_text(encoding="utf-8"))
    return tuple(rows_from_json(raw.get("row", []), source="bundled"))


def rows_from_json(items: Iterable[dict[str, Any]], *, source: str = "registry") -> list[EfficiencyRow]:
    """Rows from JSON objects (the registry's answer, the bundled table's entries); an entry without
    an id, engine, model class or weight format is an error, a key lair does not know is left out."""
    out = []
    for i, item in enumerate(items):
        missing = [k for k in ("id", "engine", "model_class", "weight_format") if not item.get(k)]
        if missing:
            raise FitError(f"efficiency row {i}: no {', '.join(missing)}", hint="see docs/fit.md")
        out.append(EfficiencyRow.from_dict({"source": source, **item}))
    return out
