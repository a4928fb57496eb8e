"""``lair search QUERY [--gpu ...] [--json]`` through the real command against a real ``lair serve``
(SQLite, seeded with the bundled examples): the text and JSON output name the recipes the server's own
JSON API lists for the same query, a GPU filter narrows them, no hits print nothing and say so, and an
unreachable registry is a clear error with exit code 6."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from verify_helpers import lair

from lair.testing.registry import free_port, serve_process

pytestmark = [pytest.mark.integration]

# the best decode_tok_s of that example's speed table (examples/dsv41-1017-engram-ssd: 163, 167.3, 307.3)
BEST = "307.3 tok/s"
ROOT = Path(__file__).resolve().parents[3]
TINY_EXAMPLES = sorted(f.parent.name for f in (ROOT / "examples").glob("tiny-*/recipe.toml"))
"""The bundled tiny examples (each folder is seeded as the recipe of its name)."""
RTX = "deepseek-v4-1-flash-1017-exl3-3bpw-2x-rtx-pro-6000-engram-on-ssd"  # the one seeded RTX PRO 6000 recipe


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("search")
    with serve_process(f"sqlite:///{tmp / 'registry.sqlite3'}", log=tmp / "serve.log") as base:
        yield base


def _api_slugs(base: str, **params: str) -> list[str]:
    """The server's own answer, read with urllib (not lair's client)."""
    with urllib.request.urlopen(f"{base}/api/v1/recipes?{urllib.parse.urlencode(params)}", timeout=10) as r:
        return [i["slug"] for i in json.load(r)["items"]]


def _search(base: str, home: Path, *args: str) -> tuple[int, str, str]:
    res = lair("search", *args, env={"LAIR_REGISTRY": base, "LAIR_HOME": str(home), "LAIR_TOKEN": ""})
    return res.returncode, res.stdout, res.stderr


def test_text_output_lists_the_servers_hits(registry: str, tmp_path: Path) -> None:
    expected = _api_slugs(registry, q="tiny")
    assert sorted(expected) == TINY_EXAMPLES
    rc, out, err = _search(registry, tmp_path, "tiny")
    assert rc == 0, err
    lines = out.splitlines()
    assert [line.split("  ")[0] for line in lines] == expected
    tiny = next(line for line in lines if line.startswith("tiny-cpu  "))
    assert tiny == "tiny-cpu  Tiny CPU demo (xllamacpp)  [xllamacpp; -; -]"


def test_json_output_is_the_servers_document(registry: str, tmp_path: Path) -> None:
    rc, out, err = _search(registry, tmp_path, "tiny", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert [i["slug"] for i in doc["items"]] == _api_slugs(registry, q="tiny")
    assert doc["count"] == len(TINY_EXAMPLES) and doc["ok"] is True


def test_gpu_filter_narrows_the_hits(registry: str, tmp_path: Path) -> None:
    unfiltered = _api_slugs(registry, q="DeepSeek")
    assert RTX in unfiltered and "dsv41-flash-exl3-2x" in unfiltered
    assert _api_slugs(registry, q="DeepSeek", gpu="RTX PRO 6000") == [RTX]
    rc, out, err = _search(registry, tmp_path, "DeepSeek", "--gpu", "RTX PRO 6000")
    assert rc == 0, err
    assert out.splitlines() == [
        f"{RTX}  DeepSeek-V4.1-Flash-1017 EXL3 3bpw 2x RTX PRO 6000 Engram on SSD"
        f"  [vllm; 2x RTX PRO 6000; {BEST}]"
    ]
    rc, out, err = _search(registry, tmp_path, "DeepSeek", "--gpu", "RTX PRO 6000", "--json")
    assert rc == 0 and [i["slug"] for i in json.loads(out)["items"]] == [RTX]
    rc, out, err = _search(registry, tmp_path, "tiny", "--gpu", "H200")
    assert (rc, out) == (0, "") and "no recipes found" in err


def test_no_hits_print_nothing_and_say_so(registry: str, tmp_path: Path) -> None:
    assert _api_slugs(registry, q="zebracorn") == []
    rc, out, err = _search(registry, tmp_path, "zebracorn")
    assert (rc, out) == (0, "") and err.strip() == "no recipes found"
    rc, out, err = _search(registry, tmp_path, "zebracorn", "--json")
    assert rc == 0 and json.loads(out)["items"] == [] and json.loads(out)["count"] == 0


def test_unreachable_registry_is_a_clear_error(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    rc, out, err = _search(dead, tmp_path, "tiny")
    assert rc == 6 and out == ""
    assert f"error: cannot reach the registry at {dead}" in err and "hint:" in err
    assert "Traceback" not in err
    rc, out, err = _search(dead, tmp_path, "tiny", "--json")
    doc = json.loads(out)  # with --json the error is the envelope, on stdout
    assert rc == 6 and doc["ok"] is False and doc["error"]["code"] == "unreachable"
    assert doc["error"]["message"].startswith(f"cannot reach the registry at {dead}")
