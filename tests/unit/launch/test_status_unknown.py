"""``lair status`` says "unknown (ssh: ...)" for a node it cannot reach, never "not alive"."""

from __future__ import annotations

import json
import socket
import time

import pytest

from lair.cli import main
from lair.launch.journal import Journal, NodeRecord, RunRecord
from lair.plan import Target, plan
from lair.recipe import load_text


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.2", 0))
        return int(s.getsockname()[1])  # nothing listens there once the socket is closed


def test_an_unreachable_node_is_unknown_with_the_ssh_error(capsys: pytest.CaptureFixture[str]) -> None:
    p = plan(
        load_text('engine = "custom"\ndocker_image = "i:1"\nentrypoint = ["serve"]\n'),
        [Target(name="gone", address="127.0.0.2", rank=0)],
        run_id="st-1",
    )
    node = {"name": "gone", "address": "127.0.0.2", "port": _closed_port(), "rank": 0}
    rec = RunRecord(
        run_id="st-1",
        recipe="r.toml",
        name="n",
        runtime="docker",
        endpoint=p.run.endpoint,
        state="running",
        controller_pid=None,
        detached=True,
        created_at=time.time(),
        updated_at=time.time(),
        nodes=[NodeRecord(rank=0, name="gone", address="127.0.0.2", node=node, started=True)],
    )
    Journal("st-1").create(p.model_dump_json(), rec)
    assert main(["status", "st-1", "--json"]) == 0
    n = json.loads(capsys.readouterr().out)[0]["nodes"][0]
    assert n["alive"] is None and n["check_error"].startswith("ssh: ")
    assert "cannot connect" in n["check_error"] or "refused" in n["check_error"].lower()
    assert main(["status", "st-1"]) == 0
    assert "0/1 up; gone unknown (ssh: " in capsys.readouterr().out
