"""$/Mtok (energy) of a recipe's speed rows at an electricity price the viewer picks.

A row gets a figure only when it was physically checked (``verified``, which ``replicated`` rows
are too), is not retracted, and its certificate has an energy figure: the price times the row's
joules per output token, by the bench's own :func:`lair.bench.telemetry.cost_per_mtok`
(J/token x 10^6 / 3.6 x 10^6 J/kWh x price). A reported row (typed by the author) or a
reported-by-report row (not physically checked) gets none, and ``why_none`` says so.

The recipe page and its JSON are stored with the figures at :data:`DEFAULT_PRICE_KWH`; the price
form (``GET /recipes/<slug>/cost?price_kwh=P``, JSON at ``/recipes/<slug>/cost.json``) renders them
at another price on read, from the same stored numbers. A price is a decimal number
0 < P <= :data:`MAX_PRICE_KWH`; anything else is a 422 naming ``query.price_kwh``.
"""

from __future__ import annotations

import math
from typing import Any

from lair.bench.telemetry import cost_per_mtok
from lair.errors import Invalid

__all__ = ["DEFAULT_PRICE_KWH", "MAX_PRICE_KWH", "PARAM", "parse_price", "row_cost", "with_costs"]

DEFAULT_PRICE_KWH = 0.15
"""$ per kWh the stored page shows $/Mtok at (about a household tariff)."""
MAX_PRICE_KWH = 10.0
PARAM = "price_kwh"
_MAX_CHARS = 32


def _bad(why: str) -> Invalid:
    return Invalid(
        why,
        location=f"query parameter {PARAM}",
        hint=f"a price in $ per kWh, more than 0 and at most {MAX_PRICE_KWH:g}, e.g. {PARAM}=0.31",
        reasons=[f"query.{PARAM}: {why}"],
    )


def parse_price(raw: str | None) -> float:
    """The price of ``?price_kwh=`` (absent or empty: the default); 422 naming the parameter when
    it is no number in (0, 10]."""
    if raw is None or raw.strip() == "":
        return DEFAULT_PRICE_KWH
    if len(raw) > _MAX_CHARS:
        raise _bad(f"{len(raw):,} characters (a price has at most {_MAX_CHARS})")
    try:
        price = float(raw)
    except ValueError:
        raise _bad(f"not a number: {raw!r}") from None
    if not math.isfinite(price) or not 0 < price <= MAX_PRICE_KWH:
        raise _bad(f"must be more than 0 and at most {MAX_PRICE_KWH:g}, not {raw.strip()!r}")
    return price


def _why_none(row: dict[str, Any]) -> str | None:
    if row.get("retracted"):
        return "retracted"
    if row.get("provenance") == "reported":
        return "typed by the author: not measured by a report"
    if row.get("provenance") != "verified":
        return "not verified: no $/Mtok from a row the registry did not physically check"
    if (row.get("energy") or {}).get("j_per_output_token") is None:
        return "no energy figure in its certificate (no GPU telemetry)"
    return None


def row_cost(row: dict[str, Any], price_kwh: float) -> dict[str, Any]:
    """``{"price_kwh", "usd_per_mtok_energy", "why_none"}`` of one row (figure None, ``why_none``
    saying why, for a row that gets none)."""
    why = _why_none(row)
    usd = None
    if why is None:
        j = float(row["energy"]["j_per_output_token"])
        usd = cost_per_mtok(j, None, power_price_kwh=price_kwh)["energy"]
    return {"price_kwh": price_kwh, "usd_per_mtok_energy": usd, "why_none": why}


def with_costs(rows: list[dict[str, Any]], price_kwh: float = DEFAULT_PRICE_KWH) -> list[dict[str, Any]]:
    """Each row with its ``cost`` at ``price_kwh`` (:func:`row_cost`)."""
    return [r | {"cost": row_cost(r, price_kwh)} for r in rows]
