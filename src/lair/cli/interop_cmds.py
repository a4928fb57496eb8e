"""Import commands: the peers' recipes (``lair import``) and result files (``lair import-results``).

Exit codes: 0 written (every recipe checks); 1 an error (a file that cannot be read or mapped, past
a budget, a written recipe that does not check).
"""

from __future__ import annotations

import argparse
from typing import Any

from lair.cli._common import dump_json, err

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser("import", help="turn a peer's recipes (sparkrun, vLLM Recipes) into lair recipes")
    p.add_argument("format", choices=("sparkrun", "vllm-recipes"), help="the peer's recipe format")
    p.add_argument("path", metavar="FILE|DIR", help="a recipe file, or a folder of them (*.yaml, *.yml)")
    p.add_argument(
        "-o", "--output", metavar="DIR", default=".", help="write DIR/<name>/recipe.toml (default .)"
    )
    p.add_argument("--force", action="store_true", help="overwrite existing recipe files")
    p.add_argument("--dry-run", action="store_true", help="check and list, write nothing")
    p.add_argument("--json", action="store_true", help='print {"ok", "recipes": [{name, file, unmapped...}]}')
    p.set_defaults(handler=cmd_import)

    p = sub.add_parser(
        "import-results", help="turn a peer's benchmark result file into a lair report (rows: reported)"
    )
    p.add_argument(
        "format", choices=("vllm-bench", "llama-bench", "aiperf", "guidellm"), help="the tool that wrote FILE"
    )
    p.add_argument(
        "file",
        metavar="FILE",
        help="vllm bench serve --save-result JSON, llama-bench -o json, AIPerf's profile_export_aiperf.json "
        "or its per-request profile_export.jsonl, guidellm's benchmarks JSON",
    )
    p.add_argument(
        "--recipe", required=True, metavar="R", help="the lair recipe the run served (file or folder)"
    )
    p.add_argument("-o", "--output", metavar="DIR", help="the report folder (default: beside the recipe)")
    p.add_argument("--tool-version", metavar="V", help="the tool's version, where the file does not say it")
    p.add_argument(
        "--json", action="store_true", help='print {"ok", "report", "imported": {tool, version, ...}}'
    )
    p.set_defaults(handler=cmd_import_results)


def cmd_import(args: argparse.Namespace) -> int:
    from lair.errors import RecipeError
    from lair.interop import import_recipes, write_imported

    imports = import_recipes(args.format, args.path)
    checks = [i.check() for i in imports]
    bad = [c for c in checks if not c.ok]
    if bad:  # a mapping that does not check is lair's bug: write nothing, say where
        raise RecipeError([e for c in bad for e in c.errors])
    files = [] if args.dry_run else write_imported(imports, args.output, force=args.force)
    if args.json:
        written: list[str | None] = [str(f) for f in files] or [None] * len(imports)
        dump_json(
            {
                "ok": True,
                "recipes": [i.as_dict() | {"file": f} for i, f in zip(imports, written, strict=True)],
            }
        )
        return 0
    for n, imp in enumerate(imports):
        where = files[n] if files else f"{imp.name} (not written)"
        print(f"{where}: from {imp.source}, {len(imp.unmapped)} unmapped field(s)")
        for u in imp.unmapped:
            print("  " + u.comment()[2:].lstrip())
    err(f"{len(imports)} recipe(s) from {args.path}" + ("" if args.dry_run else f" in {args.output}"))
    return 0 if imports else 1


def cmd_import_results(args: argparse.Namespace) -> int:
    from pathlib import Path

    from lair.interop.imported_report import write_imported_report
    from lair.interop.peer_results import read_results
    from lair.report.folder import report_dir

    recipe = Path(args.recipe) / "recipe.toml" if Path(args.recipe).is_dir() else Path(args.recipe)
    run = read_results(args.format, Path(args.file), args.tool_version)
    out = Path(args.output) if args.output else report_dir(recipe, f"{run.tool}-import")
    folder = write_imported_report(run, recipe, out)
    if args.json:
        dump_json({"ok": True, "report": str(folder), "imported": run.provenance(), "cells": run.cells})
        return 0
    print(f"{folder}: {len(run.cells)} cell(s) from {run.tool} {run.version} (sha256 {run.sha256})")
    print("  recomputed with lair's definitions" if run.recomputed else "  the peer's own figures (reported)")
    for d in run.differs:
        print(f"  differs: {d}")
    for u in run.unmapped:
        print("  not carried: " + u.comment()[2:].lstrip())
    err(f"next: lair submit {folder} (its rows are reported, never verified)")
    return 0
