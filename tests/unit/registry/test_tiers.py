"""Tiers of speed rows from hand-made rows: replicated needs two distinct rigs within 10%; one rig, or
one report, counts once; retracted rows never count and stay in the list."""

from __future__ import annotations

from typing import Any

from lair.registry.service.tiers import MAX_SPREAD, MIN_RIGS, annotate


def _row(i: int, decode: float, rig: str, report: str, **kw: Any) -> dict[str, Any]:
    base = {"id": i, "revision": 1, "context": 2048, "concurrency": 1, "decode_tok_s": decode}
    return base | {"provenance": "verified", "rig": rig, "report_id": report, "retracted": False} | kw


def test_two_rigs_within_the_spread_replicate() -> None:
    rows = annotate([_row(1, 100.0, "rig-a", "r1"), _row(2, 105.0, "rig-b", "r2")], {"r1": ["logs/a.log"]})
    assert [r["tier"] for r in rows] == ["replicated", "replicated"]
    assert rows[0]["rigs"] == 2 and abs(rows[0]["spread"] - 5.0 / 102.5) < 1e-12  # (105 - 100) / median
    assert rows[0]["links"]["logs"] == "/reports/r1/files/logs/a.log" and "logs" not in rows[1]["links"]
    assert (MIN_RIGS, MAX_SPREAD) == (2, 0.10)


def test_rigs_that_disagree_stay_verified() -> None:
    rows = annotate([_row(1, 100.0, "rig-a", "r1"), _row(2, 120.0, "rig-b", "r2")], {})
    assert [r["tier"] for r in rows] == ["verified", "verified"]
    assert rows[0]["rigs"] == 2 and abs(rows[0]["spread"] - 20.0 / 110.0) < 1e-12


def test_the_same_rig_counts_once() -> None:
    rows = annotate([_row(1, 100.0, "rig-a", "r1"), _row(2, 101.0, "rig-a", "r2")], {})
    assert [(r["tier"], r["rigs"], r["spread"]) for r in rows] == [("verified", 1, None)] * 2


def test_retracted_rows_never_count_and_stay_listed() -> None:
    rows = annotate(
        [
            _row(1, 100.0, "rig-a", "r1"),
            _row(2, 104.0, "rig-b", "r2", retracted=True, retracted_reason="bad"),
        ],
        {},
    )
    assert [(r["id"], r["tier"], r["rigs"]) for r in rows] == [(1, "verified", 1), (2, "verified", 1)]


def test_reported_rows_are_reported_and_other_contexts_are_other_groups() -> None:
    reported = {"id": 9, "revision": 1, "context": 2048, "concurrency": 1, "decode_tok_s": 500.0}
    rows = annotate(
        [
            reported | {"provenance": "reported"},
            _row(1, 100.0, "rig-a", "r1"),
            _row(2, 100.0, "rig-b", "r2", context=4096),
        ],
        {},
    )
    assert [(r["tier"], r["rigs"]) for r in rows] == [("reported", None), ("verified", 1), ("verified", 1)]
