"""``lair fit``: will a recipe (or a model folder) fit a rig, and how fast can it possibly go?"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from lair.cli._common import dump_json, err

if TYPE_CHECKING:
    from pathlib import Path

    from lair.fit.fact_source import Kind

__all__ = ["fit_recipe", "register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "fit",
        help="memory fit, KV pool, max context and speed ceilings of a recipe or model on a GPU setup",
        description="Fit a recipe (FILE) or a model (--model DIR, or FILE being a model folder / GGUF, or a "
        "Hub id ORG/NAME[@REV][:FILE.gguf] read without downloading the weights) on the hardware of --rig, "
        "--gpu/--gpus, or the recipe's meta.hardware.",
    )
    p.add_argument(
        "file",
        nargs="?",
        metavar="FILE",
        help="recipe file, model folder / GGUF file, Hub id ORG/NAME or a bundled name (--list-models)",
    )
    p.add_argument(
        "--model",
        metavar="DIR",
        help="model folder, GGUF file, HF cache entry or Hub id ORG/NAME[@REV][:FILE.gguf] (model facts)",
    )
    p.add_argument("--rig", metavar="R", help="take the hardware from this rig")
    p.add_argument("--gpu", metavar="NAME", help='GPU from the catalog, e.g. "RTX PRO 6000", "H200"')
    p.add_argument("--gpus", type=int, metavar="N", help="number of GPUs (default: what the layout needs)")
    p.add_argument("--gpu-memory-gb", type=float, metavar="GB", help="override the catalog's memory per GPU")
    p.add_argument("--host-ram-gb", type=float, metavar="GB", help="host RAM per node (for offload)")
    p.add_argument("--context", type=int, metavar="N", help="tokens per sequence (default: max_model_len)")
    p.add_argument("--concurrency", type=int, default=1, metavar="C", help="sequences at once (default 1)")
    p.add_argument("--tp", type=int, help="tensor parallel size (default: the recipe's)")
    p.add_argument("--pp", type=int, help="pipeline parallel size")
    p.add_argument("--dp", type=int, help="data parallel replicas")
    p.add_argument("--dcp", type=int, help="decode context parallel size (splits KV tokens over TP GPUs)")
    p.add_argument("--gpu-memory-utilization", type=float, metavar="F", help="memory fraction (default 0.9)")
    p.add_argument(
        "--kv-cache-dtype", "--kv-dtype", dest="kv_cache_dtype", metavar="D", help="e.g. fp8, auto"
    )
    p.add_argument("--sliding-kv-dtype", metavar="D", help="KV dtype of sliding-window layers")
    p.add_argument("--max-model-len", type=int, metavar="N")
    p.add_argument("--spec-tokens", type=int, metavar="K", help="speculative tokens per step")
    p.add_argument(
        "--cpu-offload-gb", type=float, metavar="GB", help="weights kept in host RAM on purpose (GiB per GPU)"
    )
    p.add_argument(
        "--expert-offload",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="routed experts may live in host RAM (only experts leave the GPUs)",
    )
    p.add_argument("--expert-cache-slots", type=int, metavar="N", help="GPU slots caching offloaded experts")
    p.add_argument(
        "--ssd-offload",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="experts beyond host RAM are read from SSD",
    )
    p.add_argument(
        "--predict",
        action="store_true",
        help="expected decode and prefill (roofline x efficiency measured on the same engine, model "
        "class and weight format) with its p10-p90 band",
    )
    p.add_argument(
        "--engine", metavar="NAME", help="engine whose measured rows --predict uses (default: the recipe's)"
    )
    p.add_argument(
        "--registry",
        nargs="?",
        const="",
        metavar="URL",
        help="--predict / --rank also learn from this registry's verified rows (no URL: the stored one)",
    )
    p.add_argument(
        "--rank",
        nargs="+",
        metavar="MODEL",
        help="rank these models (Hub ids ORG/NAME, names lair bundles, model folders) by predicted "
        "decode speed among those that fit (default --context 8192)",
    )
    p.add_argument("--list-gpus", action="store_true", help="list the hardware catalog and exit")
    p.add_argument(
        "--list-models", action="store_true", help="list the model facts bundled with lair and exit"
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(handler=cmd_fit)


def cmd_fit(args: argparse.Namespace) -> int:
    if args.list_gpus:
        return _list_gpus(args)
    if args.list_models:
        return _list_models(args)
    if args.rank:
        from lair.cli._fit_predict import FitInputs, cmd_rank

        return cmd_rank(args, FitInputs(_recipe_and_facts, _hardware, _layout))
    out = _summary(args)
    if args.json:
        dump_json(out)
    else:
        print(_render(out))
    return 0 if out["verdict"] != "does-not-fit" else 1


def fit_recipe(file: str, *options: str) -> dict[str, Any]:
    """What ``lair fit FILE OPTIONS... --json`` prints (``--rig R``, ``--gpu G``, ``--context N``...);
    raises FitError as the command does."""
    parser = argparse.ArgumentParser(prog="lair")
    register(parser.add_subparsers())
    return _summary(parser.parse_args(["fit", file, *options]))


def _summary(args: argparse.Namespace) -> dict[str, Any]:
    from lair.fit import Measured
    from lair.fit.summary import fit_summary

    recipe, facts, source = _recipe_and_facts(args)
    layout = _layout(args, recipe, _recipe_dir(args, recipe))
    hw = _hardware(args, recipe, layout.gpus * layout.dp)
    rows = [_measured(r) for r in (recipe.meta.performance if recipe is not None else [])]
    out = fit_summary(
        facts,
        hw,
        layout,
        context=args.context,
        concurrency=args.concurrency,
        measured=[Measured(**r) for r in rows],
        efficiencies=_efficiencies(args),
        engine=args.engine or (recipe.engine if recipe is not None else None),
    )
    out["model_source"] = source.as_dict()
    return out


def _efficiencies(args: argparse.Namespace) -> list[Any] | None:
    from lair.cli._fit_predict import efficiency_rows

    return efficiency_rows(args) if args.predict else None


def _measured(row: Any) -> dict[str, Any]:
    return {
        "context": row.context,
        "concurrency": row.concurrency or 1,
        "prefill_tok_s": row.prefill_tok_s,
        "decode_tok_s": row.decode_tok_s,
    }


def _is_model_path(path: Path) -> bool:
    return path.is_dir() or path.suffix == ".gguf"


def _recipe_dir(args: argparse.Namespace, recipe: Any) -> Path | None:
    from pathlib import Path

    return Path(args.file).resolve().parent if recipe is not None else None


def _recipe_and_facts(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """(the recipe or None, the model facts, where they came from: a FactSource)."""
    from pathlib import Path

    from lair.errors import FitError
    from lair.fit import read_model_facts
    from lair.fit.fact_source import fact_source

    named = args.model or args.file
    if named and not Path(named).exists() and (got := _by_name(named)) is not None:
        return None, *got  # ORG/NAME[@REV][:FILE.gguf]: the HF cache's full copy, else the Hub
    recipe = None
    if args.file and not _is_model_path(Path(args.file)):
        from lair.recipe import load_recipe

        recipe = load_recipe(args.file)
    model = args.model or (args.file if args.file and recipe is None else None)
    if model is None and recipe is not None:
        from lair.fit.recipe_layout import recipe_model_path

        model = recipe_model_path(recipe, _recipe_dir(args, recipe))
    if model is None and recipe is not None and recipe.meta.model_facts is not None:
        from lair.fit.recipe_facts import recipe_facts

        table = recipe_facts(recipe)  # what lair push wrote: no model folder here
        return recipe, table, fact_source("recipe", str(args.file), table) if table else None
    if model is None and recipe is not None and (got := _recipe_by_name(recipe, args)) is not None:
        return recipe, *got
    if model is None:
        raise FitError(_no_facts(recipe), hint=_no_facts_hint(args, recipe))
    facts = read_model_facts(model)
    from lair.fit.recipe_layout import BUNDLED_FIT_DIR, recipe_repo_ids

    bundled = recipe is not None and not args.model and Path(model).name == BUNDLED_FIT_DIR
    if bundled and recipe is not None:
        from dataclasses import replace

        label = next(iter(recipe_repo_ids(recipe)), recipe.name or "model")
        facts = replace(facts, name=f"{label} (bundled config)")
    kind: Kind = "bundled" if bundled else "hf cache" if "models--" in str(model) else "local folder"
    return recipe, facts, fact_source(kind, str(model), facts)


def _by_name(name: str) -> tuple[Any, Any] | None:
    from lair.fit.hub_facts import facts_by_name

    return facts_by_name(name)


def _recipe_by_name(recipe: Any, args: argparse.Namespace) -> tuple[Any, Any] | None:
    """The first repo id the recipe names (model, meta.model_repo, meta.upstream_weights) that lair
    bundles or the Hub has, else its model or served name as a bundled alias (``qwen3:30b-a3b``);
    when none, the error says what was looked for locally and what the Hub answered."""
    from lair.errors import HubAuthError, HubError
    from lair.fit.bundled_models import bundled_facts
    from lair.fit.recipe_layout import recipe_repo_ids

    first: HubError | None = None
    for repo in recipe_repo_ids(recipe):
        try:
            return _by_name(repo)  # the HF cache's full copy, the bundled facts, else the Hub
        except HubError as exc:  # not on the Hub (a local name, a renamed repo): try the next name
            first = first or exc
    for name in (recipe.model, recipe.served_model_name):
        if name and (got := bundled_facts(str(name))) is not None:
            return got
    if first is None:
        return None
    hint = first.hint if isinstance(first, HubAuthError) else _no_facts_hint(args, recipe)
    raise type(first)(f"{_no_facts(recipe)}; the Hub: {first.message}", hint=hint)


def _no_facts(recipe: Any) -> str:
    if recipe is None:
        return "nothing to fit"
    from lair.fit.recipe_layout import recipe_repo_ids

    repos = recipe_repo_ids(recipe)
    where = f"nor {' / '.join(repos)} in the local Hugging Face cache" if repos else "and it names no repo id"
    return f"no model facts: the recipe's model {recipe.model!r} is not a local path, {where}"


def _no_facts_hint(args: argparse.Namespace, recipe: Any) -> str:
    import shlex

    from lair.fit.recipe_layout import recipe_repo_ids

    repos = recipe_repo_ids(recipe) if recipe is not None else []
    cmd = f"lair fit {shlex.quote(str(args.file))} --model DIR" if args.file else "lair fit --model DIR"
    fetch = f"hf download {repos[0]} --include config.json '*.safetensors.index.json'; " if repos else ""
    return f"{fetch}{cmd}  (a model folder with config.json, a GGUF file or a Hugging Face cache entry)"


def _layout(args: argparse.Namespace, recipe: Any, recipe_dir: Path | None) -> Any:
    from dataclasses import replace

    from lair.fit import Layout, layout_from_recipe
    from lair.fit.catalog import GIB
    from lair.fit.recipe_facts import with_fit_layout
    from lair.fit.recipe_layout import bundled_layout

    layout = layout_from_recipe(recipe) if recipe is not None else Layout()
    layout = with_fit_layout(layout, recipe) if recipe is not None else layout
    layout = replace(layout, **bundled_layout(recipe_dir))
    given = {
        "tp": args.tp,
        "pp": args.pp,
        "dp": args.dp,
        "dcp": args.dcp,
        "gpu_memory_utilization": args.gpu_memory_utilization,
        "kv_cache_dtype": args.kv_cache_dtype,
        "sliding_kv_cache_dtype": args.sliding_kv_dtype,
        "max_model_len": args.max_model_len,
        "spec_tokens": args.spec_tokens,
        "cpu_offload_bytes": int(args.cpu_offload_gb * GIB) if args.cpu_offload_gb is not None else None,
        "expert_offload": args.expert_offload,
        "expert_cache_slots": args.expert_cache_slots,
        "ssd_offload": args.ssd_offload,
    }
    return replace(layout, **{k: v for k, v in given.items() if v is not None})


def _hardware(args: argparse.Namespace, recipe: Any, needed: int) -> Any:
    from lair.errors import FitError
    from lair.fit import Hardware, find_device
    from lair.fit.catalog import GIB

    src = _hardware_source(args, recipe)
    name = args.gpu or (src.gpu_model if src else None)
    if not name:
        raise FitError("no hardware to fit on", hint='pass --gpu "RTX PRO 6000" --gpus 2, or --rig R')
    count = args.gpus or (src.gpu_count if src and not args.gpu else None) or needed
    mem = args.gpu_memory_gb or (src.vram_gb if src and not args.gpu else None)
    ram = args.host_ram_gb or (src.host_ram_gb if src else None)
    return Hardware(
        find_device(name),
        gpus=int(count),
        host_ram_bytes=int(ram * GIB) if ram else None,
        memory_bytes=int(mem * GIB) if mem else None,
    )


def _hardware_source(args: argparse.Namespace, recipe: Any) -> Any:
    if args.rig:
        from lair.rig import load_rig

        return load_rig(args.rig).hardware
    if recipe is not None and recipe.meta is not None:
        return recipe.meta.hardware
    return None


def _gib(n: float) -> str:
    return f"{n / (1 << 30):,.1f} GiB"


def _count(n: float) -> str:
    return f"{n / 1e9:,.1f}B" if n >= 1e8 else f"{n / 1e6:,.2f}M"


def _render(o: dict[str, Any]) -> str:
    f, hw = o["model_facts"], o["hardware"]
    lines = [
        f"{f['name']} on {hw['gpus']} x {hw['name']}: {o['verdict'].upper()}",
        f"  model: {_count(f['total_params'])} params ({_count(f['active_params'])} active), "
        f"{f['weight_format']}, {f['bits_per_weight']:.2f} bits/weight, {f['attention']}; "
        f"weights {_gib(f['weight_bytes'])} total",
        f"  facts from: {_render_source(o['model_source'])}",
        *_render_memory(o),
        _render_kv(o),
        _render_ceilings(o),
    ]
    lines += [f"  - {r}" for r in o["reasons"]]
    lines += [_render_row(r) for r in o["measured"]]
    if "prediction" in o:
        from lair.cli._fit_predict import render_prediction

        lines += render_prediction(o)
    return "\n".join(lines)


def _render_source(src: dict[str, Any]) -> str:
    if src["kind"] == "bundled with lair":
        return f"bundled: {src['where']}; weights counted from the architecture and weight format"
    files = list(dict.fromkeys(src["facts"].values()))
    return f"{src['kind']} {src['where']} ({'; '.join(files)})"


def _render_memory(o: dict[str, Any]) -> list[str]:
    """Per-GPU figures as run (after any offload), then what left the GPUs, in total."""
    moved = o["offload_bytes"] + o["ssd_offload_bytes"]
    state = " (after offload)" if moved else ""
    weights, overhead = _gib(o["weights_bytes_per_gpu"]), _gib(o["overhead_bytes_per_gpu"])
    kv, budget = _gib(o["kv_budget_bytes_per_gpu"]), _gib(o["budget_bytes_per_gpu"])
    cache = (
        f" incl. expert cache {_gib(o['expert_cache_bytes_per_gpu'])}"
        if o["expert_cache_bytes_per_gpu"]
        else ""
    )
    lines = [f"  per GPU{state}: weights {weights}{cache}, overhead {overhead}, KV budget {kv} of {budget}"]
    if moved:
        ssd = f", {_gib(o['ssd_offload_bytes'])} read from SSD" if o["ssd_offload_bytes"] else ""
        lines.append(f"  offload (total, all GPUs): {_gib(o['offload_bytes'])} of weights in host RAM{ssd}")
    lines.append(
        f"  total: disk {_gib(o['disk_needed_bytes'])}, "
        f"host RAM for weights {_gib(o['host_ram_needed_bytes'])}"
    )
    return lines


def _render_kv(o: dict[str, Any]) -> str:
    ctx = "no limit" if o["max_context"] < 0 else f"{o['max_context']:,}"
    return (
        f"  KV: {o['kv_bytes_per_token']:,.0f} B/token whole model ({o['kv_dtype']}), "
        f"{o['kv_bytes_per_token_per_gpu']:,.0f} B/token per GPU; pool {o['kv_pool_tokens']:,} tokens; "
        f"max context {ctx}; {o['max_concurrency_at_context']} x {o['context']:,} at once"
    )


def _render_ceilings(o: dict[str, Any]) -> str:
    text = f"  ceilings at {o['context']:,} tokens: decode {o['decode_roofline_tok_s']:,} tok/s per stream"
    if o["concurrency"] > 1:
        text += f", {o['decode_aggregate_roofline_tok_s']:,} aggregate at {o['concurrency']}"
    if o["prefill_roofline_tok_s"]:
        text += f"; prefill {o['prefill_roofline_tok_s']:,} tok/s"
    return text


def _render_row(r: dict[str, Any]) -> str:
    parts = [f"  measured {r['context']:,} x{r['concurrency']}:"]
    if r["decode_tok_s"] is not None:
        parts.append(
            f"decode {r['decode_tok_s']:,} tok/s = {r['decode_pct']}% of {r['decode_roofline_tok_s']:,}"
        )
    if r["prefill_tok_s"] is not None and r["prefill_pct"] is not None:
        parts.append(
            f"prefill {r['prefill_tok_s']:,} = {r['prefill_pct']}% of {r['prefill_roofline_tok_s']:,}"
        )
    if r["implausible"]:
        parts.append(f"IMPLAUSIBLE ({r['why']})")
    return " ".join(parts)


def _list_gpus(args: argparse.Namespace) -> int:
    from lair.fit import load_catalog

    devices = load_catalog()
    if args.json:
        dump_json([{**d.__dict__, "sources": [s.__dict__ for s in d.sources]} for d in devices])
        return 0
    iw, nw = max(len(d.id) for d in devices), max(len(d.name) for d in devices)
    for d in devices:
        peak = d.bf16_tflops or "-"
        bw = d.memory_bandwidth_gbs
        print(f"{d.id:<{iw}} {d.name:<{nw}} {d.memory_gb:>5g} GB {bw:>6g} GB/s  bf16 {peak} TFLOPS")
    err(f"{len(devices)} devices; every figure's source: lair fit --list-gpus --json")
    return 0


def _list_models(args: argparse.Namespace) -> int:
    from lair.fit.bundled_models import bundled_models

    rows = [m.listing() for m in bundled_models() if not m.test_only]
    if args.json:
        dump_json(rows)
        return 0
    params = [_params(r["total_params"], r["active_params"]) for r in rows]
    rw, pw = max(len(r["repo"]) for r in rows), max(map(len, params))
    for r, n in zip(rows, params, strict=True):
        print(f"{r['repo']:<{rw}} {n:<{pw}} {r['kind']:<7} {r['weight_format']:<6} {', '.join(r['aliases'])}")
    err(f"{len(rows)} models; config sources and published counts: lair fit --list-models --json")
    return 0


def _params(total: int, active: int) -> str:
    return _count(total) + (f" ({_count(active)} active)" if active != total else "")
