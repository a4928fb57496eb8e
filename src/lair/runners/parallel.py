"""Drive many nodes at once: :func:`run_all` runs one coroutine per runner in parallel and collects
every node's result or error (one slow or failing node never hides the others)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from lair.errors import RunnerError
from lair.runners.seam import Runner

__all__ = ["Outcome", "raise_for_errors", "run_all"]

R = TypeVar("R", bound=Runner)
T = TypeVar("T")


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """One node's result: ``value`` when it worked, ``error`` when it raised."""

    host: str
    value: T | None = None
    error: Exception | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


async def run_all(runners: Sequence[R], fn: Callable[[R], Awaitable[T]]) -> list[Outcome[T]]:
    """Run ``fn(runner)`` for every runner concurrently; outcomes come back in ``runners`` order.

    Exceptions are collected per node; cancellation (Ctrl-C) still propagates and cancels all."""
    results = await asyncio.gather(*(fn(r) for r in runners), return_exceptions=True)
    outcomes: list[Outcome[T]] = []
    for runner, res in zip(runners, results, strict=True):
        if isinstance(res, Exception):
            outcomes.append(Outcome(runner.host, error=res))
        elif isinstance(res, BaseException):
            raise res
        else:
            outcomes.append(Outcome(runner.host, value=res))
    return outcomes


def raise_for_errors(outcomes: Sequence[Outcome[T]]) -> list[T]:
    """The values, or raise: the node's own error when one failed, a RunnerError naming every
    failed node when several did."""
    failed = [o for o in outcomes if o.error is not None]
    if len(failed) == 1 and failed[0].error is not None:
        raise failed[0].error
    if failed:
        lines = [f"{o.host}: {o.error}" for o in failed]
        raise RunnerError(
            f"{len(failed)} of {len(outcomes)} nodes failed:\n" + "\n".join(lines),
            host=",".join(o.host for o in failed),
        )
    return [o.value for o in outcomes]  # type: ignore[misc]
