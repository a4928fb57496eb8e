"""``run_eval``: every suite, ``repeat`` times, against one served model."""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime

from lair.errors import EvalError
from lair.eval import sandbox
from lair.eval.records import EvalOptions, EvalResult, RepeatResult, SuiteResult
from lair.eval.suites import SuiteSpec, resolve_suite

__all__ = ["run_eval", "served_model"]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def served_model(url: str, api_key: str | None = None, timeout_s: float = 30.0) -> str:
    """The first model ``GET /v1/models`` lists."""
    req = urllib.request.Request(f"{url}/v1/models")
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=timeout_s) as resp:
            data = json.loads(resp.read())
        return str(data["data"][0]["id"])
    except urllib.error.HTTPError as exc:
        raise EvalError(
            f"{url}/v1/models answered HTTP {exc.code}", hint="give the served name with --model"
        ) from exc
    except OSError as exc:
        from lair.bench.client import connect_error

        bench = connect_error(url, exc)
        raise EvalError(bench.message, hint=bench.hint) from exc
    except (ValueError, KeyError, IndexError) as exc:
        raise EvalError(
            f"{url}/v1/models lists no model ({exc})", hint="give the served name with --model"
        ) from exc


def _say(opts: EvalOptions, msg: str) -> None:
    if opts.progress:
        opts.progress(msg)


@contextlib.contextmanager
def _sandbox_for(specs: list[SuiteSpec], opts: EvalOptions) -> Iterator[str]:
    if not any(s.kind == "humaneval" for s in specs):
        yield ""
        return
    sb = sandbox.open_sandbox(opts.sandbox)  # type: ignore[arg-type]
    sb.concurrency = opts.concurrency
    with sandbox.using(sb):
        yield sb.kind


def _run_suite(spec: SuiteSpec, url: str, model: str, opts: EvalOptions, box: str) -> list[SuiteResult]:
    from lair.eval.harness import run_task
    from lair.eval.needle import run_needle

    by_task: dict[str, list[RepeatResult]] = {}
    for k in range(opts.repeat):
        _say(opts, f"{spec.name}: repeat {k + 1}/{opts.repeat} (seed {opts.seed + k})")
        if spec.kind == "needle":
            rows = [("needle", run_needle(url, model, opts, k))]
        else:
            rows = run_task(spec, url, model, opts, k)
        for task, rr in rows:
            by_task.setdefault(task, []).append(rr)
            _say(opts, f"{spec.name}: {task} {rr.metric} = {rr.score:.4f} (n {rr.n}, {rr.wall_s:.1f} s)")
    many = len(by_task) > 1
    return [
        SuiteResult(
            suite=f"{spec.name}/{task}" if many else spec.name,
            task=task,
            kind=spec.kind,
            metric=reps[0].metric,
            repeats=reps,
            data=spec.data,
            sandbox=box if spec.kind == "humaneval" else "",
        )
        for task, reps in by_task.items()
    ]


def run_eval(url: str, opts: EvalOptions) -> EvalResult:
    """Evaluate the OpenAI-compatible server at ``url`` (no ``/v1``) on ``opts.suites``.

    Every suite is resolved and its data set checked before anything is sent.
    """
    url = url.rstrip("/").removesuffix("/v1")
    if opts.repeat < 1:
        raise EvalError("--repeat must be at least 1")
    specs = [resolve_suite(s, opts.data.get(s) or opts.data.get("")) for s in opts.suites]
    model = opts.model or served_model(url, opts.api_key)
    started = _now()
    results: list[SuiteResult] = []
    with _sandbox_for(specs, opts) as box:
        for spec in specs:
            results += _run_suite(spec, url, model, opts, box)
    harness = {"lm_eval": _lm_eval_version(), "api": opts.api}
    return EvalResult(url, model, started, _now(), opts.as_dict(), results, harness)


def _lm_eval_version() -> str:
    from lair.eval.harness import lm_eval_version

    return lm_eval_version()
