"""Task functions of ``lair_humaneval.yaml``: programs are built from the prompt, the completion
and the tests, and run in the sandbox of :mod:`lair.eval.sandbox` (all of a repeat's programs
together, ``sandbox.current().concurrency`` at a time); the metric reads the verdict back."""

from __future__ import annotations

from typing import Any

from lair.eval import sandbox


def program(doc: dict[str, Any], completion: str) -> str:
    return f"{doc['prompt']}{completion}\n\n{doc['test']}\n\ncheck({doc['entry_point']})\n"


def run_programs(resps: list[list[str]], docs: list[dict[str, Any]]) -> list[list[str]]:
    """Filter: each response becomes its full program, run once in the sandbox."""
    programs = [[program(doc, r) for r in resp] for resp, doc in zip(resps, docs, strict=True)]
    sb = sandbox.current()
    sb.run_many([p for ps in programs for p in ps], sb.concurrency)
    return programs


def pass_at_1(references: list[str], predictions: list[list[str]], **kwargs: Any) -> float:
    """1.0 when the first program of the sample passed its tests in the sandbox."""
    sb = sandbox.current()
    prog = predictions[0][0]
    verdict = sb.verdict_of(prog) or sb.run(prog)
    return 1.0 if verdict.passed else 0.0
