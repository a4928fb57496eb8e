"""The flow of ``lair reproduce``: a published row, run again on this rig, side by side.

    resolve(client, ref)      the row(s) a reference names, their report's options and band
    pull                      the revision pulled (untrusted)
    pin_image, bench_options  their run's digest of the recipe's own image repository (run by
                              digest, never re-tagged) and their bench options (within the CLI's
                              limits), both shown before the acceptance
    prepare                   planned through the consent gate: acceptance shown or asked
    check_fit                 lair fit on the rig's GPUs (skipped for a CPU-only recipe); stops here
    launch + bench            lair launch's code path, the row's cells with the report's options
    compare                   theirs, yours, delta %, inside/outside the band (lair.replication)
    refuse noise              noisy cells (something else used the machine) or a run whose own
                              repeats spread wider than the row's band: no verdict, no upload
    submit (--submit)         the report uploaded with ?replicates=ROW: the registry's own verdict

A load report (open-loop rate cells or a sweep, no speed rows: ``SLUG@REV#report-ID``, or the newest
such report when the recipe has no speed row) runs again with its report's load options (rates,
arrival, seed, requests, sweep, SLO); each of its cells is compared, by context and offered rate,
on :data:`lair.replication.LOAD_METRICS` within :data:`~lair.replication.LOAD_FLOOR`. A cell the new
run lacks (its sweep stopped sooner) is not reproduced. Warm multi-turn cells are not compared.
With ``--submit`` such a run is uploaded as a report of its own (the registry links replication
attempts to speed rows only).

Every step reuses the command that owns it (``lair pull``'s
:func:`lair.launch.pulled.pull_revision`, ``lair fit``'s :func:`fit_recipe`, ``lair launch``'s request
and report); nothing here re-implements them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from lair.cli._bench_options import rig_pricing
from lair.cli._common import err
from lair.errors import ConfigError, FitError, InconclusiveError, NoisyError
from lair.replication import (
    INCONCLUSIVE,
    NOT_REPRODUCED,
    REPLICATED,
    Comparison,
    RecipeRef,
    RowRef,
    compare,
    compare_load,
    verdict,
)

__all__ = [
    "EXIT_INCONCLUSIVE",
    "EXIT_NOISY",
    "EXIT_NOT_FIT",
    "EXIT_NOT_REPRODUCED",
    "Options",
    "Outcome",
    "Theirs",
    "reproduce",
    "resolve",
]

EXIT_NOT_FIT = 7
"""``lair reproduce`` stopped before launching: ``lair fit`` says it does not fit (or cannot tell)."""
EXIT_NOT_REPRODUCED = 8
"""The run finished and at least one figure is outside the row's noise band."""
EXIT_NOISY = NoisyError.exit_code
"""9: the run finished but a cell is noisy (other processes' CPU, steal, another GPU process or its
repeats past the limits of :mod:`lair.bench.definitions`): no verdict, nothing submitted."""
EXIT_INCONCLUSIVE = InconclusiveError.exit_code
"""10: the run's own repeats of a figure spread wider than the row's band: it can say neither
reproduced nor not reproduced (:data:`lair.replication.INCONCLUSIVE`); nothing submitted."""

_BENCH_KEYS = (
    "decode_tokens", "repeat", "force_output", "fresh_prompts", "warmup_requests", "idle_gap_s",
    "read_interval_ms", "order", "seed", "request_timeout_s", "scrape_interval_s", "max_context",
)  # fmt: skip
"""The bench options of the row's report run again as they were (the cells' definitions)."""

_LOAD_KEYS = (
    "rates", "arrival", "burstiness", "rate_requests", "sweep", "slo", "user_speed", "max_duration_s",
    "max_requests", "max_open",
)  # fmt: skip
"""And those of a load report (its cells' schedule, bounds and SLO)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RowOutcome(_Model):
    row_id: str = Field(description="the row reproduced (SLUG@REV#ID; a load cell: its report's id)")
    context: int
    concurrency: int = Field(description="the cell's streams (a load cell: 0, open loop)")
    offered_rate: float | None = Field(None, description="a load cell's offered rate, requests per second")
    outcome: str = Field(description="replicated, not-reproduced or inconclusive, by lair.replication's rule")
    figures: list[dict[str, Any]] = Field(description="theirs, yours, delta_pct, band, inside per figure")


class Outcome(_Model):
    """What ``lair reproduce --json`` prints."""

    ok: bool = True
    ref: str = Field(description="the row id (or report id) reproduced")
    registry: str
    slug: str
    revision: int
    recipe_file: str
    report: str | None = Field(None, description="the new run report folder")
    fit: dict[str, Any] = Field(
        default_factory=dict, description="lair fit's verdict and reasons, or why skipped"
    )
    engine: dict[str, Any] = Field(
        default_factory=dict, description="engine name and version, theirs and yours"
    )
    image: dict[str, Any] = Field(default_factory=dict, description="image digests, theirs and yours")
    rows: list[RowOutcome] = Field(default_factory=list)
    outcome: str = Field(
        "",
        description="replicated when every row is; inconclusive when a row is; else not-reproduced; "
        "not-fit, noisy: stopped",
    )
    submitted: dict[str, Any] | None = Field(None, description="the registry's answer to --submit")


@dataclass
class Theirs:
    """One published row with what its report says about how it was measured."""

    row: dict[str, Any]
    stats: dict[str, Any] | None = None
    options: dict[str, Any] = field(default_factory=dict)
    fingerprint: dict[str, Any] = field(default_factory=dict)
    load: list[dict[str, Any]] = field(default_factory=list)
    """A load report's rate cells as the registry recomputed them (each with its ``context``); the
    ``row`` then stands for the report (its context the largest, concurrency 1)."""


@dataclass
class Options:
    """The command line of ``lair reproduce`` (see its ``--help``)."""

    rig: str | None = None
    values: dict[str, str] = field(default_factory=dict)
    accept: bool = False
    submit: bool = False
    workdir: Path | None = None
    skip_fit: bool = False
    gpu: str | None = None
    gpus: int | None = None


def _load_report(doc: dict[str, Any], ref: RecipeRef) -> dict[str, Any] | None:
    """The load report a reference names (``#report-ID``), or with no row or report named the newest
    load report of the document's revision; None when there is none."""
    if ref.row is not None:
        return None
    groups = doc.get("load") or []
    if ref.report is not None:
        return next((g for g in groups if g["report_id"] == ref.report), None)
    return next((g for g in groups if g["revision"] == doc["revision"]), None)


def _pick(doc: dict[str, Any], ref: RecipeRef) -> list[dict[str, Any]]:
    rows = [m for m in doc.get("measurements") or [] if not m.get("retracted")]
    if ref.row is not None:
        chosen = [m for m in rows if m["id"] == ref.row]
    elif ref.report is not None:
        chosen = [m for m in rows if m.get("report_id") == ref.report]
    else:
        mine = [m for m in rows if m.get("report_id") and m["revision"] == doc["revision"]]
        newest = max(mine, key=lambda m: (m["created_at"], m["id"]))["report_id"] if mine else None
        chosen = [m for m in mine if m["report_id"] == newest]
    if not chosen:
        what = (
            f"#{ref.row}"
            if ref.row is not None
            else f"#report-{ref.report}"
            if ref.report
            else "from a report"
        )
        raise ConfigError(
            f"{ref.slug}@{doc['revision']} has no row {what} to reproduce (or it was retracted)",
            hint=f"pick a row id on the recipe's page: lair reproduce {ref.slug}@{doc['revision']}#ROW",
        )
    return chosen


def resolve(client: Any, ref: RecipeRef) -> tuple[dict[str, Any], list[Theirs], RowRef]:
    """(the revision's document, the rows to reproduce with their reports' options and bands, the id
    an upload links to). A row named without a revision is looked up in the latest document, then
    its own revision is used."""
    from lair.report.raw_cells import cell_stats

    doc = client.recipe(ref.slug, ref.revision)
    load = _load_report(doc, ref)
    if load is not None and not _has_rows(doc, ref):
        return _resolve_load(client, ref, doc, load)
    rows = _pick(doc, ref)
    if rows[0]["revision"] != doc["revision"]:
        doc = client.recipe(ref.slug, int(rows[0]["revision"]))
    files: dict[str, tuple[bytes, bytes]] = {}
    out = []
    for r in rows:
        rid = r.get("report_id")
        if not rid:
            out.append(Theirs(r))
            continue
        if rid not in files:
            files[rid] = (client.report_file(rid, "results.json"), client.report_file(rid, "requests.jsonl"))
        results, requests = files[rid]
        bench = json.loads(results).get("bench") or {}
        stats = cell_stats(results, requests, int(r["context"]), int(r["concurrency"]))
        out.append(Theirs(r, stats, bench.get("options") or {}, json.loads(results).get("fingerprint") or {}))
    slug, rev = ref.slug, int(doc["revision"])
    link = (
        RowRef(slug, rev, row=rows[0]["id"])
        if len(rows) == 1
        else RowRef(slug, rev, report=rows[0]["report_id"])
    )
    return doc, out, link


def _has_rows(doc: dict[str, Any], ref: RecipeRef) -> bool:
    rows = [m for m in doc.get("measurements") or [] if not m.get("retracted") and m.get("report_id")]
    if ref.report is not None:
        return any(m["report_id"] == ref.report for m in rows)
    return any(m["revision"] == doc["revision"] for m in rows)


def _resolve_load(
    client: Any, ref: RecipeRef, doc: dict[str, Any], group: dict[str, Any]
) -> tuple[dict[str, Any], list[Theirs], RowRef]:
    """:func:`resolve` for a load report: one :class:`Theirs` standing for the report, its cells."""
    if group["revision"] != doc["revision"]:
        doc = client.recipe(ref.slug, int(group["revision"]))
    results = json.loads(client.report_file(group["report_id"], "results.json"))
    bench = results.get("bench") or {}
    cells = [c | {"context": g["context"]} for g in group["contexts"] for c in g["cells"]]
    if not cells:
        raise ConfigError(
            f"{ref.slug}@{doc['revision']}#report-{group['report_id']} has no open-loop cell to reproduce",
            hint="warm multi-turn cells are not reproduced; pick a report with rate cells or a sweep",
        )
    stand_in = {"context": max(int(c["context"]) for c in cells), "concurrency": 1}
    stand_in |= {"revision": int(doc["revision"]), "report_id": group["report_id"]}
    theirs = Theirs(stand_in, None, bench.get("options") or {}, results.get("fingerprint") or {}, cells)
    return doc, [theirs], RowRef(ref.slug, int(doc["revision"]), report=group["report_id"])


def _cpu_only(recipe: Any) -> bool:
    return recipe.gpus == "none" or "cpu" in {t.lower() for t in recipe.meta.tags}


def _local_gpu() -> tuple[str, int] | None:
    """The first GPU nvidia-smi (or amd-smi) names here, by its catalog id, and how many there are."""
    from lair.fit.catalog import find_device_by_gpu_name
    from lair.report.fingerprint import fingerprint

    gpus = fingerprint(Path.cwd()).get("gpus") or {}
    for name in gpus.get("models") or []:
        dev = find_device_by_gpu_name(str(name))
        if dev is not None:
            return dev.id, int(gpus.get("count") or 1)
    return None


def check_fit(file: Path, recipe: Any, targets: list[Theirs], opts: Options) -> dict[str, Any]:
    """``lair fit`` of the pulled revision on this rig at the largest cell; raises FitError (the
    reason) when it does not fit or cannot be checked."""
    from lair.cli.fit_cmds import fit_recipe

    if opts.skip_fit:
        return {"verdict": "skipped", "reasons": ["--skip-fit"]}
    if _cpu_only(recipe):
        return {"verdict": "skipped", "reasons": ["a CPU-only recipe: lair fit sizes GPUs"]}
    args = ["--context", str(max(int(t.row["context"]) for t in targets))]
    args += ["--concurrency", str(max(int(t.row["concurrency"]) for t in targets))]
    if opts.gpu:
        args += ["--gpu", opts.gpu] + (["--gpus", str(opts.gpus)] if opts.gpus else [])
    elif opts.rig and _rig_has_gpu(opts.rig):
        args += ["--rig", opts.rig]
    elif (here := _local_gpu()) is not None:
        args += ["--gpu", here[0], "--gpus", str(here[1])]
    else:
        raise FitError(
            "cannot check the fit: the rig names no GPU and nvidia-smi finds none here",
            hint="lair rig set R --hardware gpu_model=H200 --hardware gpu_count=1, then --rig R (or --gpu G)",
        )
    out = fit_recipe(str(file), *args)
    if out["verdict"] == "does-not-fit":
        raise FitError("does not fit: " + "; ".join(out["reasons"]), hint=f"lair fit {file} {' '.join(args)}")
    return {"verdict": out["verdict"], "reasons": out["reasons"]}


def _rig_has_gpu(rig: str) -> bool:
    from lair.rig import load_rig

    return bool(load_rig(rig).hardware.gpu_model)


def _digests(fp: dict[str, Any]) -> list[str]:
    return [str(d) for d in ((fp.get("image") or {}).get("digests") or [])]


def pin_image(recipe: Any, theirs: dict[str, Any]) -> str | None:
    """Their run's image by digest, as the exact reference the launch runs (``REPO@sha256:...``):
    only a digest of the recipe's own image repository counts (a report's fingerprint never picks
    which repository is pulled), and nothing is re-tagged; None when there is nothing to pin (a
    native recipe, or no digest of that repository in their report). The reference is part of what
    the acceptance shows and binds."""
    from lair.recipe.images import pinned_reference

    image = recipe.docker_image
    if not image or recipe.runtime == "native":
        return None
    for digest in _digests(theirs):
        pinned = pinned_reference(image, digest)
        if pinned is not None:
            return pinned
    return None


def bench_options(targets: list[Theirs], opts: Options) -> Any:
    """The row's cells (contexts x concurrency) with the bench options of its report."""
    from dataclasses import fields

    from lair.bench import BenchOptions

    known = {f.name for f in fields(BenchOptions)}
    keys = _BENCH_KEYS + (_LOAD_KEYS if targets[0].load else ())
    given = {k: v for k, v in targets[0].options.items() if k in keys and k in known}
    if targets[0].load:
        contexts = sorted({int(c["context"]) for c in targets[0].load})
    else:
        contexts = sorted({int(t.row["context"]) for t in targets})
    concurrency = sorted({int(t.row["concurrency"]) for t in targets})
    # held to the command line's limits (lair.bench.OPTION_LIMITS): a ConfigError names the option
    bench = BenchOptions(contexts=contexts, concurrency=concurrency, progress=err, **given)
    bench.power_price_kwh, bench.hardware_cost, bench.hardware_life_years = rig_pricing(opts.rig)
    return bench


def compare_rows(slug: str, targets: list[Theirs], cells: list[dict[str, Any]]) -> list[RowOutcome]:
    """Each target row against your cell of the same context and concurrency."""
    mine = {(int(c["context"]), int(c["concurrency"])): c for c in cells}
    out = []
    for t in targets:
        key = (int(t.row["context"]), int(t.row["concurrency"]))
        cell = mine.get(key, {})
        comps: list[Comparison] = compare(t.row, t.stats, cell, cell.get("stats"))
        out.append(
            RowOutcome(
                row_id=str(RowRef(slug, int(t.row["revision"]), int(t.row["id"]))),
                context=key[0],
                concurrency=key[1],
                outcome=verdict(comps),
                figures=[c.as_dict() for c in comps],
            )
        )
    return out


def compare_load_cells(link: RowRef, theirs: Theirs, section: dict[str, Any] | None) -> list[RowOutcome]:
    """Each published load cell against the new run's cell of the same context and offered rate
    (``section``: the new run's ``load`` section; None or no such cell: not reproduced)."""
    mine = {(int(c["context"]), float(c["offered_rate"])): c for c in (section or {}).get("cells") or []}
    out = []
    for cell in theirs.load:
        key = (int(cell["context"]), float(cell["offered_rate"]))
        comps = compare_load(cell, mine.get(key))
        out.append(
            RowOutcome(
                row_id=str(link),
                context=key[0],
                concurrency=0,
                offered_rate=key[1],
                outcome=verdict(comps),
                figures=[c.as_dict() for c in comps],
            )
        )
    return out


def _engine(fp: dict[str, Any]) -> str:
    e = fp.get("engine") or {}
    return " ".join(str(x) for x in (e.get("name"), e.get("version")) if x) or str(
        fp.get("engine_version") or "?"
    )


def _prepare(file: Path, opts: Options, image: str | None) -> Any:
    """``lair plan``'s preparation of the pulled file (with their run's image when pinned) through the
    consent gate: an untrusted recipe's requests are shown and accepted (``-y``, or "y" on a
    terminal), else the TrustError stops the run before anything of it ran."""
    from dataclasses import replace

    from lair.cli._consent import with_consent
    from lair.launch import Request, prepare

    req = Request(recipe=str(file), rig=opts.rig, accept=opts.accept, values=dict(opts.values), image=image)
    prep = with_consent(
        lambda accept: prepare(replace(req, accept=accept), lease=False),
        accept=opts.accept,
        command="reproduce",
        flag="-y",
    )
    if prep.acceptance is not None:
        a = prep.acceptance
        err(f"untrusted recipe from {a.source}, accepted {a.accepted_at}:")
        for line in [f"{k}: {v}" for k, vs in a.requests.items() for v in vs] or ["(nothing risky)"]:
            err(f"  {line}")
    # the launch finds the acceptance of exactly this content (or the file is trusted): a change
    # between the prompt and the launch is refused, not accepted on the way
    return replace(req, accept=False)


def _show_run(pinned: str | None, bench: Any) -> None:
    """What their report decides of this run, before the acceptance: the image and the bench."""
    if pinned:
        err(f"image: their run's digest of the recipe's image, {pinned} (what the acceptance binds)")
    shown = ", ".join(f"{k}={getattr(bench, k)}" for k in _BENCH_KEYS if hasattr(bench, k))
    err(f"their bench options: {shown}")


def _run(req: Any, bench: Any, opts: Options) -> tuple[Any, Path]:
    """``lair launch --bench``'s path: launch, bench the endpoint once ready, stop, write the report."""
    import argparse

    from lair.bench import run_bench
    from lair.cli.launch_cmds import bench_report
    from lair.launch import launch

    got: dict[str, Any] = {}

    def on_ready(res: Any) -> None:
        from lair.cli._engine_procs import engine_processes

        got["secrets"] = res.secrets
        bench.api_key = res.api_key
        bench.engine = engine_processes(res.run_id)
        got["result"] = run_bench(res.endpoint.removesuffix("/v1"), bench)

    res = launch(req, detach=False, progress=err, on_ready=on_ready)
    if "result" not in got:
        from lair.errors import LaunchError

        raise LaunchError(f"run {res.run_id} ended ({res.state}) before the bench ran")
    report = bench_report(argparse.Namespace(rig=opts.rig), res.run_id, got["result"], got.get("secrets", []))
    return got["result"], report


def reproduce(client: Any, ref: RecipeRef, opts: Options) -> Outcome:
    """The whole flow; a FitError or TrustError stops it before anything is launched."""
    from lair.cli.client_cmds import submit_report
    from lair.launch.pulled import pull_revision
    from lair.recipe import load_recipe

    doc, targets, link = resolve(client, ref)
    rev = int(doc["revision"])
    where = opts.workdir or Path.cwd() / "lair-reproduce" / f"{ref.slug}-{rev}"
    where.mkdir(parents=True, exist_ok=True)
    file = where / f"{ref.slug}.toml"
    pull_revision(client, ref.slug, rev, file)
    err(f"pulled {ref.slug} revision {rev} into {file} (untrusted)")
    recipe = load_recipe(file)  # read, nothing of it runs before the acceptance below
    theirs_fp = targets[0].fingerprint
    pinned = pin_image(recipe, theirs_fp)
    bench = bench_options(targets, opts)
    _show_run(pinned, bench)
    req = _prepare(file, opts, pinned)
    out = Outcome(
        ref=str(link), registry=client.creds.url, slug=ref.slug, revision=rev, recipe_file=str(file)
    )
    try:
        out.fit = check_fit(file, recipe, targets, opts)
    except FitError as exc:
        out.ok, out.outcome = False, "not-fit"
        out.fit = {"verdict": "does-not-fit", "reasons": [exc.message]}
        raise _Stopped(out, exc) from None
    err(f"fit: {out.fit['verdict']} ({'; '.join(out.fit['reasons']) or 'fits'})")
    result, report = _run(req, bench, opts)
    mine_fp = json.loads((report / "fingerprint.json").read_text(encoding="utf-8"))
    out.report = str(report)
    out.engine = {"theirs": _engine(theirs_fp), "yours": _engine(mine_fp)}
    out.image = {"theirs": _digests(theirs_fp), "yours": _digests(mine_fp), "pinned": pinned}
    if targets[0].load:
        out.rows = compare_load_cells(link, targets[0], result.as_dict().get("load"))
    else:
        out.rows = compare_rows(ref.slug, targets, result.as_dict()["cells"])
    out.outcome = overall(out.rows)
    if (failure := result.failure()) is not None:
        out.ok = False
        raise _Stopped(out, failure)
    refuse_noise(out, result)
    if opts.submit:
        from lair.errors import RegistryError

        try:  # a load report is no speed row's replication attempt: uploaded as a report of its own
            out.submitted = submit_report(report, client, None if targets[0].load else str(link))
        except RegistryError as exc:  # refused or unreachable: the comparison still stands, the report stays
            raise _Stopped(out, exc) from None
    return out


def overall(rows: list[RowOutcome]) -> str:
    """``inconclusive`` when any row is, else ``replicated`` when every row is, else not-reproduced."""
    if any(r.outcome == INCONCLUSIVE for r in rows):
        return INCONCLUSIVE
    return REPLICATED if all(r.outcome == REPLICATED for r in rows) else NOT_REPRODUCED


def refuse_noise(out: Outcome, result: Any) -> None:
    """Stop (nothing submitted) when a cell of the run is noisy, or a row's verdict is inconclusive."""
    if lines := result.noise_lines():
        out.ok, out.outcome = False, "noisy"
        raise _Stopped(
            out,
            NoisyError(
                "noisy cells, no verdict and nothing submitted:\n  " + "\n  ".join(lines),
                hint="stop what else runs on the machine (and its GPUs), then run lair reproduce again",
            ),
        )
    if out.outcome == INCONCLUSIVE:
        out.ok = False
        rows = [r.row_id for r in out.rows if r.outcome == INCONCLUSIVE]
        raise _Stopped(
            out,
            InconclusiveError(
                f"{', '.join(rows)}: this run's own repeats spread wider than the row's noise band, "
                "so it says neither reproduced nor not; nothing submitted",
                hint="run again on a quieter machine, or with more repeats of longer cells",
            ),
        )


class _Stopped(Exception):
    """The flow stopped with an error after part of the outcome was known (printed with --json)."""

    def __init__(self, outcome: Outcome, error: Any) -> None:
        super().__init__(str(error))
        self.outcome, self.error = outcome, error


Stopped = _Stopped
__all__ += ["RowOutcome", "Stopped", "check_fit", "compare_rows", "overall", "pin_image", "refuse_noise"]
