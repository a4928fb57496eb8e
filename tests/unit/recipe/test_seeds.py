"""Both seed documents are bundled examples that load, validate and round-trip."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from lair.recipe import check_file, export_text, load_recipe, load_text

ROOT = Path(__file__).resolve().parents[3]
SEEDS = ROOT / "tests" / "data" / "seeds"
LAUNCHER = ROOT / "examples" / "dsv41-flash-exl3-2x" / "recipe.toml"
PAGE = ROOT / "examples" / "dsv41-1017-engram-ssd" / "recipe.toml"


def test_launcher_seed_is_bundled_byte_for_byte() -> None:
    """The seed's bytes unchanged, followed only by the model facts and placement ``lair push``
    writes (``[meta.model_facts]``, ``[meta.fit_layout]``)."""
    seed = (SEEDS / "003_ab38a86a88fe2b41.txt").read_bytes()
    path_line, blank, toml = seed.split(b"\n", 2)
    assert path_line.endswith(b".recipe.toml") and blank == b""
    bundled = LAUNCHER.read_bytes()
    assert bundled.startswith(toml)
    added = tomllib.loads(bundled[len(toml) :].decode())
    assert set(added) == {"meta"} and set(added["meta"]) == {"model_facts", "fit_layout"}


def test_launcher_seed_validates_with_only_the_digest_warning() -> None:
    result = check_file(LAUNCHER)
    assert result.ok, [i.render() for i in result.errors]
    assert [w.code for w in result.warnings] == ["image-unpinned"]
    r = result.recipe
    assert r is not None
    assert (r.engine, r.required_nodes, r.cluster, r.tensor_parallel_size, r.distributed_backend) == (
        "vllm", 2, "8nodes-switch", 2, "mp",
    )  # fmt: skip
    assert (r.shm_size_bytes, r.memory_limit_bytes, r.cpus) == (2 * 2**30, 9 * 2**30, 6.0)
    assert r.devices == ["/dev/dri/card0"]
    assert r.extra_mounts_manifest == "/tmp/sm121-exl3-mounts.txt"
    assert [(m.container, m.read_only) for m in r.extra_mounts] == [
        ("/hub", True),
        ("/opt/ds41-serving", True),
        ("/usr/local/lib/python3.12/dist-packages/flashinfer/data/aot/mxfp8_gemm_cutlass_sm120", True),
        ("/cache", False),
    ]
    assert r.entrypoint[:2] == ["/opt/ds41-venv/bin/python", "/opt/ds41-serving/serve.py"]
    assert r.args[-1] == "deepseek_v41"
    assert [h.script for h in r.before_serve] == ["unlock_display_ram", None, None, None]
    assert "GENSTAGE" in (r.before_serve[1].run or "")
    assert (r.after_stop[0].script, r.after_stop[0].on_failure) == ("restore_display_ram", "warn")
    assert len(r.env) == 49 and r.env["NCCL_PROTO"] == "^LL128"


def test_page_seed_has_a_home_for_every_field() -> None:
    r = load_recipe(PAGE)
    m = r.meta
    page = (SEEDS / "000_6bf8e44802c22ca7.txt").read_text()
    assert m.title and m.title in page
    assert m.license == "MIT" and m.submission == "community"
    assert [c.who for c in m.credits] == ["yoloyash", "diffbot", "deepseek-ai/DeepSeek-V4.1-Flash-1017"]
    assert " ".join(m.tags) in page
    assert m.launch_command and m.launch_command in page
    assert all(f"- {k.name}={k.value}" in page for k in m.env_knobs) and len(m.env_knobs) == 16
    assert m.flags and m.flags[:60] in page and m.notes and m.notes[:60] in page
    assert m.engine and m.engine.install_note and m.engine.install_note[:80] in page
    assert m.hardware and (m.hardware.gpu_model, m.hardware.gpu_count, m.hardware.vram_gb) == (
        "RTX PRO 6000",
        2,
        96,
    )
    assert (m.max_context, m.kv_pool_tokens) == (1048576, 1071558)
    rows = [(p.context, p.concurrency, p.prefill_tok_s, p.decode_tok_s) for p in m.performance]
    assert rows == [
        (2048, 1, None, 163),
        (40960, None, 7360, None),
        (46080, 1, None, 167.3),
        (46080, 4, None, 307.3),
    ]
    assert {p.provenance for p in m.performance} == {"reported"}
    assert [q.score for q in m.quality] == [98.5, 97.0]
    assert m.needles[0].found and m.needles[0].seconds == 111.0
    assert m.requirements and m.requirements.driver_floor == "unknown - check the image tag"
    assert m.downloads and m.revisions[0].note == "Initial version."
    assert (
        r.placeholders["API_KEY"].type == "secret" and r.placeholders["PACK"].default == "/models/dsv41-1017"
    )


@pytest.mark.parametrize("path", [LAUNCHER, PAGE], ids=["launcher", "page"])
@pytest.mark.parametrize("fmt", ["yaml", "json", "toml"])
def test_seed_round_trips(path: Path, fmt: str) -> None:
    recipe = load_recipe(path)
    text = export_text(recipe, fmt)
    again = load_text(text, f"x.{fmt}", fmt)
    assert again == recipe
    assert load_text(export_text(again, "toml"), "y.toml", "toml") == recipe
