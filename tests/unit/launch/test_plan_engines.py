"""Engine wiring: default commands, flags from recipe keys, multi-node roles."""

from __future__ import annotations

from pathlib import Path

import pytest

from lair.errors import ConfigError
from lair.plan import Stage, Target, plan, render_text
from lair.recipe import load_text

TWO = [Target(name="a", address="10.0.0.1", rank=0), Target(name="b", address="10.0.0.2", rank=1)]


def _argv(text: str, nodes: list[Target] = TWO, **kw: object) -> list[list[str]]:
    p = plan(load_text(text), nodes, run_id="e1", **kw)  # type: ignore[arg-type]
    return [n.stage(Stage.START)[0].argv or [] for n in p.nodes]


def test_vllm_default_command_and_recipe_keys() -> None:
    (argv,) = _argv(
        'engine = "vllm"\ndocker_image = "v:1"\nmodel = "org/m"\ntensor_parallel_size = 2\n'
        'gpu_memory_utilization = 0.9\nmax_model_len = 4096\nserved_model_name = "m"\nport = 8100\n'
        'args = ["--port", "8100"]\n',
        TWO[:1],
    )
    i = argv.index("v:1")
    assert argv[argv.index("--entrypoint") + 1] == "vllm"
    assert argv[i + 1 : i + 3] == ["serve", "org/m"]
    assert argv.count("--port") == 1  # never added twice
    for flag, v in [
        ("--tensor-parallel-size", "2"),
        ("--gpu-memory-utilization", "0.9"),
        ("--max-model-len", "4096"),
        ("--served-model-name", "m"),
    ]:
        assert argv[argv.index(flag) + 1] == v


def test_vllm_ray_head_supervises_ray_then_serve_workers_join() -> None:
    text = (
        'engine = "vllm"\ndocker_image = "v:1"\nmodel = "m"\nrequired_nodes = 2\n'
        'pipeline_parallel_size = 2\ndistributed_backend = "ray"\n'
    )
    p = plan(load_text(text), TWO, run_id="ray1")
    head, worker = (n.stage(Stage.START)[0].argv or [] for n in p.nodes)
    assert head[head.index("--entrypoint") + 1] == "sh"
    script = head[head.index("v:1") + 2]
    lines = script.splitlines()
    ray_head = next(ln for ln in lines if ln.startswith("ray start"))
    assert "--head --port 29501" in ray_head and "--node-ip-address 10.0.0.1" in ray_head
    serve = next(ln for ln in lines if ln.startswith("vllm serve"))
    assert serve.startswith("vllm serve m ") and serve.endswith(
        "--distributed-executor-backend ray & serve=$!"
    )
    assert "ray status --address 10.0.0.1:29501" in script and "-ge 2 ]" in script
    assert worker[worker.index("v:1") + 1 :][:2] == ["start", "--block"]
    assert worker[worker.index("--address") + 1] == "10.0.0.1:29501"
    assert not p.nodes[0].stage(Stage.SERVE) and not p.nodes[1].stage(Stage.SERVE)
    assert [n.role for n in p.nodes] == ["ray-head", "ray-worker"]


def test_ray_binary_is_the_one_beside_a_venv_vllm() -> None:
    text = (
        'engine = "vllm"\nruntime = "native"\nrequired_nodes = 2\ntensor_parallel_size = 2\n'
        'distributed_backend = "ray"\nentrypoint = ["/v/bin/vllm", "serve", "/m"]\n'
    )
    p = plan(load_text(text), TWO, run_id="ray2")
    worker = p.nodes[1].stage(Stage.START)[0].argv or []
    assert worker[4:6] == ["/v/bin/ray", "start"]
    assert "/v/bin/ray status" in (p.nodes[0].stage(Stage.START)[0].argv or [])[-1]


def test_multinode_engine_networking_per_node() -> None:
    text = (
        'engine = "vllm"\ndocker_image = "v:1"\nmodel = "m"\nrequired_nodes = 2\n'
        'tensor_parallel_size = 2\ndistributed_backend = "mp"\n'
    )
    nodes = [TWO[0].model_copy(update={"interface": "ib0", "engine_address": "192.168.9.1"}), TWO[1]]
    p = plan(load_text(text), nodes, run_id="n1")
    head, worker = p.nodes
    assert head.engine_env == {
        "VLLM_HOST_IP": "192.168.9.1",
        "GLOO_SOCKET_IFNAME": "ib0",
        "NCCL_SOCKET_IFNAME": "ib0",
    }
    assert worker.engine_env == {
        "VLLM_HOST_IP": "10.0.0.2",
        "GLOO_SOCKET_IFNAME": "detect:192.168.9.1",
        "NCCL_SOCKET_IFNAME": "detect:192.168.9.1",
    }
    argv = worker.stage(Stage.START)[0].argv or []
    assert argv[argv.index("--master-addr") + 1] == "192.168.9.1" and p.run.master_addr == "192.168.9.1"
    (detect,) = [s for s in worker.stage(Stage.PREPARE) if s.kind == "script"]
    assert "ip -o route get 192.168.9.1" in (detect.script or "") and worker.env_file in (detect.script or "")
    assert not [s for s in head.stage(Stage.PREPARE) if s.kind == "script"]
    assert p.env_values(worker)["VLLM_HOST_IP"] == "10.0.0.2" and "GLOO_SOCKET_IFNAME" not in p.env_values(
        worker
    )
    text = render_text(p)
    assert (
        "engine networking: VLLM_HOST_IP=10.0.0.2, GLOO_SOCKET_IFNAME=<interface toward 192.168.9.1" in text
    )


def test_recipe_env_wins_over_engine_networking() -> None:
    text = (
        'engine = "sglang"\ndocker_image = "s:1"\nmodel = "m"\nrequired_nodes = 2\n'
        'tensor_parallel_size = 2\ndistributed_backend = "mp"\n'
        '[env]\nGLOO_SOCKET_IFNAME = "eth9"\nNCCL_SOCKET_IFNAME = "eth9"\n'
    )
    p = plan(load_text(text), TWO, run_id="n2")
    assert p.nodes[1].engine_env == {"SGLANG_HOST_IP": "10.0.0.2"}
    assert p.env_values(p.nodes[1])["GLOO_SOCKET_IFNAME"] == "eth9"
    assert not [s for s in p.nodes[1].stage(Stage.PREPARE) if s.kind == "script"]


def test_single_node_has_no_engine_networking() -> None:
    p = plan(load_text('engine = "vllm"\ndocker_image = "v:1"\nmodel = "m"\n'), TWO[:1], run_id="n3")
    assert p.nodes[0].engine_env == {}


@pytest.mark.parametrize(
    ("args", "absent"),
    [
        (["-tp", "2"], "--tensor-parallel-size"),
        (["-n", "2", "-r", "1"], "--nnodes"),
        (["-r", "1"], "--node-rank"),
        (["--tensor_parallel_size=2"], "--tensor-parallel-size"),
        (["--no-enable-prompt-tokens-details"], "--enable-prompt-tokens-details"),
        (["-dp", "2"], "--data-parallel-size"),
    ],
)
def test_vllm_short_forms_are_not_added_twice(args: list[str], absent: str) -> None:
    text = (
        'engine = "vllm"\ndocker_image = "v:1"\nmodel = "m"\nrequired_nodes = 2\n'
        'tensor_parallel_size = 2\ndata_parallel_size = 2\ndistributed_backend = "mp"\n'
        f"args = {args!r}\n".replace("'", '"')
    )
    _, worker = _argv(text)
    assert absent not in worker


def test_metrics_flags_added_unless_the_recipe_opts_out() -> None:
    base = 'docker_image = "i:1"\nmodel = "m"\n'
    (v,) = _argv('engine = "vllm"\n' + base, TWO[:1])
    (s,) = _argv('engine = "sglang"\n' + base, TWO[:1])
    assert "--enable-prompt-tokens-details" in v
    assert "--enable-metrics" in s and "--enable-cache-report" in s
    (v,) = _argv('engine = "vllm"\nmetrics_flags = false\n' + base, TWO[:1])
    (s,) = _argv('engine = "sglang"\nmetrics_flags = false\n' + base, TWO[:1])
    assert "--enable-prompt-tokens-details" not in v and "--enable-metrics" not in s


def test_sglang_data_parallel_size() -> None:
    (argv,) = _argv('engine = "sglang"\ndocker_image = "s:1"\nmodel = "m"\ndata_parallel_size = 2\n', TWO[:1])
    assert argv[argv.index("--dp-size") + 1] == "2"


def test_plan_refuses_what_the_engine_refuses() -> None:
    with pytest.raises(ConfigError, match="sglang does not accept KV-cache dtype 'fp8'"):
        plan(
            load_text('engine = "sglang"\ndocker_image = "s:1"\nkv_cache_dtype = "fp8"\n'),
            TWO[:1],
            run_id="k",
        )


def test_sglang_multinode_flags() -> None:
    head, worker = _argv(
        'engine = "sglang"\ndocker_image = "s:1"\nmodel = "m"\nrequired_nodes = 2\n'
        'tensor_parallel_size = 2\ndistributed_backend = "mp"\n'
    )
    for rank, argv in enumerate((head, worker)):
        assert argv[argv.index("--dist-init-addr") + 1] == "10.0.0.1:29501"
        assert argv[argv.index("--node-rank") + 1] == str(rank) and argv[argv.index("--tp-size") + 1] == "2"


def test_native_xllamacpp_uses_the_given_python_and_an_env_file(tmp_path: Path) -> None:
    text = (
        f'engine = "xllamacpp"\nruntime = "native"\nmodel = "{tmp_path}/m.gguf"\n'
        'port = 8123\nhost = "127.0.0.1"\n'
        'entrypoint = ["python3", "-m", "lair.engines.xllamacpp_server", "--model", "{MODEL}"]\n'
        f'[placeholders.MODEL]\ntype = "path"\ndefault = "{tmp_path}/m.gguf"\n'
    )
    local = [Target(name="local", address="127.0.0.1", rank=0, local=True)]
    p = plan(load_text(text), local, run_id="x1", python=lambda t: "/opt/py/bin/python")
    start = p.nodes[0].stage(Stage.START)[0]
    assert start.argv is not None and start.argv[:2] == ["sh", "-c"] and start.argv[3] == p.nodes[0].env_file
    assert start.argv[4:] == [
        "/opt/py/bin/python",
        "-m",
        "lair.engines.xllamacpp_server",
        "--model",
        f"{tmp_path}/m.gguf",
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
    ]
    assert p.nodes[0].container is None and p.run.image is None
    assert p.nodes[0].stage(Stage.READY)[0].urls == [
        "http://127.0.0.1:8123/health",
        "http://127.0.0.1:8123/v1/models",
    ]


def test_custom_multinode_gets_lair_env() -> None:
    p = plan(
        load_text(
            'engine = "custom"\ndocker_image = "c:1"\nentrypoint = ["sh", "-c", "x"]\nrequired_nodes = 2\n'
            'pipeline_parallel_size = 2\ndistributed_backend = "mp"\n'
        ),
        TWO,
        run_id="c1",
    )
    w = p.nodes[1]
    assert w.lair_env == {
        "LAIR_RUN_ID": "c1",
        "LAIR_NODE_RANK": "1",
        "LAIR_NNODES": "2",
        "LAIR_MASTER_ADDR": "10.0.0.1",
        "LAIR_MASTER_PORT": "29501",
        "LAIR_ENGINE_PORT": "8000",
    }
    assert p.env_values(w)["LAIR_NODE_RANK"] == "1"
