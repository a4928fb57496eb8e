"""``lair mcp`` against a real ``lair serve`` (granian, SQLite, the bundled examples and two uploaded
run reports of tiny-cpu), driven by the official MCP SDK's own client over both transports: stdio
(``lair mcp`` as the agent starts it) and streamable HTTP (``lair mcp --http``).

Expected answers come from the registry's JSON API read directly (httpx) and from lair's report
comparison run here on the very files uploaded; the plan of a pulled (untrusted) recipe names what it
asks for and runs nothing."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from lair.api_models import RecipeQuery
from lair.mcp_server import TOOLS
from lair.registry.db.engine import make_engine
from lair.registry.serve import prepare
from lair.registry.service.accounts import create_token, create_user
from lair.registry.service.recompute import check_cells
from lair.report.compare import compare
from lair.testing.registry import free_port, serve_process
from lair.testing.uploads import encode, report_files, tar_gz

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Seeded:
    base: str
    reports: list[str]
    results: list[dict[str, Any]]


def _verified(files: dict[str, Any], shift_ms: float) -> dict[str, Any]:
    """The report with its chunks ``shift_ms`` later and its cell as the registry recomputes it."""
    out = copy.deepcopy(files)
    for row in out["requests.jsonl"]:
        row["chunk_ms"] = [c + shift_ms for c in row["chunk_ms"]]
        row["ttft_ms"] = row["chunk_ms"][0]
    (again,), _ = check_cells(out["results.json"]["bench"], out["requests.jsonl"])
    cell = out["results.json"]["bench"]["cells"][0]
    cell.update({k: v for k, v in again.items() if k in cell})
    return out


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    db = f"sqlite:///{tmp_path_factory.mktemp('mcp') / 'registry.sqlite3'}"
    prepare(db)
    engine = make_engine(db)
    with engine.begin() as conn:
        token = create_token(conn, create_user(conn, "uploader"), "cli")
        toml, sha = conn.execute(
            sa.text(
                "SELECT v.toml, v.sha256 FROM revisions v JOIN recipes r ON r.id = v.recipe_id "
                "WHERE r.slug = 'tiny-cpu' AND v.number = 1"
            )
        ).one()
    engine.dispose()
    base_files = report_files(toml, sha)
    with serve_process(db) as base:
        ids, results = [], []
        with httpx.Client(base_url=base, headers={"authorization": f"Bearer {token}"}) as c:
            for shift in (0.0, 6.0):
                files = _verified(base_files, shift)
                r = c.post(
                    "/api/v1/reports",
                    content=tar_gz(encode(files)),
                    headers={"content-type": "application/gzip"},
                )
                assert r.status_code == 201, r.text
                ids.append(r.json()["id"])
                results.append(files["results.json"])
        yield Seeded(base, ids, results)


def _wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"lair mcp --http did not listen on {port} (exit {proc.poll()})")


def _api(seeded: Seeded, path: str) -> Any:
    r = httpx.get(seeded.base + path)
    r.raise_for_status()
    return r.json()


async def _session(server: Any, calls: list[tuple[str, dict[str, Any]]]) -> tuple[list[Any], list[Any]]:
    async with Client(server, read_timeout_seconds=60) as client:
        tools = (await client.list_tools()).tools
        results = [await client.call_tool(name, args) for name, args in calls]
    return tools, results


def _content(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    return result.structured_content  # type: ignore[no-any-return]


def _stdio(seeded: Seeded, home: Path) -> StdioServerParameters:
    env = {**os.environ, "LAIR_REGISTRY": seeded.base, "LAIR_HOME": str(home)}
    env.pop("LAIR_TOKEN", None)
    return StdioServerParameters(command=sys.executable, args=["-m", "lair", "mcp"], env=env)


def test_an_agent_over_stdio_lists_the_tools_and_gets_the_registrys_answers(
    seeded: Seeded, tmp_path: Path
) -> None:
    row = _api(seeded, "/api/v1/recipes/tiny-cpu/revisions/1.json")["measurements"]
    (target, *_) = [m for m in row if m["report_id"] == seeded.reports[0]]
    row_id = f"tiny-cpu@1#{target['id']}"
    calls: list[tuple[str, dict[str, Any]]] = [
        ("search_recipes", {"query": {"engine": "xllamacpp"}}),
        ("show_recipe", {"ref": {"slug": "tiny-cpu"}}),
        ("fit_recipe", {"query": {"slug": "tiny-cpu", "gpu": "H100", "gpus": 1}}),
        ("row_certificate", {"row": {"row_id": row_id}}),
        ("compare_reports", {"pair": {"a": seeded.reports[0], "b": seeded.reports[1]}}),
        ("search_recipes", {"query": {"limit": 1000}}),
        ("show_recipe", {"ref": {"slug": "no-such-recipe"}}),
    ]
    tools, results = asyncio.run(_session(_stdio(seeded, tmp_path), calls))

    assert tuple(t.name for t in tools) == TOOLS
    assert all(t.annotations.read_only_hint for t in tools)
    search_schema = next(t for t in tools if t.name == "search_recipes").input_schema
    assert search_schema["$defs"]["RecipeQuery"] == RecipeQuery.model_json_schema()  # the API's own model

    found, shown, fit, cert, cmp, too_many, missing = results
    expected = _api(seeded, "/api/v1/recipes?engine=xllamacpp")
    assert [i["slug"] for i in _content(found)["items"]] == [i["slug"] for i in expected["items"]]
    assert "tiny-cpu" in [i["slug"] for i in expected["items"]]

    doc = _content(shown)
    assert (
        doc["slug"] == "tiny-cpu" and doc["sha256"] == _api(seeded, "/api/v1/recipes/tiny-cpu.json")["sha256"]
    )
    assert doc["toml"] == httpx.get(seeded.base + "/api/v1/recipes/tiny-cpu.toml").text

    assert _content(fit) == _api(seeded, "/api/v1/recipes/tiny-cpu/fit?gpu=H100&gpus=1")
    decode = _content(fit)["prediction"]["decode_per_stream_tok_s"]  # fit and predict in one answer
    assert 0 < decode["low"] <= decode["expected"] <= decode["high"]

    c = _content(cert)
    assert c["id"] == target["id"] and c["tier"] == target["tier"]
    assert c["certificate"] == target["certificate"] and c["link"].endswith(
        f"/recipes/tiny-cpu#row-{target['id']}"
    )

    got = _content(cmp)
    want = compare(seeded.results[0], seeded.results[1])
    assert got["rows"] == json.loads(json.dumps(want["rows"]))
    ttft = got["rows"][0]["ttft_ms_p50"]
    assert ttft["b"] - ttft["a"] == pytest.approx(6.0)  # the second report's chunks came 6 ms later

    assert too_many.is_error and "query.limit" in too_many.content[0].text
    assert missing.is_error and "no-such-recipe" in missing.content[0].text


def test_a_pulled_recipes_plan_names_what_it_asks_for_and_runs_nothing(
    seeded: Seeded, tmp_path: Path
) -> None:
    calls = [("plan_recipe", {"ref": {"slug": "tiny-cpu", "revision": 1}})]
    _, (plan,) = asyncio.run(_session(_stdio(seeded, tmp_path), calls))
    out = _content(plan)
    assert out["recipe"] == "tiny-cpu@1" and out["planned"] is False and out["trusted"] is False
    assert any("make_tiny_model" in line for line in out["asks_for"])  # its hook script, shown, not run
    assert out["consent"] == "a person reads and accepts it: lair pull tiny-cpu@1 && lair plan tiny-cpu.toml"
    journal = subprocess.run(
        [sys.executable, "-m", "lair", "status", "--all", "--json"],
        env={**os.environ, "LAIR_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(journal.stdout) == []  # no run was ever started


def test_an_agent_over_streamable_http(seeded: Seeded, tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "lair", "mcp", "--http", "--port", str(port), "--registry", seeded.base],
        env={**os.environ, "LAIR_HOME": str(tmp_path)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        close_fds=True,
        start_new_session=True,
    )
    try:
        _wait_port(port, proc)
        calls = [("search_recipes", {"query": {"q": "tiny", "engine": "xllamacpp"}})]
        tools, (found,) = asyncio.run(_session(f"http://127.0.0.1:{port}/mcp", calls))
    finally:
        proc.terminate()
        proc.wait(30)
    assert tuple(t.name for t in tools) == TOOLS
    expected = _api(seeded, "/api/v1/recipes?q=tiny&engine=xllamacpp")
    assert [i["slug"] for i in _content(found)["items"]] == [i["slug"] for i in expected["items"]] != []
