"""``lair reproduce REF``: a published speed row run again on this rig, side by side; ``lair rebench
RECIPE...``: pinned recipes re-run and submitted (for a timer), so regressions show up unasked.

Exit codes: 0 reproduced (rebench: every recipe reproduced or skipped); 7 stopped before launching:
``lair fit`` says it does not fit, or cannot tell; 8 not reproduced (a figure outside the row's noise
band); 9 noisy (something else used the machine, or a cell's repeats disagree: no verdict, nothing
submitted); 10 inconclusive (this run's own repeats spread wider than the row's band: no verdict,
nothing submitted); 1 other errors (the launch, failed requests); 2 bad usage; 3-6 the registry's (refused,
duplicate, not allowed, unreachable: as ``lair submit``). The noise band is :mod:`lair.replication`'s
(docs/reproduce.md).
"""

from __future__ import annotations

import argparse
from typing import Any

from lair.cli._common import dump_json, err
from lair.vocabulary import NOT_REPRODUCED, REPRODUCED

__all__ = ["register"]


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rig", metavar="R", help="rig: placeholder values, GPUs for lair fit, $/Mtok prices")
    p.add_argument(
        "--set", dest="values", action="append", default=[], metavar="NAME=VALUE",
        help="a placeholder value (over the rig's; repeatable; never a secret)",
    )  # fmt: skip
    p.add_argument("-y", "--yes", action="store_true", help="accept what the untrusted revision asks for")
    p.add_argument(
        "--dir",
        metavar="DIR",
        help="where the revision and its report go (default ./lair-reproduce/SLUG-REV)",
    )
    p.add_argument("--skip-fit", action="store_true", help="launch even when lair fit cannot check the rig")
    p.add_argument("--json", action="store_true", help="print one JSON document")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "reproduce",
        help="run a published speed row again on this rig and compare (theirs, yours, delta, noise band)",
        description="REF: a recipe URL or slug, optionally @REVISION and #ROW (the row id on the recipe's "
        "page, e.g. tiny-cpu@1#42, or #report-ID for every row of a report). Pulls the revision "
        "(untrusted), runs lair fit, launches it with the rig's placeholder values, runs the row's cells "
        "with its report's bench options and prints the comparison.",
    )
    p.add_argument("ref", metavar="REF")
    _common(p)
    p.add_argument(
        "--submit", action="store_true", help="upload the report as a replication attempt of the row"
    )
    p.add_argument("--gpu", metavar="NAME", help="GPU for lair fit (default: the rig's, else nvidia-smi's)")
    p.add_argument("--gpus", type=int, metavar="N", help="GPU count for lair fit")
    p.set_defaults(handler=cmd_reproduce)
    r = sub.add_parser(
        "rebench",
        help="re-run pinned recipes (SLUG@REV) on this rig and submit, unless measured here since DATE",
        description="Each RECIPE (slug, SLUG@REV or URL) is reproduced from its revision's newest report "
        "(this rig's, else anyone's) and submitted as a replication attempt, unless this rig uploaded a "
        "report of that revision since --since. For a timer: docs/reproduce.md.",
    )
    r.add_argument("recipes", nargs="+", metavar="RECIPE")
    r.add_argument(
        "--since", metavar="DATE", help="skip a recipe this rig measured since: 2026-12-01, 7d, 12h"
    )
    _common(r)
    r.set_defaults(handler=cmd_rebench)


def _client(registry: str | None) -> Any:
    from lair.client import Client, Credentials

    creds = Credentials.load()
    if registry and registry.rstrip("/") != creds.url:  # the stored token is another registry's
        import os

        creds = Credentials(registry.rstrip("/"), os.environ.get("LAIR_TOKEN") or None)
    return Client(creds)


def _options(args: argparse.Namespace, submit: bool) -> Any:
    from pathlib import Path

    from lair.cli._reproduce import Options
    from lair.cli.launch_cmds import _set_values

    return Options(
        rig=args.rig, values=_set_values(args.values), accept=args.yes, submit=submit,
        workdir=Path(args.dir) if args.dir else None, skip_fit=args.skip_fit,
        gpu=getattr(args, "gpu", None), gpus=getattr(args, "gpus", None),
    )  # fmt: skip


def _num(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:,.1f}" if abs(x) >= 10 else f"{x:,.3g}"


_WORDS = {
    "replicated": REPRODUCED,  # lair.vocabulary: an attempt is never "replicated"
    "inconclusive": "INCONCLUSIVE (this run's own repeats spread wider than the band)",
}


def render(out: Any) -> str:
    """The side-by-side table and the verdict lines (``out``: an :class:`Outcome`)."""
    from lair.table import text_table

    head = ["row", "cell", "figure", "theirs", "band", "yours", "delta", "noise band"]
    rows = []
    for r in out.rows:
        for f in r.figures:
            b = f["band"]
            d = "—" if f["delta_pct"] is None else f"{f['delta_pct']:+.1f}%"
            where = "—" if f["inside"] is None else "inside" if f["inside"] else "OUTSIDE"
            band = f"{_num(b['low'])} .. {_num(b['high'])}"
            rate = r.offered_rate
            cell = f"{r.context} x{r.concurrency}" if rate is None else f"{r.context} @ {rate:g}/s"
            rows.append([r.row_id, cell, f["label"], _num(f["theirs"]), band, _num(f["yours"]), d, where])
    lines = [text_table(head, rows), ""]
    lines.append(f"engine: theirs {out.engine.get('theirs', '?')}; yours {out.engine.get('yours', '?')}")
    if out.image.get("theirs") or out.image.get("yours"):
        same = set(out.image["theirs"]) & set(out.image["yours"])
        yours = ", ".join(out.image["yours"]) or "?"
        lines.append(f"image: {'the same digest' if same else 'DIFFERENT digests'} ({yours})")
    for r in out.rows:
        outside = [f"{f['label']} {f['delta_pct']:+.1f}%" for f in r.figures if f["inside"] is False]
        word = _WORDS.get(r.outcome, NOT_REPRODUCED.replace("not", "NOT", 1))
        lines.append(
            f"{r.row_id}: {word}" + (f" (outside the band: {', '.join(outside)})" if outside else "")
        )
    return "\n".join(lines)


def _said(submitted: dict[str, Any] | None, out: Any) -> None:
    if not submitted:
        return
    err(f"submitted: report {submitted['id']} as a replication attempt of {out.ref}")
    for link in submitted.get("replication") or []:
        mine = next((r.outcome for r in out.rows if r.row_id.endswith(f"#{link['row']}")), None)
        note = (
            "" if mine in (None, link["outcome"]) else f" (here: {mine}, by figures rounded in results.json)"
        )
        err(f"  the registry: row {link['row']} {link['outcome']}{note}")
    err(f"  {out.registry}/recipes/{out.slug}")


def _one(client: Any, ref: Any, opts: Any, show: str) -> tuple[int, dict[str, Any]]:
    """Reproduce one reference; (exit code, the outcome document). ``show``: ``text`` (the table on
    stdout), ``json`` (the document on stdout) or ``none``."""
    from lair.cli._reproduce import EXIT_NOT_FIT, EXIT_NOT_REPRODUCED, Stopped, reproduce

    try:
        out = reproduce(client, ref, opts)
    except Stopped as stop:
        doc = stop.outcome.model_dump(mode="json") | {"error": stop.error.as_dict()}
        if show == "json":
            dump_json(doc)
        elif show == "text" and stop.outcome.rows:
            print(render(stop.outcome))
        if show != "json":
            err(f"error: {stop.error.render()}")
        return (EXIT_NOT_FIT if stop.outcome.outcome == "not-fit" else int(stop.error.exit_code)), doc
    doc = out.model_dump(mode="json")
    if show == "json":
        dump_json(doc)
    elif show == "text":
        print(render(out))
        err(f"report: {out.report}")
        _said(out.submitted, out)
    return (0 if out.outcome == "replicated" else EXIT_NOT_REPRODUCED), doc


def cmd_reproduce(args: argparse.Namespace) -> int:
    from lair.replication import parse_ref

    ref = parse_ref(args.ref)
    return _one(_client(ref.registry), ref, _options(args, args.submit), "json" if args.json else "text")[0]


def parse_since(text: str, now: Any = None) -> Any:
    """``2026-12-01`` (UTC midnight), an ISO time, or ``7d`` / ``12h`` ago, as an aware datetime."""
    import re
    from datetime import UTC, datetime, timedelta

    from lair.errors import ConfigError

    now = now or datetime.now(UTC)
    m = re.fullmatch(r"(\d{1,5})([dh])", text.strip())
    if m:
        return now - timedelta(**{"days" if m[2] == "d" else "hours": int(m[1])})
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(
            f"--since {text!r}: not a date", hint="2026-12-01, 2026-12-01T06:00, 7d or 12h"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _created(row: dict[str, Any]) -> Any:
    """A row's ``created_at`` as an aware datetime (SQLite gives naive UTC times)."""
    from datetime import UTC, datetime

    when = datetime.fromisoformat(str(row["created_at"]))
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def rebench_plan(doc: dict[str, Any], mine: set[str], since: Any) -> tuple[str | None, str]:
    """(the report id to reproduce, why) for one revision's document; None: skip (this machine
    measured it since ``since``), or nothing to re-run (no report yet). ``mine``: the report ids this
    machine submitted (:mod:`lair.client.submitted`), never a row's public rig hash, which anyone
    can copy into a forged report."""
    rows = [m for m in doc.get("measurements") or [] if m.get("report_id") and not m.get("retracted")]
    rows = [m for m in rows if m["revision"] == doc["revision"]]
    own = [m for m in rows if str(m["report_id"]) in mine]
    fresh = [m for m in own if since is not None and _created(m) >= since]
    if fresh:
        return None, f"measured on this rig on {max(_created(m) for m in fresh).date().isoformat()}"
    pool = own or rows
    if not pool:
        return None, "no report of this revision to re-run (lair launch --bench --submit makes the first)"
    newest = max(pool, key=lambda m: (_created(m), m["id"]))
    return str(
        newest["report_id"]
    ), "this rig's newest report" if own else "the newest report (another rig's)"


def cmd_rebench(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from lair.cli._reproduce import EXIT_NOT_REPRODUCED
    from lair.errors import LairError
    from lair.replication import parse_ref

    since = parse_since(args.since) if args.since else None
    from lair.client import submitted

    worst, results = 0, []
    for text in args.recipes:
        ref = parse_ref(text)
        client = _client(ref.registry)
        try:
            mine = submitted.submitted(client.creds.url)
            report, why = rebench_plan(client.recipe(ref.slug, ref.revision), mine, since)
            err(f"{text}: {'skipped: ' if report is None else 're-running '}{why}")
            if report is None:
                results.append({"recipe": text, "skipped": why})
                continue
            target = replace(ref, row=None, report=report)
            rc, doc = _one(client, target, _options(args, True), "none" if args.json else "text")
        except LairError as exc:
            err(f"error: {text}: {exc.render()}")
            rc, doc = exc.exit_code, {"error": exc.as_dict()}
        results.append({"recipe": text, "exit": rc, "outcome": doc})
        worst = rc if worst in (0, EXIT_NOT_REPRODUCED) and rc else worst
    if args.json:
        dump_json({"ok": worst == 0, "recipes": results})
    return worst
