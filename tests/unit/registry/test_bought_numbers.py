"""Numbers that cannot be bought with two accounts: the attacks of a forger with free accounts, each
through the real upload route on SQLite and PostgreSQL, and what now holds against it.

Reports are made up by a forger's script (:func:`lair.testing.forged_reports.made_up_report`: raw timings that
agree with their cells, a clean certificate). Speeds are shares of the H100 SXM's decode ceiling for
Llama 3.1 8B at 2K, computed by hand in test_verified_physics (219.3 tok/s per stream); the power
figures are the catalog's H100 SXM spec sheet TDP (700 W) and idle floor (20 W)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest
import sqlalchemy as sa
from registry_paths import LLAMA
from sqlalchemy import Engine
from starlette.testclient import TestClient
from test_verified_physics import H100, H100_CEILING, LLAMA_SLUG, World, _report

from lair.registry.db.schema import User
from lair.registry.service.accounts import create_token, create_user
from lair.registry.service.attempts import ATTEMPT_UNVERIFIED, OWN_ACCOUNT, OWN_RIG, ROW_UNVERIFIED
from lair.registry.service.bounds import POWER_MARGIN
from lair.registry.service.publish import publish, seed_examples
from lair.registry.web.app import create_app
from lair.registry.web.auth import reset_limits
from lair.testing.registry import tgz

H100_TDP_W, H100_IDLE_W = 700.0, 20.0  # the catalog's figures (spec sheet: up to 700 W)
USERS = cast(sa.Table, User.__table__)
CPUS = {"alice": "AMD EPYC 9654", "bob": "AMD EPYC 7763", "carol": "Intel(R) Xeon(R) Platinum 8480+"}


@pytest.fixture
def world(engine: Engine, db_url: str, tmp_path: Path) -> Iterator[World]:
    reset_limits()
    with engine.begin() as conn:
        seed_examples(conn)
        publish(conn, LLAMA.read_text(), owner="tester")
        tokens = {who: create_token(conn, create_user(conn, who), "cli") for who in CPUS}
    with TestClient(create_app(db_url, blobs=str(tmp_path / "blobs")), raise_server_exceptions=False) as c:
        yield World(c, engine, tokens)


def _post(w: World, files: dict[str, bytes], who: str, replicates: str | None = None) -> dict[str, Any]:
    reset_limits()
    headers = {"authorization": f"Bearer {w.tokens[who]}", "content-type": "application/gzip"}
    params = {"replicates": replicates} if replicates else None
    r = w.client.post("/api/v1/reports", content=tgz(files), headers=headers, params=params)
    assert r.status_code == 201, r.text
    return dict(r.json())


def _h100(
    w: World, who: str, share: float, *, rig: str | None = None, name: str = "", **kw: Any
) -> dict[str, bytes]:
    """A forged H100 report of ``who`` (on ``rig``'s CPU: its rig fingerprint) at ``share`` of the ceiling."""
    cpu = CPUS[rig or who]
    run = name or f"{who}-{cpu}-{share}"
    return _report(
        w,
        LLAMA_SLUG,
        share * H100_CEILING,
        H100,
        contexts=(2048,),
        ttft_ms=100.0,
        cpu_model=cpu,
        run_name=run,
        **kw,
    )


def _rows(w: World) -> dict[str, dict[str, Any]]:
    """The recipe's report rows by their report id."""
    doc = w.client.get(f"/api/v1/recipes/{LLAMA_SLUG}.json").json()
    return {m["report_id"]: m for m in doc["measurements"] if m["report_id"]}


def _established(w: World, who: str) -> None:
    """Make ``who`` an account of 30 days with a report filed before (a tiny-cpu run)."""
    with w.engine.begin() as conn:
        conn.execute(
            sa.update(USERS)
            .where(USERS.c.name == who)
            .values(created_at=datetime.now(UTC) - timedelta(days=30))
        )
    _post(w, _report(w, "tiny-cpu", 1000.0, None, run_name=f"{who}-history"), who)


def test_a_forged_h100_row_and_a_second_free_account_s_replication_are_shown_as_new_accounts(
    world: World,
) -> None:
    a = _post(world, _h100(world, "alice", 0.90), "alice")
    b = _post(world, _h100(world, "bob", 0.92), "bob")  # spread (0.92 - 0.90) / 0.91 = 2.2%: they agree
    rows = _rows(world)
    for rep in (a, b):
        row = rows[rep["id"]]
        assert (row["tier"], row["accounts"], row["filer_new"]) == ("replicated", 2, True)
        assert (row["new_accounts"], row["new_account_replication"]) == (2, True)
    page = world.client.get(f"/recipes/{LLAMA_SLUG}").text
    assert (
        page.count(
            '<strong class="new-accounts" data-new-accounts="2">replicated with 2 new accounts</strong>'
        )
        == 2
    )


def test_two_established_accounts_replicate_without_the_flag(world: World) -> None:
    for who in ("alice", "bob"):
        _established(world, who)
    a = _post(world, _h100(world, "alice", 0.90), "alice")
    _post(world, _h100(world, "bob", 0.92), "bob")
    row = _rows(world)[a["id"]]
    assert (row["tier"], row["filer_new"], row["new_accounts"], row["new_account_replication"]) == (
        "replicated", False, 0, False,
    )  # fmt: skip
    assert "new-accounts" not in world.client.get(f"/recipes/{LLAMA_SLUG}").text


def test_an_attempt_on_one_s_own_row_or_from_its_rig_never_counts(world: World) -> None:
    row_rep = _post(world, _h100(world, "alice", 0.90), "alice")
    rid = _rows(world)[row_rep["id"]]["row_id"]
    own = _post(world, _h100(world, "alice", 0.91, rig="carol", name="alice-again"), "alice", rid)
    same_rig = _post(world, _h100(world, "bob", 0.91, rig="alice", name="bob-on-alice-rig"), "bob", rid)
    for rep, why in ((own, OWN_ACCOUNT), (same_rig, OWN_RIG)):
        (link,) = rep["replication"]
        assert (link["outcome"], link["counted"], link["not_counted"]) == ("replicated", False, why)
    rep = _rows(world)[row_rep["id"]]["replication"]
    assert (rep["status"], rep["replicated"], rep["not_counted"]) == ("pending", 0, 2)
    assert [(x["submitted_by"], x["not_counted"]) for x in rep["attempts"]] == [
        ("alice", OWN_ACCOUNT),
        ("bob", OWN_RIG),
    ]
    page = world.client.get(f"/recipes/{LLAMA_SLUG}").text
    assert f"(not counted: {OWN_ACCOUNT})" in page and f"(not counted: {OWN_RIG})" in page
    assert "replication: pending (no attempt that counts yet)" in page
    other = _post(world, _h100(world, "carol", 0.91, name="carol-elsewhere"), "carol", rid)
    assert other["replication"][0]["counted"] is True
    rep = _rows(world)[row_rep["id"]]["replication"]
    assert (rep["status"], rep["replicated"], rep["replicated_by_new_accounts"]) == ("replicated", 1, 1)


def _matrix_cells(w: World) -> list[dict[str, Any]]:
    m = w.client.get(f"/recipes/{LLAMA_SLUG}/matrix.json", params={"unchecked": 1}).json()
    return [c for row in m["matrix"]["rows"] for c in row["cells"] if c]


def test_a_forged_slow_attempt_marks_nothing_unless_it_is_verified(world: World) -> None:
    row_rep = _post(world, _h100(world, "alice", 0.90), "alice")
    rid = _rows(world)[row_rep["id"]]["row_id"]
    slow_cpu = _report(world, LLAMA_SLUG, 0.3 * H100_CEILING, None, contexts=(2048,), ttft_ms=100.0,
                       cpu_model=CPUS["bob"], run_name="bob-slow")  # fmt: skip  # no GPU: not verified
    (link,) = _post(world, slow_cpu, "bob", rid)["replication"]
    assert (link["outcome"], link["counted"]) == ("not-reproduced", False)
    rep = _rows(world)[row_rep["id"]]["replication"]
    assert rep["status"] == "pending"
    assert (
        rep["attempts"][0]["not_counted"]
        == f"{ATTEMPT_UNVERIFIED}: no roofline: the fingerprint names no GPU"
    )
    assert [c["status"] for c in _matrix_cells(world)] == ["pass", "pass"]  # the CPU column and the H100 one
    slow = _post(
        world, _h100(world, "carol", 0.30), "carol", rid
    )  # verified: a slow run is physically possible
    rep = _rows(world)[row_rep["id"]]["replication"]
    assert (rep["status"], rep["not_reproduced"]) == ("not-reproduced", 1)
    (counted,) = [x for x in rep["attempts"] if x["counted"]]
    assert (counted["submitted_by"], counted["account"]["new"]) == ("carol", True)
    assert counted["account"]["why"] == "an account 0.0 days old, nothing filed before when it filed"
    page = world.client.get(f"/recipes/{LLAMA_SLUG}").text
    assert (
        'data-counted="yes" data-new-account="yes"><strong>not reproduced here</strong> on 1x NVIDIA H100'
        in page
    )
    assert f'by carol <span class="new-account">(new account: {counted["account"]["why"]})</span>' in page
    (fail,) = [c for c in _matrix_cells(world) if c["status"] == "fail"]
    attempt_row = _rows(world)[slow["id"]]
    assert fail["failed_by"] == [
        {
            "row": int(rid.split("#")[1]),
            "submitted_by": "carol",
            "new_account": True,
            "attempt_row_id": attempt_row["row_id"],
        }
    ]
    page = world.client.get(f"/recipes/{LLAMA_SLUG}/matrix").text
    assert (
        f"({attempt_row['row_id']} did not reproduce row {rid.split('#')[1]}; filed by carol, a new account)"
        in page
    )


def test_repeats_at_5_200_and_20000_tok_s_are_not_verified_and_their_band_counts_nothing(
    world: World,
) -> None:
    speeds = (5.0, 200.0, 20_000.0)  # the median, 200 tok/s, is 91% of the ceiling; 20,000 is 9,120%
    files = _report(world, LLAMA_SLUG, 200.0, H100, contexts=(2048,), ttft_ms=100.0, cpu_model=CPUS["alice"],
                    run_name="wide", repeat_speeds=speeds)  # fmt: skip
    rep = _post(world, files, "alice")
    (row,) = rep["rows"]
    assert row["provenance"] == "reported-by-report"
    over = re.search(
        r"repeat 2: above 100% of the roofline \(decode 20,000\.0 tok/s > ceiling ([0-9,.]+)\)", row["note"]
    )
    assert over and abs(float(over.group(1).replace(",", "")) - H100_CEILING) / H100_CEILING < 0.005
    # (max - min) / median = (20,000 - 5) / 200 = 99.975
    assert "its repeats' decode tok/s (5.0, 200.0, 20,000.0) spread by 9998% of their median" in row["note"]
    rid = _rows(world)[rep["id"]]["row_id"]
    (link,) = _post(world, _h100(world, "bob", 0.3 * 200 / H100_CEILING), "bob", rid)["replication"]  # -70%
    assert (link["outcome"], link["counted"], link["not_counted"]) == ("replicated", False, ROW_UNVERIFIED)
    assert _rows(world)[rep["id"]]["replication"]["status"] == "pending"


def test_repeats_that_spread_past_the_limit_are_not_verified(world: World) -> None:
    files = _report(world, LLAMA_SLUG, 200.0, H100, contexts=(2048,), ttft_ms=100.0, run_name="spread",
                    repeat_speeds=(150.0, 200.0, 210.0))  # fmt: skip
    (row,) = _post(world, files, "alice")["rows"]
    assert row["provenance"] == "reported-by-report"  # (210 - 150) / 200 = 30% > 25%, all under the ceiling
    assert row["note"].startswith(
        "cell ctx 2048 x1: its repeats' decode tok/s (150.0, 200.0, 210.0) spread by 30%"
    )
    assert "roofline" not in row["note"]


def test_a_verified_row_s_band_turns_a_70_percent_slower_attempt_away(world: World) -> None:
    files = _report(world, LLAMA_SLUG, 200.0, H100, contexts=(2048,), ttft_ms=100.0, cpu_model=CPUS["alice"],
                    run_name="tight", repeat_speeds=(180.0, 200.0, 210.0))  # fmt: skip  # spread 15%
    rep = _post(world, files, "alice")
    assert rep["rows"][0]["provenance"] == "verified"
    rid = _rows(world)[rep["id"]]["row_id"]
    (link,) = _post(world, _h100(world, "bob", 0.3 * 200 / H100_CEILING), "bob", rid)["replication"]
    decode = next(f for f in link["figures"] if f["metric"] == "decode_tok_s")
    assert decode["band"]["low"] == pytest.approx(180.0 * 0.95, rel=1e-3)  # the slowest repeat less 5%
    assert (link["outcome"], link["counted"]) == ("not-reproduced", True)


def _energy(files: dict[str, bytes], **figures: Any) -> dict[str, bytes]:
    doc = json.loads(files["results.json"])
    doc["bench"]["cells"][0]["certificate"]["energy"] |= figures
    return files | {"results.json": json.dumps(doc).encode()}


CEILING_W = H100_TDP_W * (1 + POWER_MARGIN)  # 770 W


@pytest.mark.parametrize(
    ("figures", "why"),
    [
        (
            {"j_per_output_token": 0.0, "avg_w": 0.0, "peak_w": 0.0},
            "avg_w is 0.0: a GPU that ran the cell spent energy",
        ),
        (
            {"avg_w": 1e12, "peak_w": 1e12},
            f"average power 1e+12 W is above {CEILING_W:,.0f} W, the TDP (+10%) of 1x NVIDIA H100 SXM",
        ),
        (
            {"avg_w": 5.0, "peak_w": 6.0},
            f"average power 5 W is below {H100_IDLE_W:,.0f} W, the idle floor of 1x NVIDIA H100 SXM",
        ),
        ({"j_per_output_token": 1e-6}, f"W is below {H100_IDLE_W:,.0f} W, the idle floor"),
        ({"usd_per_mtok": {"energy": 0.0, "hardware": None, "total": 0.0}}, "usd_per_mtok.energy is 0.0"),
    ],
    ids=["zero", "1e12-w", "under-idle", "j-per-token-under-idle", "zero-dollars"],
)
def test_impossible_energy_is_never_verified(world: World, figures: dict[str, Any], why: str) -> None:
    (row,) = _post(world, _energy(_h100(world, "alice", 0.9), **figures), "alice")["rows"]
    assert row["provenance"] == "reported-by-report" and why in row["note"], row["note"]
    (shown,) = _rows(world).values()
    assert shown["tier"] == "reported-by-report"
    assert shown["cost"]["usd_per_mtok_energy"] is None and shown["cost"]["why_none"].startswith(
        "not verified"
    )


def test_the_forger_s_honest_watts_are_verified(world: World) -> None:
    """The control: 300 W over the cell's own spans (the made-up report's figure) is inside 20..770 W."""
    (row,) = _post(world, _h100(world, "alice", 0.9), "alice")["rows"]
    assert (row["provenance"], row["note"]) == ("verified", "")
    (shown,) = _rows(world).values()
    assert shown["cost"]["usd_per_mtok_energy"] > 0


def test_the_new_account_age_is_a_setting_of_days() -> None:
    from lair.errors import ConfigError
    from lair.registry.settings import Settings

    assert Settings.from_env({}).new_account_days == 7.0
    assert Settings.from_env({"LAIR_REGISTRY_NEW_ACCOUNT_DAYS": "30"}).new_account_days == 30.0
    for bad in ("-1", "a week", "nan"):
        with pytest.raises(ConfigError, match="LAIR_REGISTRY_NEW_ACCOUNT_DAYS"):
            Settings.from_env({"LAIR_REGISTRY_NEW_ACCOUNT_DAYS": bad})


def test_an_account_with_history_is_new_only_while_younger_than_the_setting(
    world: World, engine: Engine, db_url: str, tmp_path: Path
) -> None:
    """bob, a day old with a report behind him: new under the default 7 days, not under a setting of 0."""
    from lair.registry.settings import Settings

    with engine.begin() as conn:
        conn.execute(
            sa.update(USERS)
            .where(USERS.c.name == "bob")
            .values(created_at=datetime.now(UTC) - timedelta(days=1))
        )
    _post(world, _report(world, "tiny-cpu", 1000.0, None, run_name="bob-history"), "bob")
    first = _post(world, _h100(world, "bob", 0.9), "bob")
    app = create_app(db_url, settings=Settings(new_account_days=0.0), blobs=str(tmp_path / "blobs"))
    with TestClient(app, raise_server_exceptions=False) as c:
        w0 = World(c, engine, world.tokens)
        second = _post(w0, _h100(w0, "bob", 0.91, name="bob-again"), "bob")
    rows = _rows(world)
    assert (rows[first["id"]]["filer_new"], rows[second["id"]]["filer_new"]) == (True, False)


def test_the_power_bounds_of_several_gpus_are_worked_by_hand() -> None:
    """8 H100s of which the telemetry sampled 4: the floor is 4 x 20 W = 80 W (the GPUs sampled draw at
    least idle), the ceiling 8 x 700 W x 1.1 = 6,160 W; a forged count of 99 sampled is held to the 8."""
    from lair.fit import find_device_by_smi_name
    from lair.registry.service.bounds import power_of, spread

    h100 = find_device_by_smi_name("NVIDIA H100 80GB HBM3")
    assert h100 is not None
    p = power_of(h100, 8, 4)
    assert p is not None and (p.floor, p.ceiling) == (80.0, pytest.approx(6160.0))
    assert power_of(h100, 8, 99).floor == 160.0  # type: ignore[union-attr]
    assert power_of(h100, 8, None).floor == 20.0  # type: ignore[union-attr]  # no count: one GPU
    assert spread([180.0, 200.0, 210.0]) == pytest.approx(30 / 200) and spread([200.0]) is None
