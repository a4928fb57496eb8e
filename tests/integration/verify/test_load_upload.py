"""Open-loop load cells through the real app over SQLite and PostgreSQL: reports that ``lair bench
--rate/--sweep --recipe`` wrote against the calibrated server are recomputed by the registry from
their ``load.jsonl``, stored apart from the speed rows and shown on the recipe page (a table per
context, the sweep's headline, the throughput-vs-latency chart). Figures are checked against the
rows by hand (achieved rate, completed requests, output tokens per second, Little's law). Tampered
reports (a faster claim, a row dropped, a schedule that was not the seed's, a rate raised after the
fact) are refused with the cell named and leave nothing stored; a server that repeats one token gets
its cells stored as reported-by-report, never verified."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient
from verify_helpers import tiny_copy

from lair.cli import main
from lair.client import pack_report
from lair.testing.calibrated_server import running_server

pytestmark = [pytest.mark.integration]

SERVER = ("--ttft-ms", "20", "--token-ms", "4")
SWEEP = ["--sweep", "--rate", "8", "--rate-requests", "16", "--max-requests", "48", "--seed", "5"]
SWEEP += ["--slo", "ttft_p99<=2s", "--user-speed", "20"]


def _bench(where: Path, name: str, server: tuple[str, ...], *args: str) -> Path:
    recipe, out = tiny_copy(where / name), where / name / "report"
    with running_server(*server) as url:
        argv = ["bench", url, "--recipe", str(recipe), "--contexts", "64", "--decode-tokens", "8"]
        assert main([*argv, "--out", str(out), *args]) == 0
    return out


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory, lair_home: Path) -> Path:
    return _bench(tmp_path_factory.mktemp("load"), "swept", SERVER, *SWEEP)


@pytest.fixture(scope="module")
def repeating(tmp_path_factory: pytest.TempPathFactory, lair_home: Path) -> Path:
    where = tmp_path_factory.mktemp("load-repeat")
    return _bench(where, "repeat", (*SERVER, "--output", "repeat"), "--rate", "8", "--rate-requests", "12")


def _post(c: TestClient, folder: Path) -> Any:
    return c.post(
        "/api/v1/reports", content=pack_report(folder), headers={"content-type": "application/gzip"}
    )


def _stored(site: Any) -> tuple[int, int]:
    with site[1].connect() as conn:
        reports = conn.execute(sa.text("SELECT count(*) FROM reports")).scalar_one()
        load = conn.execute(sa.text("SELECT count(*) FROM load_measurements")).scalar_one()
    return reports, load


def _rows(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (folder / "load.jsonl").read_text().splitlines()]


def _by_hand(rows: list[dict[str, Any]]) -> dict[str, float]:
    """A cell's figures from its rows, written out here: sends (n - 1) over the send span, output
    tokens over first send to last end, and Little's law (time in the system over that span)."""
    sends = sorted(r["send_ms"] for r in rows)
    end = max(r["send_ms"] + r["done_ms"] for r in rows)
    span = (end - sends[0]) / 1000
    return {
        "achieved_rate": (len(sends) - 1) / ((sends[-1] - sends[0]) / 1000),
        "output_tok_s": sum(r["completion_tokens"] for r in rows) / span,
        "users": sum(r["done_ms"] for r in rows) / 1000 / span,
    }


def test_a_sweep_is_recomputed_stored_and_shown_apart_from_the_speed_rows(site: Any, swept: Path) -> None:
    c = site[0]
    r = _post(c, swept)
    assert r.status_code == 201, r.text
    doc, rows = r.json(), _rows(swept)
    assert doc["rows"] == []  # an open-loop run alone: no speed row
    cells = [x for x in doc["load"] if x["kind"] == "rate"]
    (sweep,) = [x for x in doc["load"] if x["kind"] == "sweep"]
    assert [x["offered_rate"] for x in cells] == [8.0, 16.0, 32.0]
    for step, cell in enumerate(cells):
        mine = [x for x in rows if x["step"] == step]
        hand = _by_hand(mine)
        fig = cell["figures"]
        assert (fig["requests"], fig["completed"], cell["provenance"]) == (16, 16, "verified")
        assert fig["achieved_rate"] == pytest.approx(hand["achieved_rate"], rel=1e-9)
        assert fig["output_tok_s"] == pytest.approx(hand["output_tok_s"], rel=1e-9)
    users = max(_by_hand([x for x in rows if x["step"] == s])["users"] for s in range(3))
    assert sweep["figures"]["users"]["users"] == pytest.approx(users, abs=1e-3)
    assert sweep["figures"]["stopped"] == "the request budget (--max-requests 48) is spent"
    twin = c.get("/recipes/tiny-cpu.json").json()
    (run,) = twin["load"]
    assert run["report_id"] == doc["id"] and [g["context"] for g in run["contexts"]] == [64]
    assert [x["offered_rate"] for x in run["contexts"][0]["cells"]] == [8.0, 16.0, 32.0]
    assert twin["measurements"] == [m for m in twin["measurements"] if m["provenance"] == "reported"]
    page = c.get("/recipes/tiny-cpu").text
    part = page[page.index('data-part="load"') :]
    assert part.count('<tr data-rate="') == 3 and 'data-tier="verified"' in part
    assert f"{sweep['figures']['users']['users']:.1f} users at 20 tok/s each" in part
    assert "latency by throughput" in part and "<svg" in part
    assert f'href="/reports/{doc["id"]}/files/load.jsonl"' in part
    assert c.get(f"/reports/{doc['id']}/files/load.jsonl").content == (swept / "load.jsonl").read_bytes()
    assert _stored(site) == (1, 4)
    assert _post(c, swept).status_code == 409  # the same rows again: a duplicate


def _tampered(src: Path, where: Path, change: Any) -> Path:
    out = where / "tampered"
    shutil.copytree(src, out)
    results, rows = json.loads((out / "results.json").read_text()), _rows(out)
    change(results["bench"]["load"], rows)
    (out / "results.json").write_text(json.dumps(results))
    (out / "load.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    return out


def _faster(load: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    load["cells"][1]["output_tok_s"] *= 1.5


def _dropped(load: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    rows.remove(next(x for x in rows if x["step"] == 0 and x["index"] == 3))


def _reshuffled(load: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """An even schedule passed off as the seed's Poisson draws."""
    for x in rows:
        if x["step"] == 2:
            shift = x["index"] * 1000 / 32 - x["scheduled_ms"]
            x["scheduled_ms"] += shift
            x["send_ms"] += shift


def _raised(load: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """The first cell's rate doubled after the fact, in the claim and in its rows."""
    load["cells"][0]["offered_rate"] = 16.0
    for x in rows:
        if x["step"] == 0:
            x["rate"] = 16.0


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (_faster, "load cell ctx 64 @ 16/s: output_tok_s"),
        (_dropped, "load cell ctx 64 @ 8/s: load.jsonl rows are not indices 0..14 in order"),
        (_reshuffled, "load cell ctx 64 @ 32/s request 1: scheduled_ms"),
        (_raised, "load cell ctx 64 @ 16/s request 1: scheduled_ms"),
    ],
    ids=["faster", "dropped", "reshuffled", "raised"],
)
def test_a_tampered_load_report_is_refused_with_its_cell_and_nothing_is_stored(
    site: Any, swept: Path, tmp_path: Path, change: Any, reason: str
) -> None:
    r = _post(site[0], _tampered(swept, tmp_path, change))
    assert r.status_code == 422, r.text
    reasons = r.json()["error"]["reasons"]
    assert any(x.startswith(reason) for x in reasons), reasons
    assert _stored(site) == (0, 0)


def test_cells_whose_answers_repeat_one_token_are_stored_but_never_verified(
    site: Any, repeating: Path
) -> None:
    results = json.loads((repeating / "results.json").read_text())
    (cell,) = results["bench"]["load"]["cells"]
    assert "invalid-output" in cell["flags"]  # the client's gate saw it
    r = _post(site[0], repeating)
    assert r.status_code == 201, r.text
    (stored,) = r.json()["load"]
    assert stored["provenance"] == "reported-by-report" and "invalid-output" in stored["flags"]
    assert stored["note"].startswith("invalid-output")
    assert stored["figures"]["failures"] == {"invalid-output": 12} and stored["figures"]["completed"] == 0
    page = site[0].get("/recipes/tiny-cpu").text
    part = page[page.index('data-part="load"') :]
    assert 'data-tier="reported-by-report"' in part and 'data-tier="verified"' not in part
