"""Engine wiring: default commands, flags from recipe keys, multi-node roles."""

from __future__ import annotations

from pathlib import Path

from lair.plan import Stage, Target, plan
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


def test_vllm_ray_head_worker_then_serve_on_head() -> None:
    text = (
        'engine = "vllm"\ndocker_image = "v:1"\nmodel = "m"\nrequired_nodes = 2\n'
        'pipeline_parallel_size = 2\ndistributed_backend = "ray"\n'
    )
    p = plan(load_text(text), TWO, run_id="ray1")
    head, worker = (n.stage(Stage.START)[0].argv or [] for n in p.nodes)
    assert head[head.index("--entrypoint") + 1] == "ray" and "--head" in head and "--block" in head
    assert worker[worker.index("v:1") + 1 :][:3] == ["start", "--address", "10.0.0.1:29501"]
    serve = p.nodes[0].stage(Stage.SERVE)
    assert (
        len(serve) == 1
        and serve[0].argv is not None
        and serve[0].argv[:4] == ["docker", "exec", "-d", "lair-ray1-r0"]
    )
    assert serve[0].argv[-2:] == ["--distributed-executor-backend", "ray"] and not p.nodes[1].stage(
        Stage.SERVE
    )
    assert [n.role for n in p.nodes] == ["ray-head", "ray-worker"]


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
