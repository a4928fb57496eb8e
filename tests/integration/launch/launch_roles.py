"""The processes of the 2-node test recipes: a head that serves llama.cpp and answers a rendezvous
on the master port, and a worker that must reach the head at the master address/port it was given."""

from __future__ import annotations

from pathlib import Path

RENDEZVOUS = """
import os, socket, socketserver
class H(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.sendall(("hello from rank 0 at " + self.request.getsockname()[0] + "\\n").encode())
socketserver.TCPServer.allow_reuse_address = True
with socketserver.TCPServer(("0.0.0.0", int(os.environ["LAIR_MASTER_PORT"])), H) as srv:
    srv.serve_forever()
"""

WORKER = """
import os, signal, socket, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
addr, port = os.environ["LAIR_MASTER_ADDR"], int(os.environ["LAIR_MASTER_PORT"])
rank, deadline = os.environ["LAIR_NODE_RANK"], time.monotonic() + 120
while True:
    try:
        with socket.create_connection((addr, port), timeout=2) as s:
            greeting, me = s.makefile().readline().strip(), s.getsockname()[0]
        break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.1)
print(f"worker rank {rank} of {os.environ['LAIR_NNODES']} at {me} reached "
      f"{addr}:{port}: {greeting}", flush=True)
wiring = [f"{k}={os.environ[k]}" for k in ("VLLM_HOST_IP", "GLOO_SOCKET_IFNAME") if k in os.environ]
if wiring:
    print("engine env: " + " ".join(wiring), flush=True)
while True:
    time.sleep(3600)
"""


def write_roles(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "rendezvous.py").write_text(RENDEZVOUS)
    (d / "worker.py").write_text(WORKER)
    return d


def role_script(py: str, roles: str, model: str) -> str:
    """``sh -c`` text: rank 0 serves (and answers the rendezvous), other ranks run the worker."""
    serve = f"{py} -m lair.engines.xllamacpp_server --model {model} --host 0.0.0.0 --port $LAIR_ENGINE_PORT"
    return (
        f'if [ "$LAIR_NODE_RANK" = 0 ]; then {py} {roles}/rendezvous.py & exec {serve} --alias tiny; '
        f"else exec {py} {roles}/worker.py; fi"
    )


def headless_script(py: str, roles: str, model: str) -> str:
    """``sh -c`` text of a vLLM-shaped recipe (entrypoint ``sh -c TEXT fake-vllm``, lair's vLLM
    flags after it): without ``--headless`` (the head) it serves, with it it runs the worker."""
    serve = f"{py} -m lair.engines.xllamacpp_server --model {model} --host 0.0.0.0 --port $LAIR_ENGINE_PORT"
    return (
        f'case " $* " in *" --headless "*) exec {py} {roles}/worker.py ;; '
        f"*) {py} {roles}/rendezvous.py & exec {serve} --alias tiny ;; esac"
    )
