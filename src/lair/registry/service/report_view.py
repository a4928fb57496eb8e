"""The view model of a run report's page: its rows as the registry tiered them, the rig it ran on
(from the fingerprint the upload carried), and its raw files.

The fingerprint is what :func:`lair.report.fingerprint.fingerprint` recorded on the rig: GPUs with
driver and CUDA from nvidia-smi, the engine's name and version, the container image and its digest,
the CPU model and count, RAM, OS and kernel. Every field is optional; a missing one says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from lair.registry.db.tables import MEASUREMENTS
from lair.registry.service.reports import get_report

__all__ = ["report_view", "rig_summary"]


def _get(d: Mapping[str, Any] | None, key: str) -> Any:
    v = d.get(key) if isinstance(d, Mapping) else None
    return v if isinstance(v, str | int | float) and not isinstance(v, bool) else None


def _gpu(fp: Mapping[str, Any]) -> str | None:
    g = fp.get("gpus")
    if not isinstance(g, Mapping):
        return None
    models = ", ".join(m for m in g.get("models") or [] if isinstance(m, str))
    count = _get(g, "count")
    return f"{count}x {models}" if models and count else models or None


def _engine(fp: Mapping[str, Any]) -> str | None:
    e = fp.get("engine")
    parts = [_get(e, "name"), _get(e, "version")] if isinstance(e, Mapping) else []
    text = " ".join(str(p) for p in parts if p) or _get(fp, "engine_version")
    return str(text) if text else None


def _image(fp: Mapping[str, Any]) -> tuple[str | None, str | None]:
    img = fp.get("image")
    if not isinstance(img, Mapping):
        return None, None
    digests = [d for d in img.get("digests") or [] if isinstance(d, str)]
    return _get(img, "name"), (digests[0] if digests else _get(img, "id"))


def _cpu(fp: Mapping[str, Any]) -> str | None:
    c = fp.get("cpu")
    model, count, arch = _get(c, "model"), _get(c, "count"), _get(c, "arch")
    if not model and not count:
        return None
    threads = f"{count} logical CPUs" if count else ""
    return ", ".join(str(p) for p in (model, threads, arch) if p)


def rig_summary(fp: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, value) of the rig, in a fixed order; "not recorded" where the fingerprint is silent."""
    image, digest = _image(fp)
    gpus = fp.get("gpus") if isinstance(fp.get("gpus"), Mapping) else {}
    ram = _get(fp, "ram_bytes")
    amd = _get(gpus, "vendor") == "amd"  # read from amd-smi: a ROCm version, no CUDA
    rows = [
        ("GPUs", _gpu(fp) or "none (a CPU-only rig)"),
        ("driver", _get(gpus, "driver")),
        ("ROCm", _get(gpus, "rocm")) if amd else ("CUDA", _get(gpus, "cuda")),
        ("engine", _engine(fp)),
        ("image", image),
        ("image digest", digest),
        ("CPU", _cpu(fp)),
        ("RAM", f"{ram / (1 << 30):,.1f} GiB" if isinstance(ram, int | float) and ram else None),
        ("OS", " · ".join(str(x) for x in (_get(fp, "os"), _get(fp, "kernel")) if x) or None),
        ("lair", _get(fp, "lair_version")),
    ]
    return [(k, str(v)[:300] if v is not None else "not recorded") for k, v in rows]


def _rows(conn: Connection, report_id: str) -> list[dict[str, Any]]:
    m = MEASUREMENTS.c
    stmt = (
        sa.select(
            m.id, m.context, m.concurrency, m.prefill_tok_s, m.decode_tok_s, m.decode_tok_s_per_stream,
            m.ttft_ms, m.provenance, m.note, m.retracted_at, m.retracted_reason,
        )
        .where(m.report_id == report_id)
        .order_by(m.context, m.concurrency, m.id)
    )  # fmt: skip
    return [dict(r._mapping) | {"retracted": r.retracted_at is not None} for r in conn.execute(stmt)]


def report_view(conn: Connection, report_id: str) -> dict[str, Any]:
    """The report's summary (:func:`~lair.registry.service.reports.get_report`) with its speed rows
    and the rig's summary."""
    doc = get_report(conn, report_id)
    rows = _rows(conn, report_id)
    return doc | {"rows": rows, "rig": rig_summary(doc["fingerprint"])}
