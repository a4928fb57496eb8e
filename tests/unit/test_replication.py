"""The replication rule (lair.replication) and the pure parts of ``lair reproduce`` / ``lair rebench``:
references, the noise band and verdict by hand, the fit that stops a launch, rebench's choice."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from lair.cli._reproduce import Options, Theirs, check_fit, pin_image
from lair.cli.reproduce_cmds import parse_since, rebench_plan
from lair.errors import ConfigError, FitError
from lair.recipe import load_recipe
from lair.replication import RecipeRef, RowRef, band, compare, parse_ref, parse_row_id, verdict

ROOT = Path(__file__).resolve().parents[2]
BIG = ROOT / "examples" / "dsv41-1017-engram-ssd" / "recipe.toml"
TINY = ROOT / "examples" / "tiny-cpu" / "recipe.toml"


@pytest.mark.parametrize(
    ("ref", "want"),
    [
        ("tiny-cpu", RecipeRef(None, "tiny-cpu")),
        ("tiny-cpu@3", RecipeRef(None, "tiny-cpu", 3)),
        ("tiny-cpu@3#42", RecipeRef(None, "tiny-cpu", 3, 42)),
        ("tiny-cpu#row-42", RecipeRef(None, "tiny-cpu", None, 42)),
        ("tiny-cpu@1#report-9a8949bc267a56b3", RecipeRef(None, "tiny-cpu", 1, None, "9a8949bc267a56b3")),
        ("https://r.example/recipes/tiny-cpu#42", RecipeRef("https://r.example", "tiny-cpu", None, 42)),
        (
            "http://h:8780/sub/recipes/tiny-cpu/revisions/2#7",
            RecipeRef("http://h:8780/sub", "tiny-cpu", 2, 7),
        ),
    ],
)
def test_references(ref: str, want: RecipeRef) -> None:
    assert parse_ref(ref) == want


@pytest.mark.parametrize(
    "ref", ["Tiny CPU", "tiny-cpu@x", "tiny-cpu#abc", "https://r.example/nothing", "a@0"]
)
def test_bad_references_are_config_errors(ref: str) -> None:
    with pytest.raises(ConfigError):
        parse_ref(ref)


def test_row_ids_round_trip() -> None:
    assert str(parse_row_id("tiny-cpu@1#42")) == "tiny-cpu@1#42"
    assert parse_row_id("tiny-cpu@2#report-ab12") == RowRef("tiny-cpu", 2, None, "ab12")
    with pytest.raises(ValueError, match="SLUG@REVISION#ROW"):
        parse_row_id("tiny-cpu#42")


def test_the_band_is_the_repeats_range_widened_five_percent_each_way() -> None:
    b = band(100.0, {"min": 90.0, "max": 120.0, "n": 3})
    assert (b.low, b.high, b.repeats) == (pytest.approx(85.5), pytest.approx(126.0), 3)
    alone = band(100.0, None)  # a typed row: its one value, +-5%
    assert (alone.low, alone.high) == (pytest.approx(95.0), pytest.approx(105.0))
    assert band(100.0, {"min": 101.0, "max": 110.0, "n": 2}).low == pytest.approx(95.0)  # the value is inside


def test_the_verdict_needs_every_figure_inside() -> None:
    row = {"decode_tok_s": 100.0, "prefill_tok_s": 2000.0, "ttft_ms": 50.0}
    stats = {
        "decode_tok_s_aggregate": {"min": 95.0, "max": 105.0, "n": 3},
        "prefill_tok_s": {"min": 1900.0, "max": 2100.0, "n": 3},
        "ttft_ms": {"min": 45.0, "max": 55.0, "n": 3},
    }
    same = {"decode_tok_s_aggregate": 92.0, "prefill_tok_s": 2150.0, "ttft_ms_p50": 52.0}
    comps = compare(row, stats, same)
    assert [c.metric for c in comps] == ["prefill_tok_s", "decode_tok_s", "ttft_ms"]
    assert verdict(comps) == "replicated"
    assert comps[1].delta_pct == pytest.approx(-8.0)
    slow = same | {"decode_tok_s_aggregate": 90.0}  # below 95 x 0.95 = 90.25
    assert verdict(compare(row, stats, slow)) == "not-reproduced"
    fast = same | {"ttft_ms_p50": 40.0}  # a TTFT below 45 x 0.95: outside too
    assert verdict(compare(row, stats, fast)) == "not-reproduced"
    assert verdict(compare(row, stats, {})) == "not-reproduced"  # nothing measured: nothing reproduced


def _theirs(context: int = 8192) -> list[Theirs]:
    return [Theirs({"id": 1, "revision": 1, "context": context, "concurrency": 1})]


def test_fit_stops_a_recipe_that_does_not_fit_and_skips_a_cpu_only_one() -> None:
    big = load_recipe(BIG)
    with pytest.raises(FitError, match="does not fit"):
        check_fit(BIG, big, _theirs(), Options(gpu="RTX 4090", gpus=1))
    fits = check_fit(BIG, big, _theirs(), Options(gpu="H200", gpus=8))
    assert fits["verdict"] != "does-not-fit"
    tiny = load_recipe(TINY)
    assert check_fit(TINY, tiny, _theirs(256), Options())["verdict"] == "skipped"


def test_fit_without_a_gpu_to_check_stops_unless_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    import lair.cli._reproduce as rp

    monkeypatch.setattr(rp, "_local_gpu", lambda: None)  # this machine has no nvidia-smi either
    with pytest.raises(FitError, match="cannot check the fit"):
        check_fit(BIG, load_recipe(BIG), _theirs(), Options())
    assert check_fit(BIG, load_recipe(BIG), _theirs(), Options(skip_fit=True))["verdict"] == "skipped"


def test_no_image_to_pin_for_a_native_recipe() -> None:
    assert pin_image(load_recipe(TINY), {"image": {"digests": ["x@sha256:" + "0" * 64]}}) is None


def _doc(rows: list[dict[str, object]]) -> dict[str, object]:
    return {"revision": 2, "measurements": rows}


def test_rebench_skips_what_this_machine_measured_since_and_prefers_its_own_reports() -> None:
    since = datetime(2026, 12, 1, tzinfo=UTC)

    def row(i: int, report: str, created: str, revision: int = 2) -> dict[str, object]:
        return {"id": i, "revision": revision, "report_id": report, "rig": "same-hash", "created_at": created}

    mine_old = row(1, "a", "2026-11-20T00:00:00+00:00")
    other_new = row(2, "b", "2026-12-02T00:00:00+00:00")
    mine_new = row(3, "c", "2026-12-03T00:00:00+00:00")
    old_rev = row(4, "d", "2026-12-04T00:00:00+00:00", revision=1)
    mine = {"a", "c", "d"}
    # every row carries the same public rig hash: only this machine's own submissions are "mine"
    assert rebench_plan(_doc([mine_old, other_new, old_rev]), mine, since) == (
        "a",
        "this rig's newest report",
    )
    assert rebench_plan(_doc([other_new]), mine, since) == ("b", "the newest report (another rig's)")
    skipped = rebench_plan(_doc([mine_old, mine_new]), mine, since)
    assert skipped == (None, "measured on this rig on 2026-12-03")
    assert rebench_plan(_doc([]), mine, None)[0] is None
    # newest, not oldest, among several of another rig's
    older = row(5, "e", "2026-11-01T00:00:00+00:00")
    assert rebench_plan(_doc([older, other_new]), set(), None)[0] == "b"


def test_rebench_compares_sqlite_naive_times_with_an_aware_since() -> None:
    """SQLite gives created_at without an offset (UTC): --since 7d used to raise a TypeError."""
    naive = {"id": 1, "revision": 2, "report_id": "a", "rig": "x", "created_at": "2026-12-05 10:00:00"}
    assert rebench_plan(_doc([naive]), {"a"}, datetime(2026, 12, 1, tzinfo=UTC)) == (
        None,
        "measured on this rig on 2026-12-05",
    )
    assert rebench_plan(_doc([naive]), {"a"}, datetime(2026, 12, 6, tzinfo=UTC))[0] == "a"


def test_since_takes_dates_times_and_ages() -> None:
    now = datetime(2026, 12, 10, 12, tzinfo=UTC)
    assert parse_since("2026-12-01") == datetime(2026, 12, 1, tzinfo=UTC)
    assert parse_since("7d", now) == datetime(2026, 12, 3, 12, tzinfo=UTC)
    assert parse_since("12h", now) == datetime(2026, 12, 10, tzinfo=UTC)
    with pytest.raises(ConfigError, match="not a date"):
        parse_since("last week")


def test_a_load_cell_is_compared_on_its_rate_throughput_and_median_latencies_within_ten_percent() -> None:
    from lair.replication import NOT_REPRODUCED, compare_load

    theirs = {"achieved_rate": 4.0, "output_tok_s": 120.0, "ttft_ms": {"p50": 50.0, "p99": 90.0}}
    theirs |= {"tpot_ms": {"p50": 2.0, "p99": 6.0}}
    yours = {"achieved_rate": 4.3, "output_tok_s": 133.0, "ttft_ms": {"p50": 45.5}, "tpot_ms": {"p50": 20.0}}
    got = {c.metric: c for c in compare_load(theirs, yours)}
    assert list(got) == ["achieved_rate", "output_tok_s", "ttft_ms_p50", "tpot_ms_p50"]
    # bands by hand: value x 0.9 .. value x 1.1
    assert (got["achieved_rate"].band.low, got["achieved_rate"].band.high) == pytest.approx((3.6, 4.4))
    assert [got[k].inside for k in got] == [True, False, True, False]  # 133 > 132; 20 > 2.2
    assert got["tpot_ms_p50"].delta_pct == pytest.approx(900.0)
    assert verdict(list(got.values())) == NOT_REPRODUCED
    missing = compare_load(theirs, None)  # the new run has no such cell (its sweep stopped sooner)
    assert [c.yours for c in missing] == [None] * 4 and verdict(missing) == NOT_REPRODUCED
    assert [c.metric for c in compare_load({"achieved_rate": 2.0, "ttft_ms": None}, {})] == ["achieved_rate"]
