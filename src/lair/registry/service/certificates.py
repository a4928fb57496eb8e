"""The certificate behind each speed row: what says the number was measured honestly, as the recipe
page and its JSON twin show it.

An accepted report's cells carry the bench's certificate (:mod:`lair.bench.certificate`, checked on
upload by :func:`~.recompute.check_certificate`). :func:`summary` keeps of it, with the run's
certificate, what a reader weighs a row by:

- ``cache``: the prefix-cache hit tokens the engine's counter saw (``counter_hit_tokens``), the
  responses' ``cached_tokens``, what could have seen a hit (``proven_by``) and ``cold``;
- ``client``: the bench's CPU fraction and event-loop (and read) lag p99 of the worst repeat, the
  limits and the ``bound`` (client-bound) verdict;
- ``order``: the cell's ``position`` in the run, ``order`` (shuffled or fixed) and ``seed``,
  ``started_s`` and ``duration_s``; ``warmup_requests``; ``idle_gap_s`` (the gap the cell had) and
  ``idle_gap_asked_s``;
- ``telemetry``: the backend (``nvml``, ``nvidia-smi``, ``none``), and why there was none;
- ``gpu``: samples, GPUs, average and peak watts, SM and memory clock ranges, the hottest
  temperature, memory used, the throttle reasons (None: no GPU telemetry);
- ``software``: engine, engine version and commit, image digest, driver, CUDA and NVML versions.

The summary is stored on upload (``cell_certificates``, migration 0011) beside the cell's energy
figures as columns (:func:`energy_columns`), so that the stored pages render it without reading the
blob store. :func:`with_certificates` gives each row its ``certificate`` (None, with
``certificate_missing`` saying why) and its ``energy``.
"""

from __future__ import annotations

import json
import weakref
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy import Connection, Engine

from lair.bench.certificate import J_PER_KWH
from lair.registry.db.schema import CellCertificate
from lair.registry.db.tables import MEASUREMENTS
from lair.registry.service.recompute import NO_CERTIFICATE

__all__ = [
    "CERTIFICATES",
    "ENERGY_KEYS",
    "energy_columns",
    "has_certificates",
    "record_certificates",
    "summary",
    "with_certificates",
]

CERTIFICATES = cast(sa.Table, CellCertificate.__table__)
ENERGY_KEYS = ("j_per_output_token", "j_per_prompt_token", "avg_w", "peak_w", "energy_source")
"""The energy figures of a cell's certificate kept as columns (``energy_source``: counter or
power-integral)."""

_CACHE = ("metric", "counter_hit_tokens", "response_cached_tokens", "proven_by", "cold")
_CLIENT = ("cpu_fraction_max", "loop_lag_p99_ms_max", "batched_lag_p99_ms_max", "read_interval_ms", "bound")
_GPU = ("samples", "gpus", "avg_w", "peak_w", "sm_clock_mhz", "mem_clock_mhz", "temp_c_max",
        "mem_used_mib_max", "throttle_reasons", "thermal_throttled", "power_throttled")  # fmt: skip
_SOFTWARE = ("engine", "engine_version", "engine_commit", "image_digest", "driver", "cuda", "nvml")

TYPED = "typed by the recipe's author: no report, so no certificate"
NONE_IN_REPORT = "its report has no certificate (written before lair recorded one)"
NOT_STORED = (
    "not stored: the report was accepted before the registry kept certificates (its results.json, "
    "linked from the row, holds it)"
)


def _pick(d: dict[str, Any] | None, keys: tuple[str, ...]) -> dict[str, Any]:
    d = d or {}
    return {k: d.get(k) for k in keys}


def summary(cell: dict[str, Any] | None, run: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the page shows of one cell's certificate (``cell``: ``bench.cells[i].certificate``) and
    its run's (``bench.certificate``); None when the cell has none."""
    if not cell:
        return None
    run = run or {}
    load = cell.get("client") or {}
    client = _pick(load, _CLIENT) | {"limits": dict(load.get("limits") or {})}
    gpu = cell.get("gpu")
    return {
        "cache": _pick(cell.get("cache"), _CACHE),
        "client": client,
        "order": {
            "position": cell.get("position"),
            "order": run.get("order"),
            "seed": run.get("seed"),
            "started_s": cell.get("started_s"),
            "duration_s": cell.get("duration_s"),
        },
        "warmup_requests": run.get("warmup_requests"),
        "idle_gap_s": cell.get("idle_gap_s"),
        "idle_gap_asked_s": run.get("idle_gap_s"),
        "telemetry": {"backend": run.get("telemetry") or "none", "note": run.get("telemetry_note") or ""},
        "gpu": _pick(gpu, _GPU) if gpu else None,
        "software": _pick(run.get("software"), _SOFTWARE),
    }


def energy_columns(energy: dict[str, Any] | None) -> dict[str, Any]:
    """The energy figures of a cell's certificate (``certificate.energy``) as the table's columns."""
    return _pick(energy, ENERGY_KEYS)


_AT_0011: weakref.WeakSet[Engine] = weakref.WeakSet()


def has_certificates(conn: Connection) -> bool:
    """Whether the database has migration 0011's table (remembered per engine once it has)."""
    if conn.engine in _AT_0011:
        return True
    if sa.inspect(conn).has_table("cell_certificates"):
        _AT_0011.add(conn.engine)
        return True
    return False


def record_certificates(conn: Connection, report_id: str, rows: list[dict[str, Any]]) -> None:
    """Store the certificate of each of a just-recorded report's rows (``rows``: :func:`verify_report`'s,
    each with its ``certificate`` summary and ``energy``) against its measurement."""
    values = [r for r in rows if r.get("certificate")]
    if not values or not has_certificates(conn):
        return
    m = MEASUREMENTS
    stmt = sa.select(m.c.id, m.c.context, m.c.concurrency).where(m.c.report_id == report_id)
    ids = {(int(r.context), int(r.concurrency)): int(r.id) for r in conn.execute(stmt)}
    conn.execute(
        sa.insert(CERTIFICATES),
        [
            {
                "measurement_id": ids[(int(r["context"]), int(r["concurrency"]))],
                "certificate": json.dumps(r["certificate"], sort_keys=True),
            }
            | energy_columns(r.get("energy"))
            for r in values
        ],
    )


def _energy(c: Any) -> dict[str, Any] | None:
    figures = {k: getattr(c, k) for k in ENERGY_KEYS}
    if all(v is None for v in figures.values()):
        return None
    j = figures["j_per_output_token"]
    return figures | {"output_tokens_per_kwh": J_PER_KWH / j if j else None}


def _missing(row: dict[str, Any]) -> str:
    if not row.get("report_id"):
        return TYPED
    return NONE_IN_REPORT if NO_CERTIFICATE in (row.get("note") or "") else NOT_STORED


def with_certificates(conn: Connection, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row with its ``certificate`` (:func:`summary`, or None and ``certificate_missing`` saying
    why) and its ``energy`` (the columns and ``output_tokens_per_kwh``; None: no energy figure)."""
    ids = [int(r["id"]) for r in rows if r.get("report_id")]
    found: dict[int, Any] = {}
    if ids and has_certificates(conn):
        stmt = sa.select(CERTIFICATES).where(CERTIFICATES.c.measurement_id.in_(ids))
        found = {int(c.measurement_id): c for c in conn.execute(stmt)}
    out = []
    for r in rows:
        c = found.get(int(r["id"]))
        cert = json.loads(c.certificate) if c is not None else None
        why = None if c is not None else _missing(r)
        out.append(r | {"certificate": cert, "certificate_missing": why, "energy": _energy(c) if c else None})
    return out
