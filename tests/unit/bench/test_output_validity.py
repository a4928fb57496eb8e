"""The validity gate on answers (lair.bench.definitions.output_problem) on hand-built answers."""

from __future__ import annotations

import pytest

from lair.bench import definitions as d
from lair.bench.certificate import output_certificate


def _answer(text: str, tokens: int | None, chunks: int = 4, status: int = 200) -> d.RequestTiming:
    return d.RequestTiming(
        send_t=0.0,
        content_times=[0.1 * (i + 1) for i in range(chunks)],
        content_chars=[1] * chunks,
        completion_tokens=tokens,
        status=status,
        text=text,
    )


def test_token_bounds_are_ninety_to_one_hundred_ten_percent() -> None:
    assert d.output_token_bounds(100) == (90, 110)
    assert d.output_token_bounds(128) == (116, 140)  # 115.2 rounds up, 140.8 down
    assert d.output_token_bounds(1) == (1, 1)


@pytest.mark.parametrize(
    ("text", "tokens", "starts"),
    [
        (" amber cedar onyx raven", 100, None),
        (" amber cedar onyx raven", 89, "89 completion tokens, 100 asked (allowed 90-110)"),
        (" amber cedar onyx raven", 111, "111 completion tokens"),
        ("   \n ", 100, "blank text in 4 content chunks"),
        (" tok tok tok tok", 100, "one unit repeated for the whole answer: 'tok'"),
        ("aaaaaaaa", 100, "one unit repeated for the whole answer: 'a'"),
        ("abababab", 100, "one unit repeated for the whole answer: 'ab'"),
        ("\ufffd\ufffd ok fine words here", 100, None),  # 2 of 22 characters: above a tenth
        ("\ufffd\ufffd\ufffd\x01 words", 100, "not text: 4 of 10 characters"),
    ],
)
def test_output_problem(text: str, tokens: int, starts: str | None) -> None:
    problem = d.output_problem(_answer(text, tokens), want=100, force=True)
    if starts is None:
        assert problem is None
    else:
        assert problem is not None and problem.startswith(starts), problem


def test_bounds_apply_only_to_forced_output_and_failures_are_not_judged() -> None:
    assert d.output_problem(_answer(" amber cedar", 7), want=100, force=False) is None
    assert d.output_problem(_answer("", 0, chunks=0, status=500), want=100, force=True) is None
    zero = d.RequestTiming(send_t=0.0, status=200, completion_tokens=0)
    assert d.output_problem(zero, want=100, force=True) == "no content (completion_tokens 0)"


def test_a_one_token_answer_is_not_a_repetition() -> None:
    assert d.output_problem(_answer(" yes", 1, chunks=1), want=1, force=True) is None


def test_long_equal_answers_to_different_prompts_are_duplicates_short_ones_not() -> None:
    long = [_answer(" amber cedar onyx", 16), _answer(" basil kelp", 16), _answer(" amber cedar onyx", 16)]
    assert d.duplicate_answers(long) == [2]
    short = [_answer(" yes", 15), _answer(" yes", 15)]
    assert d.duplicate_answers(short) == []
    problems = d.answer_problems(long, want=16, force=True)
    assert problems == [None, None, "the same text as answer 0 of this repeat, to a different prompt"]


def test_the_cell_certificate_keeps_a_few_truncated_examples() -> None:
    reps = [[_answer(" tok" * 40, 100) for _ in range(5)]]
    cert = output_certificate(reps, want=100, force=True)
    assert (cert.checked, cert.invalid, cert.valid, cert.token_bounds) == (5, 5, False, [90, 110])
    assert len(cert.examples) == 3 and cert.examples[0]["text"] == (" tok" * 20)
    assert cert.examples[1] == {
        "repeat": 0,
        "index": 1,
        "problem": cert.examples[0]["problem"],
        "text": " tok" * 20,
    }
