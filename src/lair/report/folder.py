"""The run report folder: ``<recipe dir>/reports/<YYYY-MM-DD_HHMMSS>_<run name>/``.

<stem>.recipe.toml   the recipe as run: placeholders resolved, secrets replaced by ***
results.json         schema-versioned: run name, bench result (cells, needle), fingerprint
requests.jsonl       one line per request: raw timings (ms from the repeat's first send)
load.jsonl           with open-loop cells (``lair bench --rate/--sweep``): one line per request of them
sessions.jsonl       with warm multi-turn cells (``lair bench --sessions``): one line per request of them
fingerprint.json     hardware/software fingerprint (also inside results.json)
logs/<name>.log      engine logs, secret values replaced by ***
report.md            human report (Markdown)
eval_samples.jsonl   with an evaluation: one line per sample (suite, prompt hash, output, verdict)
report.html          human report (self-contained HTML with an SVG plot)
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lair.bench import SCHEMA_VERSION, BenchResult
from lair.errors import BenchError
from lair.report.fingerprint import fingerprint, sha256_file
from lair.report.render import html_page, markdown
from lair.report.roofline_rows import roofline_markdown

__all__ = [
    "EVAL_SAMPLES",
    "LOAD_REQUESTS",
    "REPORT_FILES",
    "SESSION_REQUESTS",
    "load_report",
    "report_dir",
    "write_run_report",
]

LOAD_REQUESTS = "load.jsonl"
"""The open-loop cells' per-request rows (:func:`lair.bench.openloop.load_rows`), from which a registry
recomputes the cells (:mod:`lair.registry.service.load_cells`)."""

REPORT_FILES = ("results.json", "requests.jsonl", "fingerprint.json", "report.md", "report.html")
"""Files every report folder holds (plus the recipe and logs when there are any)."""
SESSION_REQUESTS = "sessions.jsonl"
"""The warm multi-turn cells' per-request rows (:mod:`lair.bench.sessions`)."""
EVAL_SAMPLES = "eval_samples.jsonl"
"""Per-sample records of the evaluation (only in reports that have one)."""


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "run"


def report_dir(recipe_path: str | Path, run_name: str, now: datetime | None = None) -> Path:
    """``<recipe dir>/reports/<YYYY-MM-DD_HHMMSS>_<run name>/`` (local time)."""
    stamp = (now or datetime.now()).strftime("%Y-%m-%d_%H%M%S")
    return Path(recipe_path).resolve().parent / "reports" / f"{stamp}_{_slug(run_name)}"


def _secrets(values: Mapping[str, str] | None, api_key: str | None) -> list[str]:
    from lair.recipe import is_secret_name

    found = [v for k, v in (values or {}).items() if v and is_secret_name(k)]
    return sorted({*found, *([api_key] if api_key else [])}, key=len, reverse=True)


def _redact(text: str, secrets: list[str]) -> str:
    for s in secrets:
        if len(s) >= 4:
            text = text.replace(s, "***")
    return text


def _write_logs(out: Path, logs: Mapping[str, str] | None, secrets: list[str]) -> list[str]:
    names = []
    for name, text in (logs or {}).items():
        (out / "logs").mkdir(exist_ok=True)
        path = out / "logs" / f"{_slug(name)}.log"
        path.write_text(_redact(text, secrets))
        names.append(path.name)
    return names


def _bench_doc(results: BenchResult | Mapping[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    if isinstance(results, BenchResult):
        return results.as_dict(), results.requests
    doc = dict(results)
    return doc, list(doc.pop("requests", []) or [])


def write_run_report(
    recipe_path: str | Path | None,
    run_name: str,
    results: BenchResult | Mapping[str, Any],
    engine_logs: Mapping[str, str] | None = None,
    values: Mapping[str, str] | None = None,
    *,
    out_dir: str | Path | None = None,
    image: str | None = None,
    engine_version: str | None = None,
    api_key: str | None = None,
    secrets: Sequence[str] = (),
    evaluation: Any = None,
) -> Path:
    """Write a complete report folder and return its path.

    The folder is ``out_dir`` when given, else ``<recipe dir>/reports/<stamp>_<run name>/``. ``values``
    resolve the recipe's placeholders; those whose names hold secrets, and ``api_key``, are replaced
    by ``***`` in the recipe copy and the logs, as is each of ``secrets`` (every resolved secret value
    of the run). ``evaluation`` (a :class:`lair.eval.EvalResult`) adds the quality table and
    ``eval_samples.jsonl``.
    """
    if out_dir is None and recipe_path is None:
        raise BenchError("a run report needs a recipe or an output folder", hint="pass --out DIR")
    out = Path(out_dir) if out_dir is not None else report_dir(recipe_path or ".", run_name)
    out.mkdir(parents=True, exist_ok=True)
    secrets = sorted({*_secrets(values, api_key), *(v for v in secrets if v)}, key=len, reverse=True)
    recipe_info = _write_recipe(out, recipe_path, values, secrets)
    bench, requests = _bench_doc(results)
    engine = _engine(recipe_path, bench, engine_version)
    fp = fingerprint(
        out,
        image=image,
        engine_version=" ".join(x for x in (engine.get("name"), engine.get("version")) if x) or None,
        engine=engine,
        recipe_sha256=recipe_info.get("sha256"),
    )
    _certify_image(bench, fp)
    doc = {
        "schema_version": SCHEMA_VERSION,
        "kind": "lair.run_report",
        "run_name": run_name,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "lair_version": fp["lair_version"],
        "recipe": recipe_info,
        "bench": bench,
        "fingerprint": fp,
        "logs": _write_logs(out, engine_logs, secrets),
    }
    if evaluation is not None:
        doc["eval"] = evaluation.as_dict()
        _write_jsonl(out / EVAL_SAMPLES, evaluation.samples, secrets)
    _dump(out / "results.json", doc)
    _dump(out / "fingerprint.json", fp)
    with (out / "requests.jsonl").open("w") as f:
        f.writelines(json.dumps(row, separators=(",", ":")) + "\n" for row in requests)
    if load_rows := getattr(results, "load_requests", None):
        _write_jsonl(out / LOAD_REQUESTS, load_rows, secrets)
    if session_rows := getattr(results, "session_requests", None):
        _write_jsonl(out / SESSION_REQUESTS, session_rows, secrets)
    roofline = _roofline(out, doc)
    (out / "report.md").write_text(markdown(doc) + (roofline_markdown(roofline) if roofline else ""))
    (out / "report.html").write_text(html_page(doc, roofline))
    return out


def _certify_image(bench: dict[str, Any], fp: dict[str, Any]) -> None:
    """The run certificate's ``software.image_digest``: the image's first repo digest, else its id."""
    cert, image = bench.get("certificate"), fp.get("image") or {}
    if cert and image:
        digests = image.get("digests") or []
        cert.setdefault("software", {})["image_digest"] = digests[0] if digests else image.get("id")


def _roofline(out: Path, doc: dict[str, Any]) -> Any:
    """The cells against their ceilings, as far as the recipe and the machine tell (never fails)."""
    from lair.errors import LairError
    from lair.report.roofline_rows import rate_report

    try:
        return rate_report(out, doc)
    except LairError as exc:
        from lair.report.roofline_rows import RooflineRows

        return RooflineRows(missing=f"no roofline: {exc.message}")


_PACKAGES = {"xllamacpp": "xllamacpp", "vllm": "vllm", "sglang": "sglang"}
"""Engines whose Python package, when the run was local, names the version the server does not."""


def _engine(recipe_path: str | Path | None, bench: Mapping[str, Any], given: str | None) -> dict[str, Any]:
    """The engine's name and version: what the caller knows, else the server's own answer
    (``/version``, ``/props``), else the version of the engine's package installed here."""
    server = bench.get("server") or {}
    name, version, source = server.get("engine"), given or server.get("version"), "server"
    engine = _recipe_engine(recipe_path)
    if version is None and engine in _PACKAGES:
        version = _package_version(_PACKAGES[engine])
        source = "its package installed here" if version else ""
        if engine == "xllamacpp":  # the wheel's version: llama.cpp's own build says b0-unknown
            name = "llama.cpp (xllamacpp)"
    return {"name": name or engine, "version": version, "source": source if version else ""}


def _recipe_engine(recipe_path: str | Path | None) -> str | None:
    if recipe_path is None:
        return None
    from lair.errors import LairError
    from lair.recipe import load_recipe

    try:
        return load_recipe(recipe_path).engine
    except LairError:
        return None


def _package_version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _write_recipe(
    out: Path, recipe_path: str | Path | None, values: Mapping[str, str] | None, secrets: list[str]
) -> dict[str, Any]:
    if recipe_path is None:
        return {}
    from lair.recipe import load_recipe, redacted_toml
    from lair.recipe.digest import model_sha256

    path = Path(recipe_path)
    stem = path.name.split(".")[0]
    copy = out / f"{stem}.recipe.toml"
    copy.write_text(_redact(redacted_toml(path, dict(values or {})), secrets))
    info = {"source": str(path), "file": copy.name, "sha256": sha256_file(path)}
    # the source's canonical model, before placeholders: the registry finds the revision by it
    return info | {"model_sha256": model_sha256(load_recipe(path))}


def _write_jsonl(path: Path, rows: Sequence[Mapping[str, Any]], secrets: list[str]) -> None:
    with path.open("w") as f:
        f.writelines(
            _redact(json.dumps(row, separators=(",", ":"), ensure_ascii=False), secrets) + "\n"
            for row in rows
        )


def _dump(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")


def load_report(path: str | Path) -> dict[str, Any]:
    """Read a report folder's ``results.json`` (or the file itself)."""
    p = Path(path)
    file = p / "results.json" if p.is_dir() else p
    try:
        doc: dict[str, Any] = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise BenchError(f"not a run report: {path} ({exc})", hint="give a report folder") from exc
    if doc.get("kind") != "lair.run_report" or "bench" not in doc:
        raise BenchError(f"not a run report: {file}")
    if int(doc.get("schema_version", 0)) > SCHEMA_VERSION:
        raise BenchError(
            f"{file} has schema {doc['schema_version']}; this lair reads up to {SCHEMA_VERSION}",
            hint="upgrade lair",
        )
    return doc
