"""Which rows of a group are independent evidence (lair.replication.evidence), with hand-built rows:
the one rule behind the registry's speed tiers and quality tiers."""

from __future__ import annotations

from typing import Any

from lair.registry.service.quality_rows import annotate_quality
from lair.registry.service.tiers import annotate
from lair.replication import Evidence, evidence


def _row(i: int, by: str | None, rig: str | None, v: float | None, **kw: Any) -> dict[str, Any]:
    return {"id": i, "submitted_by": by, "rig": rig, "report_id": f"r{i}", "v": v} | kw


def test_each_rig_counts_once_with_all_its_values() -> None:
    rows = [_row(1, "ann", "A", 10.0), _row(2, "ann", "A", 12.0), _row(3, "bob", "B", 11.0)]
    assert evidence(rows, "v") == Evidence({"A": [10.0, 12.0], "B": [11.0]}, {"ann": False, "bob": False})


def test_one_account_on_two_rigs_is_not_enough() -> None:
    ev = evidence([_row(1, "ann", "A", 10.0), _row(2, "ann", "B", 10.0)], "v")
    assert (ev.rigs, ev.accounts, ev.enough) == (2, 1, False)


def test_two_accounts_on_one_rig_are_not_enough() -> None:
    ev = evidence([_row(1, "ann", "A", 10.0), _row(2, "bob", "A", 10.0)], "v")
    assert (ev.rigs, ev.accounts, ev.enough) == (1, 2, False)


def test_two_accounts_on_two_rigs_are_enough() -> None:
    ev = evidence([_row(1, "ann", "A", 10.0), _row(2, "bob", "B", 10.0)], "v")
    assert (ev.rigs, ev.accounts, ev.enough) == (2, 2, True)


def test_a_rig_is_its_fingerprint_else_its_report_else_the_row() -> None:
    rows = [_row(1, "ann", None, 1.0), _row(2, "bob", None, 2.0, report_id=None), _row(3, "cy", "F", 3.0)]
    assert evidence(rows, "v").per_rig == {"r1": [1.0], "2": [2.0], "F": [3.0]}


def test_rows_with_no_submitter_are_one_unknown_account() -> None:
    ev = evidence([_row(1, None, "A", 1.0), _row(2, "", "B", 1.0)], "v")
    assert ev.new == {"?": False}


def test_rows_without_the_value_are_no_evidence() -> None:
    ev = evidence([_row(1, "ann", "A", None), _row(2, "bob", "B", 5.0)], "v")
    assert (ev.per_rig, ev.new) == ({"B": [5.0]}, {"bob": False})


def test_an_account_is_new_only_when_all_its_rows_were_filed_new() -> None:
    rows = [_row(1, "ann", "A", 1.0, filer_new=True), _row(2, "ann", "B", 1.0, filer_new=False)]
    rows += [_row(3, "bob", "C", 1.0, filer_new=True), _row(4, "cy", "D", 1.0)]
    ev = evidence(rows, "v")
    assert (ev.new, ev.new_accounts) == ({"ann": False, "bob": True, "cy": False}, 1)


def _speed(i: int, by: str, rig: str, tok_s: float) -> dict[str, Any]:
    return {"id": i, "revision": 1, "context": 4096, "concurrency": 1, "provenance": "verified"} | {
        "report_id": f"r{i}",
        "submitted_by": by,
        "rig": rig,
        "decode_tok_s": tok_s,
        "filer_new": False,
    }


def _quality(i: int, by: str, rig: str, score: float) -> dict[str, Any]:
    return {"id": i, "revision": 1, "suite": "gsm8k", "metric": "em", "n": 50, "provenance": "verified"} | {
        "report_id": f"r{i}",
        "submitted_by": by,
        "rig": rig,
        "score": score,
        "retracted": False,
    }


def test_speed_and_quality_tiers_count_the_same_evidence() -> None:
    """The same four placements (one account on two rigs; two accounts on one rig; two on two) give
    the same verdict for speed rows and quality rows whose values agree."""
    cases = [(("ann", "A"), ("ann", "B"), "verified"), (("ann", "A"), ("bob", "A"), "verified")]
    cases += [(("ann", "A"), ("bob", "B"), "replicated")]
    for (by1, rig1), (by2, rig2), want in cases:
        speed = annotate([_speed(1, by1, rig1, 100.0), _speed(2, by2, rig2, 101.0)], {})
        quality = annotate_quality([_quality(1, by1, rig1, 80.0), _quality(2, by2, rig2, 81.0)])
        assert [r["tier"] for r in speed] == [want, want]
        assert [r["tier"] for r in quality] == [want, want]
        assert speed[0]["rigs"] == quality[0]["rigs"] == len({rig1, rig2})
