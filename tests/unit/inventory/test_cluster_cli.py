"""``lair cluster add|list|show|remove`` and ``lair nodes`` through the real CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lair.cli import main
from lair.cli.cluster_cmds import parse_node_spec
from lair.errors import ConfigError
from lair.inventory import acquire


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_node_spec_parsing() -> None:
    spec = "name=n1,address=10.0.0.2,rank=3,gpus=1,user=ai,port=2222,key=/k,gpu_model=A100,label.rack=r1"
    assert parse_node_spec(spec, 0) == {
        "name": "n1",
        "address": "10.0.0.2",
        "rank": 3,
        "gpus": 1,
        "user": "ai",
        "port": 2222,
        "key": "/k",
        "gpu_model": "A100",
        "labels": {"rack": "r1"},
    }
    assert parse_node_spec("address=h2", 4) == {"name": "h2", "address": "h2", "rank": 4}
    for bad in ("name=x", "address=h,gpus=two", "address=h,colour=red", "address=h,oops"):
        with pytest.raises(ConfigError):
            parse_node_spec(bad, 0)


def test_add_list_show_nodes_remove(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(
        capsys,
        "cluster", "add", "lab",
        "--node", "name=n1,address=10.0.0.2,rank=0,gpus=1",
        "--node", "name=n2,address=10.0.0.3,rank=1",
        "--known-hosts", "off",
        "--env-via", "accept-env",
    )  # fmt: skip
    assert rc == 0 and "2 node(s) saved" in err
    rc, out, _ = run(capsys, "cluster", "list", "--json")
    assert json.loads(out) == [{"name": "lab", "nodes": 2, "gpus": 1, "known_hosts": "off"}]
    rc, out, _ = run(capsys, "cluster", "show", "lab", "--json")
    shown = json.loads(out)
    assert (shown["known_hosts"], shown["env_via"]) == ("off", "accept-env")
    assert shown["name"] == "lab" and [n["address"] for n in shown["nodes"]] == ["10.0.0.2", "10.0.0.3"]
    acquire("lab", 1, run_id="run-7")
    rc, out, _ = run(capsys, "nodes", "--json")
    rows = json.loads(out)["clusters"]["lab"]
    assert [(r["name"], r["state"]) for r in rows] == [("n1", "held"), ("n2", "free")]
    assert rows[0]["lease"]["run_id"] == "run-7"
    acquire(None, run_id="run-8", hosts=["192.0.2.9"])
    rc, out, _ = run(capsys, "nodes", "--json")
    assert [(a["key"], a["run_id"]) for a in json.loads(out)["adhoc"]] == [("192.0.2.9", "run-8")]
    rc, out, _ = run(capsys, "nodes")
    assert "held by run-7" in out and "free" in out and "192.0.2.9" in out
    assert run(capsys, "cluster", "remove", "lab")[0] == 0
    assert json.loads(run(capsys, "cluster", "list", "--json")[1]) == []


def test_cli_errors_exit_1_with_json_envelope(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, "cluster", "show", "nope", "--json")
    assert rc == 1 and json.loads(out)["error"]["code"] == "config" and "no cluster named" in err
    rc, _, err = run(
        capsys, "cluster", "add", "x", "--node", "name=a,address=h,rank=0", "--node", "name=a,address=i"
    )
    assert rc == 1 and "two nodes with name 'a'" in err
