"""One repeat of an lm-eval task against a served OpenAI-compatible API (lm-eval's
``local-completions`` / ``local-chat-completions`` backends: no weights, no tokenizer, no torch).

The API key travels in ``OPENAI_API_KEY`` for the duration of the call (lm-eval reads it there), so
it is never in lm-eval's logged model arguments nor in lair's results.
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from collections.abc import Iterator
from typing import Any

from lair.errors import EvalError
from lair.eval.records import EvalOptions, RepeatResult, SampleRecord
from lair.eval.suites import SuiteSpec, offline_env

__all__ = ["lm_eval_version", "run_task"]

_SKIP = {"alias", "name", "sample_len", " "}


def lm_eval_version() -> str:
    from importlib.metadata import version

    return version("lm_eval")


@contextlib.contextmanager
def _offline(api_key: str | None) -> Iterator[None]:
    with offline_env(OPENAI_API_KEY=api_key or ""), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the harness's own deprecation noise is not ours
        yield


def _model_args(url: str, model: str, opts: EvalOptions, seed: int) -> tuple[str, dict[str, Any]]:
    chat = opts.api == "chat"
    args: dict[str, Any] = {
        "base_url": f"{url}/v1/{'chat/completions' if chat else 'completions'}",
        "model": model,
        "tokenizer_backend": None,
        "tokenized_requests": False,
        "num_concurrent": opts.concurrency,
        "max_retries": 2,
        "seed": seed,
        "timeout": int(opts.timeout_s),
    }
    if opts.max_gen_toks:
        args["max_gen_toks"] = opts.max_gen_toks
    if chat:
        args["think_end_token"] = "</think>"
    return ("local-chat-completions" if chat else "local-completions"), args


def _gen_kwargs(opts: EvalOptions) -> dict[str, Any] | None:
    if opts.thinking is None:
        return None
    if opts.api != "chat":
        raise EvalError("--thinking needs --api chat (the engine's chat template switches it)")
    return {"chat_template_kwargs": {"enable_thinking": opts.thinking}}


def _headline(task_res: dict[str, Any]) -> tuple[str, float, float | None, dict[str, float]]:
    metrics = {k: float(v) for k, v in task_res.items() if k not in _SKIP and isinstance(v, int | float)}
    main = [k for k in metrics if "_stderr," not in k]
    if not main:
        raise EvalError(f"lm-eval reported no metric: {sorted(task_res)}")
    key = main[0]
    name, _, filt = key.partition(",")
    stderr = metrics.get(f"{name}_stderr,{filt}")
    return key, metrics[key], stderr, metrics


def _records(samples: list[dict[str, Any]], metric_key: str, repeat: int) -> list[SampleRecord]:
    from lair.eval import sandbox

    metric, _, filt = metric_key.partition(",")
    out = []
    for s in samples:
        if filt and s.get("filter") not in (filt, None):
            continue
        score = float(s.get(metric, 0.0))
        resps = s.get("resps") or [[""]]
        raw = resps[0][0] if resps and resps[0] else ""
        detail, verdict = "", "pass" if score >= 1.0 else "fail"
        prog = (s.get("filtered_resps") or [None])[0]
        if sandbox._CURRENT and isinstance(prog, list) and prog:
            v = sandbox.current().verdict_of(prog[0])
            if v is not None:
                detail, verdict = v.detail, ("pass" if v.passed else v.status.replace("failed", "fail"))
        target = s.get("target")
        out.append(
            SampleRecord(
                doc_id=int(s["doc_id"]),
                prompt_hash=str(s.get("prompt_hash") or ""),
                output=str(raw),  # whole: the registry re-scores it
                target=str(target) if target is not None else "",
                score=score,
                verdict=verdict,
                repeat=repeat,
                detail=detail,
            )
        )
    return sorted(out, key=lambda r: r.doc_id)


def _evaluate(spec: SuiteSpec, url: str, model: str, opts: EvalOptions, seed: int) -> dict[str, Any]:
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    name, args = _model_args(url, model, opts, seed)
    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    with _offline(opts.api_key):
        try:
            res = simple_evaluate(
                model=name,
                model_args=args,
                tasks=[spec.task],
                task_manager=TaskManager(include_defaults=isinstance(spec.task, str)),
                num_fewshot=opts.num_fewshot,
                limit=opts.limit,
                log_samples=True,
                apply_chat_template=opts.api == "chat",
                gen_kwargs=_gen_kwargs(opts),
                random_seed=seed,
                numpy_random_seed=seed,
                fewshot_random_seed=seed,
                bootstrap_iters=1000,
            )
        except EvalError:
            raise
        except Exception as exc:  # the harness's own errors (data set, server) carry no lair type
            raise EvalError(f"suite {spec.name}: lm-eval failed: {type(exc).__name__}: {exc}") from exc
    if not res:
        raise EvalError(f"suite {spec.name}: lm-eval returned no results")
    return dict(res)


def run_task(
    spec: SuiteSpec, url: str, model: str, opts: EvalOptions, repeat: int
) -> list[tuple[str, RepeatResult]]:
    """Run ``spec`` once (seed ``opts.seed + repeat``): one ``(task name, result)`` per leaf task."""
    seed = opts.seed + repeat
    t0 = time.monotonic()
    res = _evaluate(spec, url, model, opts, seed)
    wall = time.monotonic() - t0
    out = []
    for task, samples in (res.get("samples") or {}).items():
        key, score, stderr, metrics = _headline(res["results"][task])
        records = _records(samples, key, repeat)
        rr = RepeatResult(score, stderr, len(records), seed, round(wall, 3), key, metrics, records)
        out.append((task, rr))
    return out
