"""lair's bench: a correct, cheap "speed by context" table for any OpenAI-compatible server.

    from lair.bench import BenchOptions, run_bench
    result = run_bench("http://127.0.0.1:8000", BenchOptions(contexts=[2048, 40960], concurrency=[1, 4]))

Every metric is defined in :mod:`lair.bench.definitions`; the streaming client is
:mod:`lair.bench.client`; prompts in :mod:`lair.bench.prompt`; engine ``/metrics`` in
:mod:`lair.bench.metrics`; the result model in :mod:`lair.bench.results`; what else used the machine in
:mod:`lair.bench.machine`.
"""

from lair.bench.machine import EngineProcesses
from lair.bench.results import SCHEMA_VERSION, BenchOptions, BenchResult, CellResult, NeedleResult
from lair.bench.runner import run_bench, run_bench_async

__all__ = [
    "SCHEMA_VERSION",
    "BenchOptions",
    "BenchResult",
    "CellResult",
    "EngineProcesses",
    "NeedleResult",
    "run_bench",
    "run_bench_async",
]
