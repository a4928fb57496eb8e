"""Refuse a candidate before it is launched: the recipe check, the engine's own parser, lair fit.

    argv = engine_argv(plan)                      # the head node's engine command, as it will run
    refusals = parse_check([argv, ...])           # None (ok), a reason, or NOT_CHECKED per argv
    reason = fit_check(recipe, recipe_dir, hardware, context=4096, concurrency=4)

The parser is the engine's: ``lair.engines.xllamacpp_server``'s own, in-process; vLLM's ``vllm serve``
(its ``main()``: parser and the serve command's validation, nothing started) and SGLang's
``ServerArgs`` through the Python of the engine's environment (the entrypoint's venv), many command
lines in one process. The fit is :func:`lair.fit.fit` on the rig's (or the recipe's) GPUs, and for
llama.cpp the context of one slot (``--ctx`` is shared by ``--parallel`` slots).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["NOT_CHECKED", "engine_argv", "failure_reason", "fit_check", "parse_check"]

NOT_CHECKED = "not checked"
_DRIVER = Path(__file__).with_name("_engine_parse.py")
_MARK = "@@LAIR-PARSE@@"


def engine_argv(plan: Any) -> list[str] | None:
    """The head node's engine command (native runs: after the env-file wrapper); None for a
    container (its parser is inside the image)."""
    from lair.plan import Stage

    start = plan.head.stage(Stage.START)
    argv = list(start[0].argv or []) if start else []
    if argv[:2] == ["sh", "-c"] and len(argv) > 4:
        return argv[4:]
    return None


def _xllamacpp(args: list[str]) -> str | None:
    from lair.engines.xllamacpp_server import build_parser

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            build_parser().parse_args(args)
    except SystemExit:
        lines = err.getvalue().strip().splitlines()
        return lines[-1] if lines else "refused by its parser"
    return None


def _kind(argv: Sequence[str]) -> tuple[str, str, list[str]] | None:
    """(parser, python, arguments) of an engine command lair can parse."""
    if len(argv) >= 3 and argv[1] == "-m" and argv[2] == "lair.engines.xllamacpp_server":
        return "xllamacpp", argv[0], list(argv[3:])
    if len(argv) >= 3 and argv[1] == "-m" and argv[2] == "sglang.launch_server":
        return "sglang", argv[0], list(argv[3:])
    if len(argv) >= 2 and Path(argv[0]).name == "vllm" and argv[1] == "serve":
        python = Path(argv[0]).with_name("python")
        return ("vllm", str(python), list(argv[1:])) if python.exists() else None
    return None


def _driver(parser: str, python: str, argvs: list[list[str]], timeout_s: float) -> list[str | None]:
    try:
        done = subprocess.run(
            [python, str(_DRIVER), parser],
            input=json.dumps({"argvs": argvs}),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [f"{NOT_CHECKED}: {parser}'s parser did not run ({exc})"] * len(argvs)
    _, sep, tail = done.stdout.rpartition(_MARK)
    if not sep:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return [f"{NOT_CHECKED}: {parser}'s parser did not run ({why})"] * len(argvs)
    results = json.loads(tail)["results"]
    return [None if r["ok"] else (r["error"] or "refused by its parser") for r in results]


def parse_check(argvs: Sequence[Sequence[str] | None], timeout_s: float = 300.0) -> list[str | None]:
    """Per command line: None when the engine's parser takes it, else its message (one starting
    with :data:`NOT_CHECKED` when there was no parser to ask)."""
    out: list[str | None] = [NOT_CHECKED] * len(argvs)
    batches: dict[tuple[str, str], list[int]] = {}
    kinds = [_kind(a) if a else None for a in argvs]
    for i, k in enumerate(kinds):
        if k is None:
            continue
        if k[0] == "xllamacpp":
            out[i] = _xllamacpp(k[2])
        else:
            batches.setdefault((k[0], k[1]), []).append(i)
    for (parser, python), idx in batches.items():
        got = _driver(parser, python, [kinds[i][2] for i in idx], timeout_s)  # type: ignore[index]
        for i, r in zip(idx, got, strict=True):
            out[i] = r
    return out


def _slot_check(recipe: Any, context: int) -> str | None:
    """llama.cpp splits ``--ctx`` over ``--parallel`` slots: one request has a slot's share."""
    from lair.fit.recipe_layout import arg_value

    if recipe.engine not in ("llamacpp", "xllamacpp"):
        return None
    argv = [*recipe.entrypoint, *recipe.args]
    ctx = recipe.max_model_len or arg_value(argv, ("--ctx", "--ctx-size", "-c"))
    par = arg_value(argv, ("--parallel", "-np")) or ("4" if recipe.engine == "xllamacpp" else None)
    try:
        n_ctx, slots = int(ctx or 0), int(par or 0)
    except ValueError:
        return None
    if n_ctx <= 0 or slots <= 0 or n_ctx // slots >= context:
        return None
    return (
        f"each of the {slots} slots holds {n_ctx // slots} tokens ({n_ctx} / {slots}); "
        f"the objective's cells need {context}"
    )


def _facts(recipe: Any, recipe_dir: Path) -> Any:
    from lair.fit import read_model_facts
    from lair.fit.recipe_facts import recipe_facts
    from lair.fit.recipe_layout import recipe_model_path

    path = recipe_model_path(recipe, recipe_dir)
    if path is not None:
        return read_model_facts(path)
    return recipe_facts(recipe) if recipe.meta.model_facts is not None else None


def _layout(recipe: Any, recipe_dir: Path) -> Any:
    from dataclasses import replace

    from lair.fit import layout_from_recipe
    from lair.fit.recipe_facts import with_fit_layout
    from lair.fit.recipe_layout import bundled_layout

    return replace(with_fit_layout(layout_from_recipe(recipe), recipe), **bundled_layout(recipe_dir))


def fit_check(
    recipe: Any, recipe_dir: Path, hardware: Any, *, context: int, concurrency: int
) -> tuple[str | None, str]:
    """(the reason it cannot fit or None, what was checked)."""
    from lair.errors import FitError
    from lair.fit import fit

    slot = _slot_check(recipe, context)
    if slot is not None:
        return slot, "llama.cpp slot context"
    if hardware is None:
        return None, f"{NOT_CHECKED}: no GPU hardware known (a rig with [hardware], or the recipe's)"
    try:
        facts = _facts(recipe, recipe_dir)
        if facts is None:
            return None, f"{NOT_CHECKED}: no model facts"
        layout = _layout(recipe, recipe_dir)
        res = fit(facts, hardware, layout, context=context, concurrency=concurrency)
    except FitError as exc:
        return None, f"{NOT_CHECKED}: {exc.message}"
    why = "; ".join(res.reasons or ["not enough memory"])
    if res.verdict == "does-not-fit":
        return f"lair fit: does not fit: {why}", "lair fit"
    asked = layout.cpu_offload_bytes or layout.expert_offload or layout.ssd_offload
    if res.verdict == "fits-with-offload" and recipe.engine in ("vllm", "sglang") and not asked:
        return f"lair fit: fits only with offload, which the recipe does not ask for: {why}", "lair fit"
    return None, f"lair fit: {res.verdict}"


_EXC = re.compile(
    r"^(?:\(\w+ pid=\d+\)\s*)?[\w.]*(?:Error|Exception)\b.*:|GGML_ASSERT|\berror:|out of memory|Killed", re.I
)


_NOISE = re.compile(r"^(\[New LWP|\[New Thread|\[Thread |\[Inferior|#\d+ |\d+\t)")
"""A debugger's backtrace that llama.cpp prints after an assertion: not the reason."""


def failure_reason(log: str, fallback: str) -> str:
    """The engine's own reason in its log: the last exception, assertion or error line and the two
    lines after it (a validation error names its field there); ``fallback`` when there is none."""
    lines = [ln.rstrip() for ln in log.splitlines() if ln.strip() and not _NOISE.match(ln.strip())]
    for i in range(len(lines) - 1, -1, -1):
        if _EXC.search(lines[i]):
            return " | ".join(ln.strip() for ln in lines[i : i + 3])[:600]
    return fallback
