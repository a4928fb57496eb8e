"""The bench options, defined once: ``lair bench`` takes them as they are (``--order``), ``lair launch
--bench`` with the ``bench`` prefix (``--bench-order``), so the two cannot drift. The options a
command has for itself (the URL, the API key, ``--rig``, the report folder) are not here; the rig's
prices come in through :func:`rig_pricing`.

Imports nothing heavy at module level: the bench package loads when the options are built.
"""

from __future__ import annotations

import argparse
from typing import Any

from lair.cli._common import err, path_arg

__all__ = ["BENCH_OPTIONS", "add_bench_options", "bench_options", "print_bench", "rig_pricing", "warn_noisy"]


def ints_arg(text: str) -> list[int]:
    """An argparse ``type``: comma-separated positive integers (``_`` allowed, ``40_960``)."""
    try:
        values = [int(x.replace("_", "")) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from exc
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def floats_arg(text: str) -> list[float]:
    """An argparse ``type``: comma-separated positive numbers (``0.5,1,2``)."""
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from exc
    if not values or any(not v > 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive numbers, got {text!r}")
    return values


def _opt(name: str, text: str, **kwargs: Any) -> tuple[str, dict[str, Any]]:
    return name, {"help": text, **kwargs}


_SPECS: tuple[tuple[str, dict[str, Any]], ...] = (
    _opt("model", "served model name (default: the first of /v1/models)", metavar="NAME"),
    _opt("contexts", "prompt sizes in tokens, e.g. 2048,40960", type=ints_arg, default=[2048], metavar="N,N"),
    _opt("concurrency", "streams sent together, e.g. 1,4", type=ints_arg, default=[1], metavar="N,N"),
    _opt("decode-tokens", "forced output length per request", type=int, default=128, metavar="N"),
    _opt("repeat", "repeats per cell (p50 is the headline)", type=int, default=3, metavar="N"),
    _opt("needle", "also run a needle-in-a-haystack test", action="store_true"),
    _opt("needle-context", "needle prompt size (default: the largest context)", type=int, metavar="N"),
    _opt("needle-depth", "0 = start of the haystack, 1 = end", type=float, default=0.5, metavar="D"),
    _opt("tokenizer", "local tokenizer.json for exact prompt sizing", type=path_arg, metavar="PATH"),
    _opt("no-force-output", "do not send ignore_eos/min_tokens", action="store_true"),
    _opt("timeout", "seconds per request", type=float, default=900.0, metavar="S"),
    _opt(
        "read-interval-ms",
        "after a stream's first token, read it every MS ms (0: every chunk, about 2x client CPU)",
        type=float,
        default=20.0,
        metavar="MS",
    ),
    _opt(
        "keep-going",
        "after a cell with failed requests, run the remaining cells (the exit code is still 1)",
        action="store_true",
    ),
    _opt(
        "order",
        "run the cells shuffled (default; the seed is recorded) or contexts x concurrency as given",
        choices=("shuffled", "fixed"),
        default="shuffled",
    ),
    _opt("seed", "seed of the shuffled order (default: a fresh one, recorded)", type=int, metavar="N"),
    _opt("warmup", "untimed requests before the first cell", type=int, default=1, metavar="N"),
    _opt("idle-gap", "seconds of idle before each cell", type=float, default=0.0, metavar="S"),
    _opt(
        "telemetry",
        "GPU samples during each cell: NVML (nvidia-ml-py), else nvidia-smi, else none (said so)",
        choices=("auto", "nvml", "nvidia-smi", "none"),
        default="auto",
    ),
    _opt("telemetry-interval", "seconds between GPU samples", type=float, default=0.1, metavar="S"),
    _opt(
        "rate",
        "open loop: requests per second sent on schedule whatever the server's state, one cell per "
        "context and rate (instead of the closed-loop cells); with --sweep, where the sweep starts",
        type=floats_arg,
        metavar="R,R",
    ),
    _opt("arrival", "open-loop arrivals", choices=("poisson", "gamma", "constant"), default="poisson"),
    _opt(
        "burstiness", "gamma arrivals' shape (1: Poisson; <1 burstier)", type=float, default=1.0, metavar="B"
    ),
    _opt("rate-requests", "requests per open-loop cell", type=int, default=64, metavar="N"),
    _opt(
        "sweep",
        "step the rate up x2 until throughput stops growing, the SLO breaks, the server over-saturates "
        "or a budget is spent; reports the knee, max goodput and users at --user-speed",
        action="store_true",
    ),
    _opt("slo", "goodput's objective, e.g. ttft_p99<=2s,tpot<=50ms", metavar="SPEC"),
    _opt("user-speed", "tokens per second per user for 'users at S tok/s'", type=float, metavar="S"),
    _opt("max-duration", "a sweep's time budget in seconds", type=float, default=600.0, metavar="S"),
    _opt("max-requests", "a sweep's request budget", type=int, default=2000, metavar="N"),
    _opt("max-open", "open-loop requests open at once at most", type=int, default=1024, metavar="N"),
    _opt(
        "sessions",
        "warm (agentic) cells: N multi-turn sessions side by side per context, which is their shared "
        "system prompt; each turn appends the answer and new user text (instead of the cold cells)",
        type=int,
        metavar="N",
    ),
    _opt("turns", "turns per session", type=int, default=4, metavar="T"),
    _opt("turn-tokens", "tokens of new user text per turn", type=int, default=64, metavar="N"),
)
"""Each shared option: its name (without prefix) and its ``add_argument`` keywords."""

BENCH_OPTIONS: tuple[str, ...] = tuple(name for name, _ in _SPECS)
"""The shared options' names, without prefix or dashes."""


def _flag(name: str, prefix: str) -> str:
    return f"--{prefix}-{name}" if prefix else f"--{name}"


def add_bench_options(p: Any, prefix: str = "") -> None:
    """Every bench option on ``p`` (a parser or an argument group); ``prefix`` ``bench`` makes
    ``--bench-contexts`` (``lair launch``, whose ``--bench`` turns the bench on)."""
    for name, kwargs in _SPECS:
        p.add_argument(_flag(name, prefix), **kwargs)


def rig_pricing(rig_name: str | None) -> tuple[float | None, float | None, float | None]:
    """The rig's (power_price_kwh, hardware_cost, hardware_life_years); Nones without a rig."""
    if not rig_name:
        return None, None, None
    from lair.rig import load_rig

    cost = load_rig(rig_name).cost
    return cost.power_price_kwh, cost.hardware_cost, cost.hardware_life_years


def bench_options(
    args: argparse.Namespace,
    prefix: str = "",
    *,
    api_key: str | None = None,
    rig: str | None = None,
    max_context: int | None = None,
) -> Any:
    """The :class:`~lair.bench.BenchOptions` of the parsed options (``prefix`` as given to
    :func:`add_bench_options`), with the key, the rig's prices and the context limit the command
    knows."""
    from lair.bench import BenchOptions

    def get(name: str) -> Any:
        return getattr(args, _flag(name, prefix)[2:].replace("-", "_"))

    opts = BenchOptions(
        model=get("model"),
        contexts=list(get("contexts")),
        concurrency=list(get("concurrency")),
        decode_tokens=get("decode-tokens"),
        repeat=get("repeat"),
        needle=get("needle"),
        needle_context=get("needle-context"),
        needle_depth=get("needle-depth"),
        api_key=api_key,
        tokenizer=get("tokenizer"),
        force_output=not get("no-force-output"),
        request_timeout_s=get("timeout"),
        read_interval_ms=get("read-interval-ms"),
        keep_going=get("keep-going"),
        max_context=max_context,
        order=get("order"),
        seed=get("seed"),
        warmup_requests=get("warmup"),
        idle_gap_s=get("idle-gap"),
        telemetry=get("telemetry"),
        telemetry_interval_s=get("telemetry-interval"),
        rates=get("rate"),
        arrival=get("arrival"),
        burstiness=get("burstiness"),
        rate_requests=get("rate-requests"),
        sweep=get("sweep"),
        slo=get("slo"),
        user_speed=get("user-speed"),
        max_duration_s=get("max-duration"),
        max_requests=get("max-requests"),
        max_open=get("max-open"),
        sessions=get("sessions"),
        turns=get("turns"),
        turn_tokens=get("turn-tokens"),
        progress=err,
    )
    opts.power_price_kwh, opts.hardware_cost, opts.hardware_life_years = rig_pricing(rig)
    return opts


def warn_noisy(result: Any) -> None:
    """A warning on stderr per noisy cell (something else used the machine, or its repeats
    disagree), with its figures and limits; nothing when every cell is quiet."""
    lines = result.noise_lines()
    for line in lines:
        err(f"warning: noisy cell {line}")
    if lines:
        err(
            "hint: stop what else runs on the machine (and on its GPUs) and measure again: a noisy cell "
            "is never submitted as a replication and the registry stores it as reported-by-report"
        )


def print_bench(result: Any) -> None:
    """The speed table, the energy table (with telemetry) and the certificate, as both commands
    print them."""
    from lair.report.render import certificate_text, energy_text, speed_text

    doc = result.as_dict()
    if result.load is not None:
        from lair.bench.openloop import load_text

        print(load_text(result.load))
        return
    if result.sessions is not None:
        from lair.bench.sessions import sessions_text

        print(sessions_text(result.sessions))
        return
    print(speed_text(doc["cells"]))
    energy = energy_text(doc)
    if energy:
        print()
        print(energy)
    print()
    print(certificate_text(doc))
