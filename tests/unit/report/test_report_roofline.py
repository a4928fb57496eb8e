"""``lair report show`` puts each measured row next to its roofline and flags rows above it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lair.cli import main
from lair.report.roofline_rows import rate_report, roofline_markdown
from lair.testing.tiny_model import make_tiny_model


def _cell(context: int, conc: int, prefill: float, decode: float) -> dict[str, Any]:
    return {
        "context": context, "concurrency": conc, "prompt_tokens": context + 6, "ttft_ms_p50": 10.0,
        "ttft_ms_p90": 12.0, "prefill_tok_s": prefill, "decode_tok_s_per_stream": decode,
        "decode_tok_s_aggregate": decode * conc, "cached_tokens": 0, "flags": [],
    }  # fmt: skip


@pytest.fixture
def report(tmp_path: Path) -> Path:
    gguf = make_tiny_model(tmp_path / "model")
    folder = tmp_path / "report"
    folder.mkdir()
    (folder / "recipe.recipe.toml").write_text(
        f'engine = "xllamacpp"\nruntime = "native"\nmodel = "{gguf}"\nentrypoint = ["python3"]\n'
        '[meta.hardware]\ngpu_model = "RTX 4090"\ngpu_count = 1\n'
    )
    cells = [_cell(2048, 1, 30_000.0, 4_000.0), _cell(2048, 4, 30_000.0, 9e9)]
    bench = {
        "url": "http://x",
        "model": "tiny",
        "started_at": "a",
        "finished_at": "b",
        "cells": cells,
        "needle": None,
    }
    doc = {
        "schema_version": 1, "kind": "lair.run_report", "run_name": "t", "lair_version": "0",
        "recipe": {"file": "recipe.recipe.toml"}, "bench": bench, "fingerprint": {},
    }  # fmt: skip
    (folder / "results.json").write_text(json.dumps(doc))
    return folder


def test_rows_are_rated_against_the_recipe_hardware(report: Path) -> None:
    doc = json.loads((report / "results.json").read_text())
    rr = rate_report(report, doc)
    assert rr.hardware.startswith("1x") and "4090" in rr.hardware and rr.model == "tiny-llama-random"
    ok, crazy = rr.rows
    assert ok["decode_roofline_tok_s"] > ok["decode_tok_s"] and 0 < ok["decode_pct"] < 100
    assert not ok["implausible"]
    assert crazy["implausible"] and crazy["decode_pct"] > 100 and "decode" in crazy["why"]
    text = roofline_markdown(rr)
    # one context label everywhere: the cell's 2,048 (as in the main table), rated at the 2,054 prompt tokens
    assert text.count("IMPLAUSIBLE") == 1 and "| 2,048 | 1 |" in text and "2,054" not in text
    assert (ok["context"], ok["prompt_tokens"]) == (2048, 2054)


def test_gpu_option_overrides_and_missing_facts_are_explained(report: Path) -> None:
    doc = json.loads((report / "results.json").read_text())
    assert "H200" in rate_report(report, doc, gpu="H200", gpus=2).hardware
    (report / "recipe.recipe.toml").write_text(
        'engine = "vllm"\ndocker_image = "a/b:1"\nmodel = "org/absent"\n'
    )
    rr = rate_report(report, doc)
    assert rr.rows == [] and rr.missing == "no roofline: needs model facts (--model) and GPUs (--gpu/--gpus)"


def test_cli_show_prints_the_roofline(report: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "show", str(report)]) == 0
    out = capsys.readouterr().out
    assert "## Roofline (1x" in out and "IMPLAUSIBLE" in out
    assert main(["report", "show", str(report), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["implausible"] for r in data["roofline"]["rows"]] == [False, True]
