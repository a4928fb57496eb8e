"""The one consent gate of the CLI: every command that runs a recipe calls :func:`with_consent`.

``call(accept)`` does the command's work up to the point where the recipe would run; the library
raises a :class:`~lair.errors.TrustError` there for an untrusted recipe without an acceptance of
exactly what it asks for (and nothing of it ran: :mod:`lair.launch.resolve`). On a terminal the
requests are shown and "y" calls again with the fingerprint of what was shown (which accepts, and
stores the acceptance of, exactly that content); without a terminal, or with ``--json``, the error
goes up with a hint that names the command's own flag. Commands and their flags:
launch/plan/tune/doctor ``--accept``, reproduce and rebench ``-y``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

from lair.cli._common import err
from lair.errors import TrustError

__all__ = ["with_consent"]

T = TypeVar("T")


def _interactive() -> bool:
    return sys.stdin.isatty() and sys.stderr.isatty()


def with_consent(
    call: Callable[[bool | str], T], *, accept: bool, command: str, flag: str, prompt: bool = True
) -> T:
    """``call(accept)``; an untrusted recipe's refusal is shown and asked about on a terminal. After
    "y", ``call`` gets the fingerprint of what was shown instead of True: the library accepts that and
    nothing else (a file changed meanwhile is refused, not accepted)."""
    try:
        return call(accept)
    except TrustError as exc:
        exc.hint = f"read what it runs, then accept it: lair {command} ... {flag}"
        if accept or not prompt or not _interactive():
            raise
        err(exc.message)
        sys.stderr.write("accept and go on? [y/N] ")
        sys.stderr.flush()
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            raise
        shown = exc.fingerprint
    return call(shown or True)
