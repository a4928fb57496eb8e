"""Recipe commands: check, show, export, schema, new, set, rig, scripts."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from lair.cli._common import dump_json, err

__all__ = ["register"]


def register(sub: Any) -> None:
    p = sub.add_parser("check", help="validate recipe files (errors and lint warnings)")
    p.add_argument("files", nargs="+", metavar="FILE", help="a recipe file, or a folder holding recipe.toml")
    p.add_argument("--json", action="store_true", help="print {ok, errors, warnings}")
    p.add_argument("--strict", action="store_true", help="treat warnings as errors")
    p.set_defaults(handler=cmd_check)

    p = sub.add_parser("show", help="human summary of a recipe, in the order of its published page")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--json", action="store_true", help="print the recipe model")
    p.set_defaults(handler=cmd_show)

    p = sub.add_parser("export", help="write a recipe as TOML, YAML or JSON, or as a sparkrun or vLLM recipe")
    p.add_argument("file", metavar="FILE")
    p.add_argument(
        "--format",
        "-f",
        choices=("toml", "yaml", "json", "sparkrun", "vllm-recipe"),
        required=True,
        help="toml, yaml, json: the same model; sparkrun, vllm-recipe: the peer's format (the lair "
        "fields it cannot say are listed on stderr)",
    )
    p.add_argument("-o", "--output", metavar="OUT", help="write here instead of stdout")
    p.set_defaults(handler=cmd_export)

    p = sub.add_parser("schema", help="JSON Schema of the recipe model")
    p.set_defaults(handler=cmd_schema)

    p = sub.add_parser("new", help="scaffold a new recipe file (per engine and runtime)")
    p.add_argument("file", metavar="FILE")
    p.add_argument(
        "--engine", default="vllm", help="vllm, sglang, llamacpp, xllamacpp or custom (default vllm)"
    )
    p.add_argument("--runtime", default="docker", help="docker, podman or native (default docker)")
    p.add_argument("--image", help="container image (default: the engine's)")
    p.add_argument(
        "--model",
        metavar="DIR",
        help="model folder (GGUF file for llama.cpp) on the nodes; default: MODEL_DIR",
    )
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--tp", type=int, default=1, help="tensor parallel size")
    p.add_argument("--title", help="meta.title (default: model, engine, runtime, nodes)")
    p.add_argument("--force", action="store_true", help="overwrite an existing file")
    p.add_argument("--json", action="store_true", help='print {"file", "ok", "errors", "warnings"}')
    p.set_defaults(handler=cmd_new)

    p = sub.add_parser("set", help="set keys in a TOML recipe, keeping comments and layout")
    p.add_argument("file", metavar="FILE")
    p.add_argument("assignments", nargs="+", metavar="KEY=VALUE", help="dotted key; value as a TOML literal")
    p.add_argument("--json", action="store_true", help='print {"file", "set": [KEY...]}')
    p.set_defaults(handler=cmd_set)

    _register_rig(sub)

    p = sub.add_parser("scripts", help="list the hook script library (built-in and user)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_scripts)


def _register_rig(sub: Any) -> None:
    p = sub.add_parser("rig", help="rig profiles: placeholder values, hardware, host capabilities")
    rs = p.add_subparsers(dest="rig_command", metavar="ACTION", required=True)
    q = rs.add_parser("list", help="list rigs")
    q.add_argument("--json", action="store_true")
    q.set_defaults(handler=cmd_rig_list)
    q = rs.add_parser("show", help="show a rig")
    q.add_argument("name")
    q.add_argument("--json", action="store_true")
    q.set_defaults(handler=cmd_rig_show)
    q = rs.add_parser("set", help="set values (NAME=VALUE) or --hardware/--capability keys in a rig")
    q.add_argument("name")
    q.add_argument("assignments", nargs="*", metavar="NAME=VALUE")
    q.add_argument(
        "--hardware", action="append", default=[], metavar="KEY=VALUE", help="e.g. gpu_model='RTX PRO 6000'"
    )
    q.add_argument("--capability", action="append", default=[], metavar="KEY=VALUE", help="e.g. gpus=false")
    q.add_argument("--cluster", help="default cluster for this rig")
    q.add_argument("--json", action="store_true", help='print {"rig", "path", "updated"}')
    q.set_defaults(handler=cmd_rig_set)
    q = rs.add_parser("path", help="print the rig file's path")
    q.add_argument("--json", action="store_true", help='print {"rig", "path", "exists"}')
    q.add_argument("name")
    q.set_defaults(handler=cmd_rig_path)


# ---------------------------------------------------------------------------------------------


def _recipe_file(path: str) -> str:
    """``path``, or the ``recipe.toml`` of the folder ``path`` names (a recipe's folder holds its
    reports and fit files beside it)."""
    from pathlib import Path

    inside = Path(path) / "recipe.toml"
    return str(inside) if Path(path).is_dir() and inside.is_file() else path


def cmd_check(args: argparse.Namespace) -> int:
    from lair.engines.rules import RULES
    from lair.recipe import check_file

    results = [check_file(_recipe_file(f), RULES) for f in args.files]
    errors = [i for r in results for i in r.errors]
    warnings = [i for r in results for i in r.warnings]
    ok = not errors and not (args.strict and warnings)
    if args.json:
        dump_json(
            {"ok": ok, "errors": [i.as_dict() for i in errors], "warnings": [i.as_dict() for i in warnings]}
        )
        return 0 if ok else 1
    for issue in errors:
        print(f"error: {issue.render()}\n", file=sys.stderr)
    for issue in warnings:
        print(f"warning: {issue.render()}\n", file=sys.stderr)
    for r in results:
        state = "ok" if r.ok else f"{len(r.errors)} error(s)"
        print(f"{r.file}: {state}" + (f", {len(r.warnings)} warning(s)" if r.warnings else ""))
    return 0 if ok else 1


def cmd_show(args: argparse.Namespace) -> int:
    from lair.recipe import load_recipe
    from lair.recipe.show import summary_text

    recipe = load_recipe(args.file)
    if args.json:
        from lair.recipe import secret_env_names

        data = recipe.model_dump(mode="json")
        for k in secret_env_names(recipe):
            data["env"][k] = "***"
        dump_json(data)
        return 0
    from lair.fit.driver import driver_floor

    print(summary_text(recipe, driver_floor(recipe).text))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from pathlib import Path

    from lair.recipe import export_text, format_of, load_recipe

    recipe = load_recipe(args.file)
    if args.format in ("sparkrun", "vllm-recipe"):
        from lair.interop import export_recipe

        text, lost = export_recipe(recipe, args.format)
        for u in lost:
            err(f"not in the {args.format} file: " + u.comment()[2:].lstrip())
    elif args.format == "toml" and format_of(args.file) == "toml":
        text = Path(args.file).read_text(encoding="utf-8")  # native format: comments and layout survive
    else:
        text = export_text(recipe, args.format)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        err(f"wrote {args.output}")
    else:
        sys.stdout.write(text)
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from lair.recipe.model import Recipe

    dump_json(Recipe.model_json_schema())
    return 0


def cmd_new(args: argparse.Namespace) -> int:
    from pathlib import Path

    from lair.engines.rules import RULES
    from lair.errors import ConfigError, RecipeError
    from lair.recipe import check_text
    from lair.recipe.scaffold import ScaffoldOptions, scaffold

    out = Path(args.file)
    if out.exists() and not args.force:
        raise ConfigError(f"{out} exists", hint="use --force to overwrite")
    opts = ScaffoldOptions(args.engine, args.runtime, args.model, args.image, args.nodes, args.tp, args.title)
    text = scaffold(opts)  # raises before anything is written
    result = check_text(text, str(out), "toml", RULES)
    if not result.ok:  # a scaffold that does not check is a bug: say so, write nothing
        raise RecipeError(result.errors)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    if args.json:
        dump_json(
            {"file": str(out), "ok": True, "errors": [], "warnings": [i.as_dict() for i in result.warnings]}
        )
    err(f"wrote {out} ({args.engine}, {args.runtime}); next: lair plan {out}")
    return 0


def _pairs(items: list[str]) -> dict[str, str]:
    from lair.errors import ConfigError

    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"expected KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    return out


def cmd_set(args: argparse.Namespace) -> int:
    from lair.errors import RecipeError
    from lair.recipe import edit_toml, format_of

    if format_of(args.file) != "toml":
        from lair.errors import ConfigError

        raise ConfigError(
            "lair set edits TOML recipes", hint="export to TOML first: lair export FILE -f toml"
        )
    pairs = _pairs(args.assignments)
    result = edit_toml(args.file, pairs)
    if not result.ok:
        raise RecipeError(result.errors)
    if args.json:
        dump_json({"file": str(args.file), "set": sorted(pairs)})
    err(f"updated {args.file}")
    return 0


def cmd_rig_list(args: argparse.Namespace) -> int:
    from lair.rig import list_rigs

    names = list_rigs()
    if args.json:
        dump_json({"rigs": names})
    else:
        print("\n".join(names) if names else "no rigs yet: lair rig set NAME KEY=VALUE")
    return 0


def cmd_rig_show(args: argparse.Namespace) -> int:
    from lair.rig import load_rig

    rig = load_rig(args.name)
    if args.json:
        dump_json(rig.model_dump(mode="json"))
    else:
        import tomlkit

        print(tomlkit.dumps(rig.model_dump(mode="json", exclude_none=True)).rstrip())
    return 0


def cmd_rig_set(args: argparse.Namespace) -> int:
    from lair.rig import set_rig_values

    name = args.name
    rig = None
    if args.assignments:
        rig = set_rig_values(name, _pairs(args.assignments))
    if args.hardware:
        rig = set_rig_values(name, _pairs(args.hardware), section="hardware")
    if args.capability:
        rig = set_rig_values(name, _pairs(args.capability), section="capabilities")
    if args.cluster:
        rig = set_rig_values(name, {"cluster": args.cluster}, section="")
    if rig is None:
        from lair.errors import ConfigError

        raise ConfigError("nothing to set", hint=f"lair rig set {name} NAME=VALUE [--hardware gpu_count=2]")
    if args.json:
        from lair.rig import rig_path

        dump_json({"rig": name, "path": str(rig_path(name)), "updated": True})
    err(f"rig {name} updated")
    return 0


def cmd_rig_path(args: argparse.Namespace) -> int:
    from lair.rig import rig_path

    path = rig_path(args.name)
    if args.json:
        dump_json({"rig": args.name, "path": str(path), "exists": path.is_file()})
    else:
        print(path)
    return 0


def cmd_scripts(args: argparse.Namespace) -> int:
    from lair.recipe.scripts import list_scripts

    scripts = list_scripts()
    if args.json:
        dump_json({name: str(p) for name, p in scripts.items()})
    else:
        for name, p in scripts.items():
            print(f"{name:28} {p}")
    return 0
