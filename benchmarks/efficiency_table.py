"""Write lair's bundled efficiency table (src/lair/fit/efficiencies.toml) from the measured GPU runs.

Reads every ``benchmarks/results/gpu_fit_validate_*.json`` (written by ``gpu_fit_validate.py``: batch-1
decode of dense BF16 Llama-shaped models in a hand-written PyTorch loop, next to lair's decode roofline
on the catalog's device) and writes one row per measured (model, attention kernel, context): its
efficiency = measured tok/s / roofline tok/s. The loop is no serving engine, so its rows are filed under
engines of their own, ``torch-loop-sdpa`` and ``torch-loop-matmul`` (the two attention kernels differ by
up to 3.6x at long contexts): a prediction for vLLM or llama.cpp never rests on them.

    .venv/bin/python benchmarks/efficiency_table.py           # rewrite the table
    .venv/bin/python benchmarks/efficiency_table.py --check   # exit 1 when the table is stale
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
TABLE = ROOT / "src" / "lair" / "fit" / "efficiencies.toml"
HEADER = """\
# lair's bundled efficiency table: measured decode speeds as fractions of lair's roofline.
# Written by benchmarks/efficiency_table.py from benchmarks/results/gpu_fit_validate_*.json; do not edit.
# decode = decode_tok_s / decode_roofline_tok_s (batch 1, per stream). See docs/fit.md, "Predicted speed".
"""


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _gpu(info: dict[str, Any]) -> str:
    return str(info.get("device", "")).removeprefix("NVIDIA ").strip()


def rows_of(path: Path) -> list[dict[str, Any]]:
    """The table's rows for one results file (its rows with a decode speed and a roofline)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    gpu = _gpu(doc.get("info", {}))
    out = []
    for i, r in enumerate(doc["rows"]):
        if not r.get("decode_tok_s") or not r.get("roofline_tok_s"):
            continue
        out.append({
            "id": f"{_slug(gpu)}-{r['attention']}-{_slug(r['model'])}-{r['context']}",
            "engine": f"torch-loop-{r['attention']}",
            "model_class": "dense",
            "weight_format": "bf16",
            "decode": round(r["decode_tok_s"] / r["roofline_tok_s"], 4),
            "decode_tok_s": r["decode_tok_s"],
            "decode_roofline_tok_s": r["roofline_tok_s"],
            "gpu": gpu,
            "context": r["context"],
            "concurrency": 1,
            "link": f"benchmarks/results/{path.name}#rows/{i}",
        })  # fmt: skip
    return out


def _value(v: Any) -> str:
    return json.dumps(v) if isinstance(v, str) else repr(v)


def render(rows: list[dict[str, Any]]) -> str:
    blocks = ["\n".join(["[[row]]", *(f"{k} = {_value(v)}" for k, v in r.items())]) for r in rows]
    return HEADER + "\n" + "\n\n".join(blocks) + "\n"


def build() -> str:
    return render([row for path in sorted(RESULTS.glob("gpu_fit_validate_*.json")) for row in rows_of(path)])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the table is not what it would write")
    a = ap.parse_args()
    text = build()
    if a.check:
        stale = TABLE.read_text(encoding="utf-8") != text
        print(f"{TABLE.relative_to(ROOT)}: {'stale' if stale else 'up to date'}", file=sys.stderr)
        return 1 if stale else 0
    TABLE.write_text(text, encoding="utf-8")
    print(f"wrote {TABLE.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
