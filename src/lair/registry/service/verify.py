"""Verification of an uploaded run report, as a pure function of its files (no HTTP, no database).

:func:`verify_report` checks, and lists every reason it refuses:

1. the files a report folder holds (``results.json``, ``requests.jsonl``, ``fingerprint.json``, the
   recipe as run) are there and parse, and ``fingerprint.json`` is the fingerprint in the results;
2. the report names its source recipe by the sha256 of its canonical model and a published revision
   has that sha256 (``find_revision``); the recipe as run is that revision with only placeholder
   values filled in (:mod:`.asrun`);
3. every cell agrees with its recomputation from the raw timings and is a clean measurement
   (:mod:`.recompute`);
4. no row is above 100% of the roofline of the fingerprint's GPUs. A row is ``verified`` only when
   it was physically checked: the fingerprint names GPUs the catalog knows by their whole name
   (nvidia-smi's spellings), the registry knows the model's facts, and every figure the row holds
   has a ceiling it stays under. Otherwise the row is accepted as ``reported-by-report`` (the
   report's word, consistent with its raw timings) and its ``note`` says why (:func:`row_tier`). A
   cell whose every repeat is not on the roofline, whose repeats' decode speeds disagree, or whose
   energy figures no GPU of the fingerprint could have drawn is not verified either (:mod:`.bounds`);
5. with an evaluation (``lair eval --recipe``, ``lair launch --eval``), every suite agrees with its
   per-sample records, re-scored where the registry can (:mod:`.rescore`). A report may hold an
   evaluation and no speed cells.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lair.recipe import Recipe
from lair.registry.service.archive import refuse
from lair.registry.service.asrun import check_as_run
from lair.registry.service.bounds import power_reasons, repeats_of, roofline_reasons, spread_reasons
from lair.registry.service.canonical import recipe_from_canonical
from lair.registry.service.certificates import summary
from lair.registry.service.imported_rows import imported_digest, imported_rows
from lair.registry.service.load_cells import LOAD_FILE, check_load
from lair.registry.service.noise import noisy_rows
from lair.registry.service.output_gate import invalid_output_rows
from lair.registry.service.recompute import NO_CERTIFICATE, Certified, by_cell, check_cells, check_certificate
from lair.registry.service.report_schema import (
    Fingerprint,
    LoadRow,
    RequestRow,
    Results,
    SampleRow,
    SessionRow,
    loads,
    parse_document,
    parse_rows,
)
from lair.registry.service.rescore import SAMPLES, check_eval
from lair.registry.service.warm_cells import SESSIONS_FILE, check_sessions

__all__ = ["BY_REPORT", "VERIFIED", "Found", "Verified", "rig_fingerprint", "row_tier", "verify_report"]

VERIFIED = "verified"
"""The tier of a row recomputed from its raw timings and physically checked on the roofline."""
BY_REPORT = "reported-by-report"
"""The tier of a row from an accepted report that could not be physically checked (its note says why)."""

REQUIRED = ("results.json", "requests.jsonl", "fingerprint.json")


@dataclass(frozen=True)
class Found:
    """The published revision a report names."""

    slug: str
    revision: int
    toml: str


@dataclass
class Verified:
    """An accepted report: its revision, its speed and quality rows, the rig and the digest that
    dedupes it."""

    found: Found
    digest: str
    rig: str
    fingerprint: dict[str, Any]
    run_name: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    quality: list[dict[str, Any]] = field(default_factory=list)
    load: list[dict[str, Any]] = field(default_factory=list)
    """Open-loop cells and sweeps, as :func:`.load_cells.check_load` recomputed them, and warm
    multi-turn cells (kind ``warm``), as :func:`.warm_cells.check_sessions` did."""


def rig_fingerprint(fp: dict[str, Any]) -> str:
    """The rig's identity: a hash of its hardware (GPUs, CPU, memory), not of its software."""
    gpus = fp.get("gpus") or {}
    cpu = fp.get("cpu") or {}
    hw = {
        "gpus": {k: gpus.get(k) for k in ("count", "models", "memory")} if gpus else None,
        "cpu": {k: cpu.get(k) for k in ("model", "count", "arch")},
        "ram_bytes": fp.get("ram_bytes"),
    }
    return hashlib.sha256(json.dumps(hw, sort_keys=True).encode()).hexdigest()


def _json(files: dict[str, bytes], name: str, reasons: list[str]) -> Any:
    """The typed document ``name`` (:mod:`.report_schema`), or None with the reasons."""
    if name not in files:
        reasons.append(f"{name} missing from the report")
        return None
    model = Results if name == "results.json" else Fingerprint
    doc, why = parse_document(name, files[name], model)
    reasons += why
    return doc


def _rows(files: dict[str, bytes], reasons: list[str], name: str = "requests.jsonl") -> list[dict[str, Any]]:
    """The typed rows of ``requests.jsonl`` (or of the evaluation's samples), with the reasons."""
    raw = files.get(name, b"")
    if name == SAMPLES:
        rows, why = parse_rows(raw, name, SampleRow)
    elif name == LOAD_FILE:
        rows, why = parse_rows(raw, name, LoadRow)
    elif name == SESSIONS_FILE:
        rows, why = parse_rows(raw, name, SessionRow)
    else:
        rows, why = parse_rows(raw, name, RequestRow)
    reasons += why
    return rows


def _kind_of(files: dict[str, bytes]) -> str | None:
    """Why results.json is another kind of JSON object, before its fields are typed (None: it says
    it is a run report, or it is no object at all, which the schema words)."""
    try:
        head = loads(files["results.json"])
    except (KeyError, ValueError):
        return None
    if not isinstance(head, dict) or head.get("kind") == "lair.run_report":
        return None
    return f"results.json is not a lair run report: kind: is {head.get('kind')!r}, not 'lair.run_report'"


def _documents(files: dict[str, bytes], reasons: list[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """results.json and the rows of requests.jsonl, every file typed; ({}, []) when one is refused
    (its reasons name the file and the field), so nothing later reads an untyped value."""
    if (not_a_report := _kind_of(files)) is not None:
        reasons.append(not_a_report)
        return {}, []
    start = len(reasons)
    doc = _json(files, "results.json", reasons)
    fp = _json(files, "fingerprint.json", reasons)
    if "requests.jsonl" not in files:
        reasons.append("requests.jsonl missing from the report")
    rows = _rows(files, reasons)
    if SAMPLES in files:
        _rows(files, reasons, SAMPLES)
    if doc is None or len(reasons) > start:
        return {}, []
    if fp is not None and fp != doc.get("fingerprint"):
        reasons.append("fingerprint.json differs from the fingerprint in results.json")
    return doc, rows


def _revision(
    doc: dict[str, Any], files: dict[str, bytes], find: Callable[[str], Found | None], reasons: list[str]
) -> Found | None:
    info = doc.get("recipe") or {}
    sha = info.get("model_sha256")
    if not isinstance(sha, str):
        reasons.append("the report does not name its source recipe (recipe.model_sha256 missing)")
        return None
    found = find(sha)
    if found is None:
        reasons.append(f"no published revision has the source recipe's sha256 {sha}")
        return None
    name = str(info.get("file") or "")
    if name not in files:
        reasons.append(f"the recipe as run ({name or 'recipe.file'}) is missing from the report")
        return found
    reasons += check_as_run(found.toml, files[name].decode(errors="replace"))
    return found


@dataclass(frozen=True)
class Roofline:
    """The roofline of a report's cells on the GPUs its fingerprint names: ``rate`` (context,
    concurrency, prefill tok/s, decode tok/s per stream) -> the rating; ``hw`` those GPUs."""

    rate: Callable[[int, int, float | None, float | None], dict[str, Any]]
    hw: Any


def _roofline(recipe: Recipe, fp: dict[str, Any]) -> tuple[Roofline | None, str]:
    """The roofline of the GPUs the fingerprint names (never the recipe's declared ones), or None and
    why there is none (model facts unknown, no GPU or an unknown one in the fingerprint)."""
    from lair.fit import Measured, layout_from_recipe, rate_row
    from lair.registry.service.fitting import fingerprint_hardware, table_facts

    facts, why = table_facts(recipe)
    if facts is None:
        return None, why
    hw, why = fingerprint_hardware(fp)
    if hw is None:
        return None, why
    layout, gpus = layout_from_recipe(recipe), f"{hw.gpus}x {hw.device.name}"

    def rate(ctx: int, conc: int, prefill: float | None, decode: float | None) -> dict[str, Any]:
        m = Measured(ctx, conc, prefill, decode)
        return rate_row(facts, hw, layout, m, decode_is_aggregate=False).as_dict() | {"gpus": gpus}

    return Roofline(rate, hw), ""


def _shape(c: dict[str, Any]) -> tuple[int, int]:
    """The (prompt tokens, concurrency) a cell is rated at."""
    return int(c.get("prompt_tokens") or c["context"]), int(c["concurrency"])


def _ratings(roof: Roofline | None, why: str, cells: list[dict[str, Any]]) -> tuple[list[Any], str]:
    """Each cell's headline on the roofline, or None for every cell and why there is no roofline."""
    if roof is None:
        return [None] * len(cells), why
    return [
        roof.rate(*_shape(c), c.get("prefill_tok_s"), c.get("decode_tok_s_per_stream")) for c in cells
    ], ""


def _bounds(
    roof: Roofline | None, cells: list[dict[str, Any]], rows: list[dict[str, Any]]
) -> dict[tuple[int, int], list[str]]:
    """Why each cell that has a roofline fails :mod:`.bounds` (its repeats, its energy); a cell with
    reasons is not verified."""
    if roof is None:
        return {}
    groups, out = by_cell(rows), {}
    for c in cells:
        key, (ctx, conc) = (int(c["context"]), int(c["concurrency"])), _shape(c)
        where, reps = f"cell ctx {key[0]} x{key[1]}", groups.get(key, {})
        repeats = repeats_of(reps)
        why = roofline_reasons(where, repeats, functools.partial(roof.rate, ctx, conc))
        why += spread_reasons(where, repeats)
        why += power_reasons(where, c.get("certificate") or {}, roof.hw.device, roof.hw.gpus, reps)
        out[key] = why
    return out


def _tier(rate: dict[str, Any] | None, why: str) -> tuple[str, str]:
    """(tier, note) of a row that is not above its roofline: verified only when every figure it
    holds was held against a ceiling."""
    if rate is None:
        return BY_REPORT, why
    unchecked = [
        f"{name} {rate[f'{name}_tok_s']:,.1f} tok/s has no ceiling on {rate['gpus']} "
        "(the catalog has no figure to bound it)"
        for name in ("decode", "prefill")
        if rate.get(f"{name}_tok_s") is not None and not rate.get(f"{name}_roofline_tok_s")
    ]
    if rate.get("decode_tok_s") is None and rate.get("prefill_tok_s") is None:
        unchecked.append("no decode or prefill speed to hold against the roofline")
    return (BY_REPORT, "not physically checked: " + "; ".join(unchecked)) if unchecked else (VERIFIED, "")


def row_tier(recipe: Recipe, fp: dict[str, Any], cell: dict[str, Any]) -> tuple[str, str]:
    """(tier, note) of one row from a report (``cell``: context, concurrency, prompt_tokens,
    prefill_tok_s, decode_tok_s_per_stream) by the rules an upload follows now; a row above its
    roofline, which an upload refuses, is ``reported-by-report`` saying so (a stored row from before
    the rules is re-tiered, never deleted: migration 0008)."""
    roof, why = _roofline(recipe, fp)
    (rate,), why = _ratings(roof, why, [cell])
    if rate is not None and rate["implausible"]:
        return BY_REPORT, f"above 100% of the roofline ({rate['why']})"
    return _tier(rate, why)


def _certified_tier(tier: str, note: str, cert: Certified, key: tuple[int, int]) -> tuple[str, str]:
    """A report without a certificate is at most reported-by-report; a certificate's notes (GPU
    throttling) are added to the row's."""
    if not cert.present:
        return BY_REPORT, "; ".join(x for x in (note, NO_CERTIFICATE) if x)
    return tier, "; ".join([x for x in (note, *cert.notes.get(key, [])) if x])


def _bounded_tier(tier: str, note: str, reasons: list[str]) -> tuple[str, str]:
    """A cell that fails :mod:`.bounds` is reported-by-report, the reasons first in its note."""
    if tier != VERIFIED or not reasons:
        return tier, note
    return BY_REPORT, "; ".join([*reasons, *([note] if note else [])])


def _speed_rows(
    cells: list[dict[str, Any]],
    ratings: list[Any],
    why: str,
    cert: Certified,
    run: dict[str, Any] | None,
    bounds: dict[tuple[int, int], list[str]],
) -> list[dict[str, Any]]:
    """The rows of the cells: figures, roofline, tier and note, the cell's energy and what the page
    shows of its certificate (:func:`~.certificates.summary`; None: the cell has none)."""
    out = []
    for c, rate in zip(cells, ratings, strict=True):
        key = (int(c["context"]), int(c["concurrency"]))
        tier, note = _bounded_tier(*_certified_tier(*_tier(rate, why), cert, key), bounds.get(key, []))
        out.append(
            {
                "context": c["context"],
                "concurrency": c["concurrency"],
                "prompt_tokens": c.get("prompt_tokens"),
                "ttft_ms": c.get("ttft_ms_p50"),
                "prefill_tok_s": c.get("prefill_tok_s"),
                "decode_tok_s": c.get("decode_tok_s_aggregate"),
                "decode_tok_s_per_stream": c.get("decode_tok_s_per_stream"),
                "roofline": rate or {"missing": why},
                "provenance": tier,
                "note": note,
                "energy": (c.get("certificate") or {}).get("energy"),
                "certificate": summary(c.get("certificate"), run),
            }
        )
    return out


def digest_of(rows: list[dict[str, Any]], doc: dict[str, Any] | None = None, samples: bytes = b"") -> str:
    """The report's identity: its raw timings (every run's differ), independent of file layout; with
    an evaluation, also its start and end and its per-sample records (greedy outputs repeat)."""
    ev = (doc or {}).get("eval")
    key: Any = rows
    if ev:
        when = [ev.get("started_at"), ev.get("finished_at")]
        key = {"requests": rows, "eval": when, "samples": hashlib.sha256(samples).hexdigest()}
    blob = json.dumps(key, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def verify_report(files: dict[str, bytes], find_revision: Callable[[str], Found | None]) -> Verified:
    """The accepted report, or an :class:`~lair.errors.Invalid` (422) listing every reason it was refused."""
    reasons: list[str] = []
    doc, rows = _documents(files, reasons)
    if not doc:
        raise refuse("report_refused", reasons or ["not a lair run report"])
    found = _revision(doc, files, find_revision, reasons)
    cells = doc["bench"].get("cells") or []
    quality, eval_reasons = check_eval(doc, files)
    imported = doc.get("imported")  # a peer's figures: nothing of lair's bench to recompute (.imported_rows)
    load_section, sessions = doc["bench"].get("load"), doc["bench"].get("sessions")
    if (cells or not (doc.get("eval") or load_section or sessions)) and not imported:
        reasons += check_cells(doc["bench"], rows)[1]
    load_rows = _rows(files, reasons, LOAD_FILE) if LOAD_FILE in files else []
    load, load_reasons = check_load(load_section, load_rows)
    session_rows = _rows(files, reasons, SESSIONS_FILE) if SESSIONS_FILE in files else []
    warm, warm_reasons = check_sessions(sessions, session_rows)
    reasons += load_reasons + warm_reasons
    cert = check_certificate(doc["bench"], doc.get("fingerprint"))
    reasons += cert.reasons if not imported else []
    reasons += eval_reasons
    fp = doc.get("fingerprint") or {}
    roof, why = _roofline(recipe_from_canonical(found.toml), fp) if found else (None, "")
    ratings, why = _ratings(roof, why, cells) if found else ([], "")
    for cell, rate in zip(cells, ratings, strict=False):
        if rate and rate["implausible"]:
            where = f"cell ctx {cell['context']} x{cell['concurrency']}"
            reasons.append(f"{where}: above 100% of the roofline ({rate['why']})")
    if reasons or found is None:
        raise refuse("report_refused", reasons)
    bounds = _bounds(roof, cells, rows)
    rows_out = _speed_rows(cells, ratings, why, cert, doc["bench"].get("certificate"), bounds)
    rows_out = noisy_rows(rows_out, cells)  # a noisy cell is never verified (.noise)
    options = doc["bench"].get("options") or {}
    rows_out = invalid_output_rows(rows_out, cells, rows, options)  # nor one with invalid answers
    digest = digest_of(rows, doc, files.get(SAMPLES, b""))
    if imported:
        rows_out, digest = imported_rows(rows_out, imported, BY_REPORT), imported_digest(imported)
    if (load or warm) and not rows:  # an open-loop or warm run alone: its identity is its rows
        digest = digest_of(load_rows + session_rows)
    run_name = str(doc.get("run_name") or "")
    return Verified(found, digest, rig_fingerprint(fp), fp, run_name, rows_out, quality, load + warm)
