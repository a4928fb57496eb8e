"""The validity gate against servers that answer 200 with no real answer: one repeated token, blank
deltas, no tokens at all; and a server that answers well (no flag)."""

from __future__ import annotations

import pytest

from lair.bench import BenchOptions, run_bench
from lair.testing.calibrated_server import running_server

pytestmark = pytest.mark.integration

DECODE = 32


def _cell(*server_args: str) -> object:
    with running_server("--ttft-ms", "5", "--token-ms", "1", *server_args) as url:
        opts = BenchOptions(contexts=[64], concurrency=[4], decode_tokens=DECODE, repeat=1, keep_going=True)
        return run_bench(url, opts).cells[0]


@pytest.mark.parametrize(
    ("mode", "problem"),
    [
        ("repeat", "one unit repeated for the whole answer: 'tok'"),
        ("empty-deltas", "blank text in 1 content chunk"),
        ("zero-tokens", "no content (completion_tokens 0)"),
    ],
)
def test_a_broken_answer_flags_the_cell_invalid_output(mode: str, problem: str) -> None:
    cell = _cell("--output", mode)
    assert "invalid-output" in cell.flags  # type: ignore[attr-defined]
    out = cell.certificate.output  # type: ignore[attr-defined]
    assert (out.checked, out.invalid, out.valid) == (4, 4, False)
    assert [e["problem"] for e in out.examples] == [problem] * 3


def test_a_good_server_passes_the_gate() -> None:
    cell = _cell()
    out = cell.certificate.output  # type: ignore[attr-defined]
    assert "invalid-output" not in cell.flags and cell.errors == 0  # type: ignore[attr-defined]
    assert (out.checked, out.invalid, out.valid, out.token_bounds) == (4, 0, True, [29, 35])
