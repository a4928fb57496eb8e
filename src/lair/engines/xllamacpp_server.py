"""llama.cpp's own OpenAI-compatible HTTP server, from the prebuilt ``xllamacpp`` wheel (no compiler).

    python -m lair.engines.xllamacpp_server --model M.gguf [--port 8000] [--host 127.0.0.1]
        [--alias tiny] [--ctx 2048] [--parallel 4] [--threads 2] [--batch-size 2048]
        [--ubatch-size 512] [--cache-type-k q8_0] [--cache-type-v f16] [--grammar GBNF] [--metrics]

``build_parser()`` is its command line, for checking a command before it runs (``lair tune``).

Serves until SIGTERM/SIGINT, then exits 0. With ``LLAMA_API_KEY`` in the environment (as llama.cpp's
own ``llama-server`` reads it), every request but ``/health`` needs ``Authorization: Bearer KEY``;
the key never appears on the command line.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any


def _params(a: argparse.Namespace) -> Any:
    import xllamacpp as xlc

    p = xlc.CommonParams()
    p.model.path = a.model
    p.port = a.port
    p.hostnames = [a.host]
    p.n_ctx = a.ctx
    p.n_parallel = a.parallel
    p.use_jinja = True
    p.model_alias = {a.alias} if isinstance(p.model_alias, set | frozenset) else [a.alias]
    p.cpuparams.n_threads = a.threads
    if a.batch_size is not None:
        p.n_batch = a.batch_size
    if a.ubatch_size is not None:
        p.n_ubatch = a.ubatch_size
    if a.cache_type_k is not None:
        p.cache_type_k = _ggml_type(xlc, a.cache_type_k)
    if a.cache_type_v is not None:
        p.cache_type_v = _ggml_type(xlc, a.cache_type_v)
    if a.grammar is not None:
        p.sampling.grammar = xlc.CommonGrammar(
            type=xlc.common_grammar_type.COMMON_GRAMMAR_TYPE_USER, grammar=a.grammar
        )
    key = os.environ.get("LLAMA_API_KEY")
    if key:
        p.api_keys = [key]
    if a.metrics and hasattr(p, "endpoint_metrics"):
        p.endpoint_metrics = True
    return p


CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
"""KV cache types llama.cpp's server takes (``--cache-type-k/-ctk``, ``--cache-type-v/-ctv``)."""


def _ggml_type(xlc: Any, name: str) -> Any:
    return getattr(xlc.ggml_type, f"GGML_TYPE_{name.upper()}")


def build_parser() -> argparse.ArgumentParser:
    """The server's command line (llama.cpp's own names for the options it exposes)."""
    ap = argparse.ArgumentParser(prog="python -m lair.engines.xllamacpp_server", description=__doc__)
    ap.add_argument("--model", required=True)
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--alias", default="tiny")
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", "-b", type=int, help="logical batch (llama.cpp n_batch)")
    ap.add_argument("--ubatch-size", "-ub", type=int, help="physical batch (llama.cpp n_ubatch)")
    ap.add_argument("--cache-type-k", "-ctk", choices=CACHE_TYPES, help="KV cache type of K (default f16)")
    ap.add_argument("--cache-type-v", "-ctv", choices=CACHE_TYPES, help="KV cache type of V (default f16)")
    ap.add_argument("--grammar", help="a GBNF grammar every answer follows unless a request sends its own")
    ap.add_argument("--metrics", action="store_true")
    return ap


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        import xllamacpp as xlc
    except ModuleNotFoundError as exc:  # one line for the launch's root cause, not a traceback
        print(f"error: {exc}: pip install 'lair[engines]' on this node", file=sys.stderr, flush=True)
        return 2

    srv = xlc.Server(_params(a))
    print("listening", srv.listening_address, flush=True)
    stop = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.set())
    stop.wait()
    print("stopping", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
