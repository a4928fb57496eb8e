"""Tiers of speed rows from hand-made rows: replicated needs two accounts on two distinct rigs within
10%; one rig, or one report, counts once; one account never replicates itself, whatever fingerprints
it sends; reported-by-report rows keep their tier and never count; retracted rows never count and stay
in the list."""

from __future__ import annotations

from typing import Any

from lair.registry.service.tiers import MAX_SPREAD, MIN_ACCOUNTS, MIN_RIGS, annotate


def _row(i: int, decode: float, rig: str, report: str, **kw: Any) -> dict[str, Any]:
    """A verified row; its account is the rig's owner unless ``submitted_by`` says otherwise."""
    base = {"id": i, "revision": 1, "context": 2048, "concurrency": 1, "decode_tok_s": decode}
    base |= {"submitted_by": f"owner-of-{rig}"}
    return base | {"provenance": "verified", "rig": rig, "report_id": report, "retracted": False} | kw


def test_two_rigs_within_the_spread_replicate() -> None:
    rows = annotate([_row(1, 100.0, "rig-a", "r1"), _row(2, 105.0, "rig-b", "r2")], {"r1": ["logs/a.log"]})
    assert [r["tier"] for r in rows] == ["replicated", "replicated"]
    assert rows[0]["rigs"] == 2 and abs(rows[0]["spread"] - 5.0 / 102.5) < 1e-12  # (105 - 100) / median
    assert rows[0]["links"]["logs"] == "/reports/r1/files/logs/a.log" and "logs" not in rows[1]["links"]
    assert rows[0]["accounts"] == 2
    assert (MIN_RIGS, MIN_ACCOUNTS, MAX_SPREAD) == (2, 2, 0.10)


def test_one_account_on_two_rigs_never_replicates_itself() -> None:
    rows = annotate(
        [
            _row(1, 100.0, "rig-a", "r1", submitted_by="alice"),
            _row(2, 101.0, "rig-b", "r2", submitted_by="alice"),
            _row(3, 100.5, "rig-c", "r3", submitted_by="alice"),
        ],
        {},
    )
    assert [(r["tier"], r["rigs"], r["accounts"]) for r in rows] == [("verified", 3, 1)] * 3


def test_two_accounts_on_one_rig_do_not_replicate_but_a_second_rig_does() -> None:
    same_rig = [
        _row(1, 100.0, "rig-a", "r1", submitted_by="alice"),
        _row(2, 101.0, "rig-a", "r2", submitted_by="bob"),
    ]
    assert [(r["tier"], r["rigs"], r["accounts"]) for r in annotate(same_rig, {})] == [("verified", 1, 2)] * 2
    # bob on his own rig: bob's rig-b row and alice's rig-a row are two accounts on two rigs
    rows = annotate([*same_rig, _row(3, 102.0, "rig-b", "r3", submitted_by="bob")], {})
    assert [(r["tier"], r["rigs"], r["accounts"]) for r in rows] == [("replicated", 2, 2)] * 3


def test_rows_without_a_submitter_are_one_unknown_account() -> None:
    rows = annotate(
        [
            _row(1, 100.0, "rig-a", "r1", submitted_by=None),
            _row(2, 100.0, "rig-b", "r2", submitted_by=None),
        ],
        {},
    )
    assert [(r["tier"], r["accounts"]) for r in rows] == [("verified", 1)] * 2


def test_reported_by_report_rows_keep_their_tier_and_never_count() -> None:
    unchecked = {"provenance": "reported-by-report", "note": "no roofline: the fingerprint names no GPU"}
    rows = annotate(
        [
            _row(1, 100.0, "rig-a", "r1", submitted_by="alice"),
            _row(2, 100.0, "rig-b", "r2", submitted_by="bob", **unchecked),
        ],
        {"r2": ["logs/engine.log"]},
    )
    assert [(r["tier"], r["rigs"]) for r in rows] == [("verified", 1), ("reported-by-report", None)]
    assert rows[1]["note"] == unchecked["note"]
    assert rows[1]["links"]["raw_timings"] == "/reports/r2/files/requests.jsonl"  # it is from a report


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
