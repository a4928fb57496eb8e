"""``lair tune``: search a recipe's flags on this rig, confirm the best, write it (and publish it)."""

from __future__ import annotations

import argparse
import re
from typing import Any

from lair.cli._common import dump_json, err, path_arg

__all__ = ["parse_budget", "register"]

_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s?)?$")


def parse_budget(text: str) -> float:
    """``45m``, ``1h30m``, ``90s`` or seconds (``600``)."""
    m = _DURATION.match(text.strip())
    if not text.strip() or not m or not any(m.groups()):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a duration such as 45m, 1h30m, 90s")
    h, mi, s = (int(x) if x else 0 for x in m.groups())
    return float(h * 3600 + mi * 60 + s)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "tune",
        help="search a recipe's flags (real launches + lair bench) and write the best as a new recipe",
        description="Search engine flags, env values and recipe fields of RECIPE with Optuna over real "
        "launches and benches; candidates the engine's parser or lair fit refuse are never launched. "
        "See docs/tune.md.",
    )
    p.add_argument("recipe", metavar="RECIPE", type=path_arg, help="the starting recipe (a local file)")
    space = p.add_argument_group("space (one of them, or both: --param adds to the file)")
    space.add_argument("--space", metavar="FILE", type=path_arg, help="a space file (TOML, docs/tune.md)")
    space.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=V1,V2",
        help="a knob: --flag, env.NAME or a field",
    )
    space.add_argument("--sampler", choices=("tpe", "grid", "random"), help="Optuna sampler (default tpe)")
    space.add_argument("--seed", type=int, metavar="N", help="the sampler's seed")
    goal = p.add_argument_group("objective")
    goal.add_argument(
        "--objective",
        action="append",
        default=[],
        metavar="SPEC",
        help="[max|min] [W*]METRIC@ctx=N,c=M [+ ...]; twice: two objectives (a Pareto front)",
    )
    goal.add_argument(
        "--constraint", action="append", default=[], metavar="SPEC", help="METRIC@ctx=N,c=M <= LIMIT (or >=)"
    )
    goal.add_argument(
        "--guard", metavar="SUITE:N", help="reject a candidate losing more than N points on SUITE"
    )
    goal.add_argument("--guard-limit", type=int, metavar="N", help="samples of the guard's suite")
    run = p.add_argument_group("search")
    run.add_argument("--budget", type=parse_budget, metavar="T", help="wall time for it all (default 45m)")
    run.add_argument("--trials", type=int, metavar="N", help="trials in the study (default 20)")
    run.add_argument("--name", metavar="NAME", help="study name (default: from recipe, space, objective)")
    run.add_argument(
        "--out", type=path_arg, metavar="DIR", help="the tune's folder (default RECIPE_DIR/tunes/NAME)"
    )
    run.add_argument("--decode-tokens", type=int, default=64, metavar="N", help="output length (default 64)")
    run.add_argument("--repeat", type=int, default=1, metavar="N", help="repeats per cell (default 1)")
    run.add_argument("--no-confirm", action="store_true", help="no confirmation runs of start and best")
    run.add_argument(
        "--write", type=path_arg, metavar="FILE", help="winning recipe (default RECIPE.tuned.toml)"
    )
    at = p.add_argument_group("where")
    at.add_argument("--rig", metavar="R", help="rig: placeholder values and the GPUs lair fit sizes on")
    at.add_argument("--set", dest="values", action="append", default=[], metavar="NAME=VALUE")
    at.add_argument("--accept", action="store_true", help="accept what an untrusted recipe asks for")
    p.add_argument("--json", action="store_true", help="print the tune (trials, best, confirmation) as JSON")
    p.add_argument(
        "--publish", action="store_true", help="push the winner as a fork of the original, with its rows"
    )
    p.set_defaults(handler=cmd_tune)


def _space(args: argparse.Namespace) -> Any:
    from dataclasses import replace

    from lair.errors import ConfigError
    from lair.tune import load_space, parse_params

    if args.space is None and not args.param:
        raise ConfigError("no space to search", hint="--space FILE or --param NAME=V1,V2,...")
    base = load_space(args.space) if args.space else None
    extra = parse_params(args.param).params if args.param else ()
    space = replace(base, params=base.params + tuple(extra)) if base else parse_params(args.param)
    if base and extra:
        parse_params([f"{p.name}=x" for p in space.params])  # a knob given twice is an error
    return replace(
        space, sampler=args.sampler or space.sampler, seed=args.seed if args.seed is not None else space.seed
    )


def _as_list(v: Any) -> list[str]:
    return [v] if isinstance(v, str) else list(v or [])


def _options(args: argparse.Namespace) -> Any:
    from lair.cli.launch_cmds import _set_values
    from lair.errors import ConfigError
    from lair.tune import TuneOptions, parse_constraint, parse_guard, parse_objective

    space = _space(args)
    cfg = space.settings
    objectives = [parse_objective(o) for o in args.objective or _as_list(cfg.get("objective"))]
    if not objectives:
        raise ConfigError("no objective", hint="e.g. --objective 'max decode_tok_s_per_stream@ctx=2048,c=1'")
    if len(objectives) > 4:
        raise ConfigError("at most 4 objectives")
    guard = args.guard or cfg.get("guard")
    budget = args.budget if args.budget is not None else parse_budget(str(cfg.get("budget", "45m")))
    trials = args.trials if args.trials is not None else int(cfg.get("trials", 20))
    if trials < 1 or budget <= 0:
        raise ConfigError("--trials and --budget must be positive")
    return TuneOptions(
        recipe=args.recipe.resolve(),
        space=space,
        objectives=objectives,
        constraints=[parse_constraint(c) for c in args.constraint or _as_list(cfg.get("constraint"))],
        guard=parse_guard(guard) if guard else None,
        budget_s=budget,
        trials=trials,
        name=args.name,
        out_dir=args.out.resolve() if args.out else None,
        rig=args.rig,
        values=_set_values(args.values),
        accept=args.accept,
        decode_tokens=args.decode_tokens,
        repeat=args.repeat,
        guard_limit=args.guard_limit,
        confirm=not args.no_confirm,
        write=args.write.resolve() if args.write else None,
        progress=err,
    )


def _publish(result: Any) -> dict[str, Any]:
    """The winner as a fork of the original: fork, the winner as the fork's new revision (the trials'
    table in its notes), then the confirmation run's report as its rows."""
    from pathlib import Path

    from lair.client import Client, pack_report
    from lair.errors import ConfigError
    from lair.recipe import load_recipe
    from lair.tune.result import trials_table

    if result.winner is None:
        raise ConfigError("nothing to publish: the starting recipe stayed the best", hint="")
    upstream = load_recipe(result.recipe).meta.slug
    if not upstream:
        raise ConfigError(f"{result.recipe} has no meta.slug: publish it first (lair push), then tune it")
    client = Client()
    fork = client._json("POST", f"/api/v1/recipes/{upstream}/fork", b"{}", "application/json")
    from lair.tune import parse_objective

    notes = f"Tuned by lair tune (study {result.study}).\n\n" + trials_table(
        result.trials, [parse_objective(o) for o in result.objectives], markdown=True
    )
    text = Path(result.winner).read_text(encoding="utf-8")
    rev = client.push(text, notes[:20000], slug=fork["slug"])
    out: dict[str, Any] = {"upstream": upstream, "slug": fork["slug"], "revision": rev["revision"]}
    best = (result.confirmation or {}).get("best") or {}
    if best.get("report"):
        stored = client.submit(pack_report(best["report"]))
        out["report"] = {"id": stored["id"], "rows": len(stored["rows"])}
    out["url"] = f"{client.creds.url}/recipes/{fork['slug']}"
    return out


def cmd_tune(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from lair.cli._consent import with_consent
    from lair.tune import run_tune

    opts = _options(args)
    result = with_consent(  # tune's own gate refuses before anything of the recipe runs
        lambda accept: run_tune(replace(opts, accept=accept)),
        accept=opts.accept,
        command="tune",
        flag="--accept",
        prompt=not args.json,
    )
    doc = result.as_dict()
    if args.publish:
        doc["published"] = _publish(result)
        err(f"published: {doc['published']['url']}")
    if args.json:
        dump_json(doc)
        return 0
    from lair.tune.result import trials_table

    print(trials_table(result.trials, opts.objectives, duplicates=result.duplicates))
    if result.confirmation:
        c = result.confirmation
        verdict = "beats" if c["beats"] else "does not beat"
        err(f"confirmation: best {c['best'].get('values')} {verdict} start {c['start'].get('values')}")
    err(f"tune folder: {result.folder}  (report.md, objective.svg, trials/)")
    if result.winner:
        err(f"winning recipe: {result.winner}")
    return 0
