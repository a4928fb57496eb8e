"""Every engine x topology x runtime plan, parsed by the engines' own parsers.

vLLM 0.32.0's ``vllm serve`` (its real ``main()``: parser + validation), SGLang 0.5.23's
``ServerArgs`` parser and Ray 2.58's ``ray start`` (click) read each node's command from the plan.
The values they parse are compared with the recipe's keys and the node's role; no flag may appear
twice in any spelling. The flag tables lair writes from are checked against the parsers' own
arguments (names, every spelling, KV-cache dtype choices).
"""

from __future__ import annotations

import json
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lair.engines.flags import SGLANG_FLAGS, VLLM_FLAGS, FlagTable, spelled
from lair.errors import ConfigError
from lair.plan import Plan, Stage, Target, plan
from lair.recipe import load_text

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DRIVER = Path(__file__).with_name("parse_argv.py")
NODES = [Target(name="a", address="10.0.0.1", rank=0), Target(name="b", address="10.0.0.2", rank=1)]
TOPOLOGIES = {  # name -> (nodes, recipe keys)
    "single": (1, "tensor_parallel_size = 2\n"),
    "tp-over-nodes": (2, 'tensor_parallel_size = 2\ndistributed_backend = "mp"\n'),
    "dp-over-nodes": (2, 'data_parallel_size = 2\ndistributed_backend = "mp"\n'),
    "pp-over-nodes": (2, 'pipeline_parallel_size = 2\ndistributed_backend = "mp"\n'),
    "ray": (2, 'tensor_parallel_size = 2\ndistributed_backend = "ray"\n'),
}
KV = {"vllm": "fp8", "sglang": "fp8_e4m3"}


def _recipe(engine: str, runtime: str, topology: str) -> str:
    n, keys = TOPOLOGIES[topology]
    where = 'runtime = "native"\n' if runtime == "native" else 'docker_image = "img:1"\n'
    entry = {
        "vllm": 'entrypoint = ["/opt/venv/bin/vllm", "serve", "/models/m"]\n',
        "sglang": 'entrypoint = ["python3", "-m", "sglang.launch_server", "--model-path", "/models/m"]\n',
    }[engine]
    return (
        f'engine = "{engine}"\n{where}{entry}model = "/models/m"\nrequired_nodes = {n}\n{keys}'
        f'served_model_name = "m"\nmax_model_len = 4096\ngpu_memory_utilization = 0.8\n'
        f'kv_cache_dtype = "{KV[engine]}"\nport = 8100\n'
    )


@dataclass
class Cmd:
    """One engine command of one node: which parser reads it and the role it has."""

    parser: str
    argv: list[str]
    rank: int
    label: str


def _node_commands(p: Plan) -> list[Cmd]:
    out: list[Cmd] = []
    for n in p.nodes:
        argv = n.stage(Stage.START)[0].argv or []
        if argv[:2] == ["docker", "run"]:
            i = argv.index(p.run.image or "")
            argv = [argv[argv.index("--entrypoint") + 1], *argv[i + 1 :]]
        else:
            argv = argv[4:]  # sh -c NATIVE_START ENV_FILE command...
        if argv[:2] == ["sh", "-c"]:  # the Ray head's supervising shell
            for line in argv[2].splitlines():
                for end in (" & ray=$!", " & serve=$!"):
                    if line.endswith(end):
                        out.append(_cmd(shlex.split(line.removesuffix(end)), n.rank))
        else:
            out.append(_cmd(argv, n.rank))
    return out


def _cmd(argv: list[str], rank: int) -> Cmd:
    if argv[0].endswith("/ray") or argv[0] == "ray":
        return Cmd("ray", argv[1:], rank, "ray " + argv[1])
    if "sglang.launch_server" in argv:
        return Cmd("sglang", argv[argv.index("sglang.launch_server") + 1 :], rank, "sglang")
    assert argv[0].endswith("vllm"), argv
    return Cmd("vllm", argv[1:], rank, "vllm serve")


def _parse(python: Path, parser: str, argvs: list[list[str]], dests: list[str]) -> dict[str, Any]:
    req = json.dumps({"argvs": argvs, "dests": dests})
    res = subprocess.run(
        [str(python), str(DRIVER), parser], input=req, capture_output=True, text=True, timeout=240, cwd="/"
    )
    assert "@@LAIR-PARSE@@" in res.stdout, res.stderr[-3000:]
    doc: dict[str, Any] = json.loads(res.stdout.rsplit("@@LAIR-PARSE@@", 1)[1])
    return doc


CASES = [
    (engine, runtime, topology)
    for engine in ("vllm", "sglang")
    for runtime in ("docker", "native")
    for topology in TOPOLOGIES
    if not (engine == "sglang" and topology == "ray")
]


@pytest.fixture(scope="module")
def parsed(
    vllm_venv: Path, sglang_venv: Path
) -> dict[tuple[str, str, str], list[tuple[Cmd, dict[str, Any]]]]:
    """Every case's commands, parsed: one engine process per parser for all of them."""
    cmds = {case: _node_commands(plan(load_text(_recipe(*case)), NODES, run_id="p1")) for case in CASES}
    pythons = {"vllm": vllm_venv / "bin/python", "ray": vllm_venv / "bin/python"}
    pythons["sglang"] = sglang_venv / "bin/python"
    results: dict[tuple[str, str, str], list[tuple[Cmd, dict[str, Any]]]] = {c: [] for c in CASES}
    for parser, python in pythons.items():
        todo = [(case, c) for case, cs in cmds.items() for c in cs if c.parser == parser]
        doc = _parse(python, parser, [c.argv for _, c in todo], [])
        for (case, c), r in zip(todo, doc["results"], strict=True):
            results[case].append((c, r))
    return results


def _expected(engine: str, topology: str, rank: int) -> dict[str, Any]:
    n, _ = TOPOLOGIES[topology]
    sizes = {"tp": 2 if "tp" in topology or topology in ("single", "ray") else 1}
    sizes["pp"] = 2 if topology.startswith("pp") else 1
    sizes["dp"] = 2 if topology.startswith("dp") else 1
    if engine == "vllm":
        exp: dict[str, Any] = {
            "tensor_parallel_size": sizes["tp"],
            "pipeline_parallel_size": sizes["pp"],
            "data_parallel_size": sizes["dp"],
            "served_model_name": ["m"],
            "max_model_len": 4096,
            "gpu_memory_utilization": 0.8,
            "kv_cache_dtype": "fp8",
            "port": 8100,
            "enable_prompt_tokens_details": True,
        }
        if n > 1 and topology != "ray":
            exp |= {"nnodes": 2, "node_rank": rank, "master_addr": "10.0.0.1", "master_port": 29501}
            exp |= {"headless": rank > 0, "distributed_executor_backend": "mp"}
        if topology == "ray":
            exp |= {"distributed_executor_backend": "ray", "nnodes": 1}
        return exp
    exp = {
        "tp_size": sizes["tp"],
        "pp_size": sizes["pp"],
        "dp_size": sizes["dp"],
        "served_model_name": "m",
        "context_length": 4096,
        "mem_fraction_static": 0.8,
        "kv_cache_dtype": "fp8_e4m3",
        "port": 8100,
        "enable_metrics": True,
        "enable_cache_report": True,
        "model_path": "/models/m",
    }
    if n > 1:
        exp |= {"nnodes": 2, "node_rank": rank, "dist_init_addr": "10.0.0.1:29501"}
    return exp


def _no_duplicates(table: FlagTable, argv: list[str]) -> None:
    for dest, flag in table.flags.items():
        hits = [a for a in argv if spelled([a], flag.spellings)]
        assert len(hits) <= 1, f"{dest} written {len(hits)} times: {hits}"


@pytest.mark.parametrize(("engine", "runtime", "topology"), CASES, ids=["-".join(c) for c in CASES])
def test_plan_parses_with_the_engines_own_parser(
    parsed: dict[tuple[str, str, str], list[tuple[Cmd, dict[str, Any]]]],
    engine: str,
    runtime: str,
    topology: str,
) -> None:
    results = parsed[(engine, runtime, topology)]
    n, _ = TOPOLOGIES[topology]
    engine_cmds = [(c, r) for c, r in results if c.parser != "ray"]
    assert len(engine_cmds) == (1 if topology == "ray" else n)
    for c, r in results:
        assert r["ok"], f"{c.label} on rank {c.rank} does not parse: {shlex.join(c.argv)}\n{r['error']}"
    for c, r in engine_cmds:
        _no_duplicates(VLLM_FLAGS if engine == "vllm" else SGLANG_FLAGS, c.argv)
        want = _expected(engine, topology, c.rank)
        got = {k: r["args"].get(k) for k in want}
        assert got == want, shlex.join(c.argv)
    if topology == "ray":
        ray = {c.rank: r["args"] for c, r in results if c.parser == "ray"}
        assert ray[0]["head"] and ray[0]["port"] == 29501 and ray[0]["block"]
        assert ray[1]["address"] == "10.0.0.1:29501" and not ray[1]["head"] and ray[1]["block"]
        assert [ray[r]["node_ip_address"] for r in (0, 1)] == ["10.0.0.1", "10.0.0.2"]
        assert ray[1]["temp_dir"].startswith("/tmp/lair-ray-") and ray[0]["temp_dir"] != ray[1]["temp_dir"]


def test_recipe_short_forms_with_lair_flags_parse_once(vllm_venv: Path) -> None:
    text = _recipe("vllm", "native", "tp-over-nodes").replace(
        "entrypoint = [",
        'args = ["-tp", "2", "-n", "2", "-r", "0", "--no-enable-prompt-tokens-details"]\nentrypoint = [',
    )
    cmds = _node_commands(plan(load_text(text), NODES[:2], run_id="p2"))
    doc = _parse(vllm_venv / "bin/python", "vllm", [c.argv for c in cmds], [])
    for c, r in zip(cmds, doc["results"], strict=True):
        assert r["ok"], r["error"]
        _no_duplicates(VLLM_FLAGS, c.argv)
        assert r["args"]["enable_prompt_tokens_details"] is False and r["args"]["nnodes"] == 2


def test_sglang_ray_is_refused_by_the_plan() -> None:
    with pytest.raises(ConfigError, match="sglang has no Ray launcher"):
        plan(load_text(_recipe("sglang", "docker", "ray")), NODES, run_id="p3")


@pytest.mark.parametrize(
    ("table", "venv_fixture"), [(VLLM_FLAGS, "vllm_venv"), (SGLANG_FLAGS, "sglang_venv")]
)
def test_flag_tables_match_the_engines_arguments(
    table: FlagTable, venv_fixture: str, request: pytest.FixtureRequest
) -> None:
    venv: Path = request.getfixturevalue(venv_fixture)
    doc = _parse(venv / "bin/python", table.engine, [], [*table.flags])
    actions = doc["actions"]
    assert sorted(actions) == sorted(table.flags), "flags lair writes that the engine does not have"
    for dest, flag in table.flags.items():
        assert sorted(actions[dest]["options"]) == sorted(flag.spellings), dest
    assert doc["actions"]["kv_cache_dtype"]["choices"] == list(table.kv_cache_dtypes)
