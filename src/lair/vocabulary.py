"""The words for how far a number is checked, defined once: every CLI message, page, legend, badge and
JSON field takes them from here.

Rows (speed or quality), weakest to strongest:

=====================  =============================================================================
``reported``           typed by the recipe's author
``reported-by-report`` from an accepted run report, recomputed from its raw timings, not physically
                       checked (the row's note says why: a CPU-only rig has no roofline)
``verified``           from a run report, recomputed from its raw timings and held under the
                       roofline of the GPUs its fingerprint names (quality: every sample re-scored)
``replicated``         verified by enough accounts on enough distinct rigs, agreeing
=====================  =============================================================================

An attempt (``lair reproduce``, a replication upload) is what one run on one rig found: "reproduced
here" or "not reproduced here". It never makes a row replicated by itself, and it is never called
"replicated" (its stored outcome code ``replicated`` is an API value, shown as :data:`REPRODUCED`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

__all__ = [
    "CHECKED",
    "MEANING",
    "NOT_REPRODUCED",
    "REPLICATED",
    "REPORTED",
    "REPORTED_BY_REPORT",
    "REPRODUCED",
    "TIERS",
    "VERIFIED",
    "attempt_word",
    "rows_phrase",
    "tiers_phrase",
]

REPORTED = "reported"
REPORTED_BY_REPORT = "reported-by-report"
VERIFIED = "verified"
REPLICATED = "replicated"
TIERS = (REPORTED, REPORTED_BY_REPORT, VERIFIED, REPLICATED)
"""Every row tier, weakest first."""
CHECKED = frozenset({VERIFIED, REPLICATED})
"""The tiers whose numbers were physically checked (the only ones a page may call "verified")."""

MEANING = {
    REPORTED: "typed by the author",
    REPORTED_BY_REPORT: "from an accepted run report, recomputed from its raw timings, no roofline check",
    VERIFIED: "recomputed from a run report's raw timings and held under the roofline of its GPUs",
    REPLICATED: "verified by several accounts on distinct rigs, agreeing",
}
"""One line per tier, for legends and help."""

REPRODUCED = "reproduced here"
NOT_REPRODUCED = "not reproduced here"
_ATTEMPT = {"replicated": REPRODUCED, "reproduced": REPRODUCED, "not-reproduced": NOT_REPRODUCED}


def attempt_word(outcome: str) -> str:
    """The words for an attempt's outcome code (``replicated``/``not-reproduced``, as stored)."""
    return _ATTEMPT.get(outcome, outcome)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def tiers_phrase(tiers: Iterable[str]) -> str:
    """``2 reported-by-report, 1 verified`` (weakest first); ``none`` for no rows."""
    counts = Counter(tiers)
    parts = [f"{counts[t]} {t}" for t in TIERS if counts[t]]
    parts += [f"{n} {t}" for t, n in sorted(counts.items()) if t not in TIERS]
    return ", ".join(parts) or "none"


def rows_phrase(tiers: Iterable[str], noun: str = "row") -> str:
    """``3 rows: 2 reported-by-report, 1 verified``; ``0 rows``."""
    listed = list(tiers)
    head = _plural(len(listed), noun)
    return f"{head}: {tiers_phrase(listed)}" if listed else head
