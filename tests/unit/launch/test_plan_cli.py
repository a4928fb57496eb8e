"""``lair plan`` through the CLI: the launcher seed on a 2-node cluster, nodes looked at, not leased."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lair.cli import main
from lair.inventory import acquire, leases, parse_inventory
from lair.inventory.store import add_cluster

ROOT = Path(__file__).resolve().parents[3]
SEED = ROOT / "examples" / "dsv41-flash-exl3-2x" / "recipe.toml"
TINY = ROOT / "examples" / "tiny-cpu" / "recipe.toml"


def _cluster(name: str, n: int, caps: dict[str, object] | None = None) -> None:
    nodes = [{"name": f"spark{i}", "address": f"10.9.0.{11 + i}", "rank": i} for i in range(n)]
    data: dict[str, object] = {"nodes": nodes, **({"capabilities": caps} if caps else {})}
    add_cluster(name, parse_inventory({"clusters": {name: data}}, "test").get(name))


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    assert main(["plan", *args, "--json"]) == 0
    data: dict[str, object] = json.loads(capsys.readouterr().out)
    return data


def test_seed_on_its_cluster_every_knob_and_no_lease(capsys: pytest.CaptureFixture[str]) -> None:
    _cluster("8nodes-switch", 8)
    acquire("8nodes-switch", 1, run_id="other-run")  # rank 0 is busy: the plan takes ranks 1 and 2
    data = _plan(capsys, str(SEED))
    nodes = data["nodes"]
    assert isinstance(nodes, list)
    assert [(n["name"], n["rank"], n["would_take"]) for n in nodes] == [
        ("spark1", 0, True),
        ("spark2", 1, True),
    ]
    start = next(s for s in nodes[1]["steps"] if s["stage"] == "start")
    argv = start["argv"]
    text = " ".join(argv)
    for knob in (
        "--shm-size 2g",
        "--memory 9g --memory-swap 9g",
        "--cpus 6",
        "--device /dev/dri/card0",
        "-v /mnt/nas/ai/huggingface/hub:/hub:ro",
        "-v /home/kilork/exl3-cache:/cache ",
        "--entrypoint /opt/ds41-venv/bin/python",
        "--node-rank 1 --master-addr 10.9.0.12",
    ):
        assert knob in text
    assert text.count(":ro ") == 3 and argv[-1] == "--headless"
    env_step = next(s for s in nodes[0]["steps"] if s["kind"] == "env_file")
    assert "DS41_KV_CAP_MIB" in env_step["env_names"] and env_step["mode"] == "0600"
    assert [lease.run_id for lease in leases("8nodes-switch").values()] == ["other-run"]


def test_nodes_override_the_cluster_and_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(SEED), "--nodes", "10.1.1.1,10.1.1.2"]) == 0
    out = capsys.readouterr().out
    assert "node 10.1.1.1 (10.1.1.1) rank 0, head (would take: not leased)" in out
    assert "--master-addr 10.1.1.1" in out


def test_capability_error_then_drop_unsupported(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    _cluster("nogpu", 1, {"gpus": False})
    recipe = tmp_path / "r.toml"
    recipe.write_text('engine = "vllm"\ndocker_image = "v:1"\nmodel = "m"\ngpus = "all"\ncluster = "nogpu"\n')
    assert main(["plan", str(recipe)]) == 1
    assert "--gpus all: the host has no GPU container runtime" in capsys.readouterr().err
    data = _plan(capsys, str(recipe), "--drop-unsupported")
    run = data["run"]
    assert isinstance(run, dict) and run["dropped"] == ["--gpus all (the host has no GPU container runtime)"]


def test_local_node_for_a_one_node_recipe_without_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    data = _plan(capsys, str(TINY))
    (node,) = data["nodes"]  # type: ignore[misc]
    assert node["local"] is True and node["address"] == "127.0.0.1"


def test_multi_node_recipe_without_nodes_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text(SEED.read_text().replace('cluster = "8nodes-switch"\n', ""))
    assert main(["plan", str(recipe)]) == 1
    err = capsys.readouterr().err
    assert "needs 2 nodes and names no cluster" in err and "hint: give --cluster" in err
