"""An OpenAI-compatible server whose answers are chosen in advance: the INPUT of quality tests, so
an evaluation's score is known by hand.

    python -m lair.testing.answer_server RULES.json [--port 0] [--model answers]

``RULES.json`` is ``{"rules": [{"contains": TEXT, "reply": TEXT, "seed": N}, ...], "default": TEXT}``:
a request is answered with the reply of the first rule whose ``contains`` occurs in its prompt (the
``prompt`` of ``/v1/completions``, or the joined message contents of ``/v1/chat/completions``) and,
when the rule has a ``seed``, whose request carries that ``seed``; else with ``default``. An optional
``"delay_s"`` holds every reply that long (a slow engine), so requests overlap when a client sends
them concurrently. Non-streaming only. Every request body is kept and served back at
``GET /requests`` (JSON list), the server's own record of what the client sent; ``GET /inflight``
serves ``{"now": N, "max": M}``: completions being answered now and the most ever at once.

It prints ``listening HOST:PORT`` on stdout once it accepts connections, and serves until SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["Rules", "main", "running_answer_server"]

Rules = dict[str, Any]


def _prompt(body: dict[str, Any]) -> str:
    if "messages" in body:
        return "\n".join(str(m.get("content") or "") for m in body["messages"])
    prompt = body.get("prompt", "")
    return "\n".join(map(str, prompt)) if isinstance(prompt, list) else str(prompt)


def answer(rules: Rules, prompt: str, seed: int | None = None) -> str:
    """The reply ``rules`` give ``prompt`` (sent with ``seed``)."""
    for rule in rules.get("rules", []):
        if rule["contains"] in prompt and rule.get("seed", seed) == seed:
            return str(rule["reply"])
    return str(rules.get("default", ""))


def _completion(body: dict[str, Any], reply: str, model: str) -> dict[str, Any]:
    chat = "messages" in body
    choice: dict[str, Any] = {"index": 0, "finish_reason": "stop", "logprobs": None}
    choice.update({"message": {"role": "assistant", "content": reply}} if chat else {"text": reply})
    usage = {"prompt_tokens": len(_prompt(body).split()), "completion_tokens": len(reply.split())}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    kind = "chat.completion" if chat else "text_completion"
    return {"id": "answer-1", "object": kind, "model": model, "choices": [choice], "usage": usage}


def _handler(rules: Rules, model: str, seen: list[dict[str, Any]]) -> type[BaseHTTPRequestHandler]:
    lock = threading.Lock()
    inflight = {"now": 0, "max": 0}
    delay = float(rules.get("delay_s", 0))

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet: stdout carries the address
            pass

        def _send(self, status: int, data: Any) -> None:
            raw = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self) -> None:
            if self.path.endswith("/models"):
                self._send(200, {"object": "list", "data": [{"id": model, "object": "model"}]})
            elif self.path == "/requests":
                with lock:
                    self._send(200, list(seen))
            elif self.path == "/inflight":
                with lock:
                    self._send(200, dict(inflight))
            elif self.path == "/health":
                self._send(200, {})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if not self.path.endswith("/completions") or body.get("stream"):
                self._send(400, {"error": "only non-streaming /v1/completions and /v1/chat/completions"})
                return
            with lock:
                seen.append(body)
                inflight["now"] += 1
                inflight["max"] = max(inflight["max"], inflight["now"])
            try:
                if delay:
                    time.sleep(delay)  # the simulated engine's time per reply, not a wait in a test
                self._send(200, _completion(body, answer(rules, _prompt(body), body.get("seed")), model))
            finally:
                with lock:
                    inflight["now"] -= 1

    return Handler


def serve(rules: Rules, host: str, port: int, model: str) -> None:
    """Serve until interrupted, printing ``listening HOST:PORT`` first."""
    srv = ThreadingHTTPServer((host, port), _handler(rules, model, []))
    addr_host, addr_port = srv.server_address[:2]
    name = addr_host.decode() if isinstance(addr_host, bytes) else addr_host
    print(f"listening {name}:{addr_port}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        srv.serve_forever()
    srv.server_close()


@contextlib.contextmanager
def running_answer_server(rules: Rules, *, model: str = "answers", timeout_s: float = 20.0) -> Iterator[str]:
    """Start the server in its own process with ``rules``; yield its base URL."""
    from lair.testing.calibrated_server import listening_process

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rules.json"
        path.write_text(json.dumps(rules))
        cmd = [sys.executable, "-m", "lair.testing.answer_server", str(path), "--port", "0", "--model", model]
        with listening_process(cmd, "answer server", timeout_s) as url:
            yield url


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lair.testing.answer_server", description=__doc__)
    ap.add_argument("rules", type=Path)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--model", default="answers")
    a = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    serve(json.loads(a.rules.read_text()), a.host, a.port, a.model)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
