"""``lair doctor --bundle FILE``: one .tar.gz to attach to an issue.

    findings.json    the report (every node's facts and every finding)
    findings.txt     the same as ``lair doctor`` prints it
    versions.json    lair, Python and the platform here; OS, kernel, runtimes and drivers per node
    nodes/NAME.txt   what the probe script printed on each node (the raw facts)
    recipe.toml      the recipe checked, when there was one
    runs/RUN.log     the journal events of the last few lair runs on this machine

Every member passes through the redactor of the run's secret values, then :func:`lair.redaction.redact`
(the scanner the registry refuses published secrets and redacts uploaded logs with: detect-secrets'
token formats and lair's own, URL passwords, ``--api-key VALUE``-style flags, ``Bearer`` credentials
and ``*KEY*=``/``*TOKEN*=``/``*PASSWORD*=`` assignments), before it is written.
"""

from __future__ import annotations

import io
import json
import platform
import sys
import tarfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from lair.launch.doctor.findings import DoctorReport

__all__ = ["redact_text", "redact_tree", "render_report", "write_bundle"]

RUN_LOGS = 5


def redact_text(text: str, secrets: Sequence[str] = ()) -> str:
    """``text`` with the given secret values as ``***`` and every secret the registry's scanner finds
    (:func:`lair.redaction.redact`: token formats, URL passwords, secret flags and assignments) as
    ``[REDACTED:<kind>]``."""
    from lair.plan.secrets import redactor
    from lair.redaction import redact  # detect-secrets (and requests) cost 0.2 s: not on every launch

    return redact(redactor(secrets)(text))


def redact_tree(value: object, secrets: Sequence[str] = ()) -> object:
    """Every string inside ``value`` (dicts, lists: a model's JSON data) redacted."""
    if isinstance(value, str):
        return redact_text(value, secrets)
    if isinstance(value, dict):
        return {k: redact_tree(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_tree(v, secrets) for v in value]
    return value


def render_report(report: DoctorReport) -> str:
    """The report as ``lair doctor`` prints it: a line per node, then each finding and its fix."""
    lines = []
    for n in report.nodes:
        if not n.reachable:
            lines.append(f"{n.name} ({n.address}): unreachable")
            continue
        gpus = f"{len(n.gpus)} x {n.gpus[0].name}, driver {n.gpus[0].driver}" if n.gpus else "no GPU"
        rts = ", ".join(
            f"{r.name} {r.version}" if r.running else f"{r.name} down" for r in n.runtimes if r.installed
        )
        skew = f"clock {n.clock_skew_s:+.2f}s" if n.clock_skew_s is not None else ""
        route = f"to head via {n.route.dev}" if n.route and n.route.dev else ""
        parts = [n.os or "?", n.kernel or "?", gpus, rts, skew, route]
        lines.append(f"{n.name} ({n.address}): " + "; ".join(p for p in parts if p))
    lines.append("")
    lines += [f.render() for f in report.findings] or ["no findings: the rig is ready"]
    if report.allreduce is not None:
        a = report.allreduce
        lines.append(
            f"all-reduce ({a.backend}, {a.nodes} nodes, {a.size_bytes / 2**20:.0f} MiB): "
            f"{a.seconds * 1e3:.1f} ms, "
            f"algbw {a.algbw_gbs:.2f} GB/s, busbw {a.busbw_gbs:.2f} GB/s"
            + ("" if a.correct else " - WRONG SUM")
        )
    errors = len(report.errors())
    lines.append(f"\n{len(report.findings)} findings ({errors} errors), {len(report.checks)} checks")
    if not report.ok:
        gaps = list(dict.fromkeys(f.check for f in report.errors()))
        lines.append(f"not ready: {errors} gaps ({', '.join(gaps)}) - each is above with its fix")
    return "\n".join(lines) + "\n"


def _versions(report: DoctorReport) -> dict[str, object]:
    from lair import __version__

    return {
        "lair": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "nodes": {
            n.name: {
                "os": n.os,
                "kernel": n.kernel,
                "runtimes": {r.name: r.version for r in n.runtimes if r.running},
                "drivers": sorted({g.driver for g in n.gpus}),
                "gpus": [g.name for g in n.gpus],
            }
            for n in report.nodes
        },
    }


def _run_logs() -> dict[str, str]:
    from lair.launch.journal import list_journals

    out: dict[str, str] = {}
    journals = sorted(list_journals(), key=lambda j: j.dir.stat().st_mtime if j.dir.exists() else 0)
    for j in journals[-RUN_LOGS:]:
        events = j.dir / "events.log"
        if events.exists():
            out[j.dir.name] = events.read_text(errors="replace")[-20000:]
    return out


def write_bundle(
    path: Path, report: DoctorReport, secrets: Sequence[str] = (), recipe: Path | None = None
) -> list[str]:
    """Write the bundle; returns its member names."""
    red: Callable[[str], str] = lambda t: redact_text(t, secrets)  # noqa: E731
    data = redact_tree(report.model_dump(mode="json"), secrets)  # JSON: value by value, never its text
    members = {
        "findings.txt": render_report(report),
        **{f"nodes/{n.name}.txt": n.raw or (n.error or "") for n in report.nodes},
        **{f"runs/{name}.log": text for name, text in _run_logs().items()},
    }
    if recipe is not None and recipe.is_file():
        members["recipe.toml"] = recipe.read_text(errors="replace")
    members = {k: red(v) for k, v in members.items()}
    members["findings.json"] = json.dumps(data, indent=2)
    members["versions.json"] = json.dumps(redact_tree(_versions(report), secrets), indent=2)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, text in sorted(members.items()):
            blob = text.encode()
            info = tarfile.TarInfo(f"lair-doctor/{name}")
            info.size, info.mtime, info.mode = len(blob), int(time.time()), 0o644
            tar.addfile(info, io.BytesIO(blob))
    return list(members)
