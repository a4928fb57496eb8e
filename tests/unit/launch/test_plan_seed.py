"""The launcher seed planned on a 2-node cluster shows every knob, and no secret value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lair.plan import Plan, Stage, Target, plan, render_text
from lair.recipe import load_recipe, load_text

SEED = Path(__file__).resolve().parents[3] / "examples" / "dsv41-flash-exl3-2x" / "recipe.toml"

NODES = [
    Target(name="spark1", address="10.9.0.11", rank=0),
    Target(name="spark2", address="10.9.0.12", rank=1),
]


def _seed_plan() -> Plan:
    return plan(load_recipe(SEED), NODES, run_id="r1", recipe_path=str(SEED))


def _start(p: Plan, rank: int) -> list[str]:
    argv = p.nodes[rank].stage(Stage.START)[0].argv
    assert argv is not None
    return argv


def _pairs(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]


def test_every_seed_knob_is_in_the_docker_run_of_each_node() -> None:
    p = _seed_plan()
    for rank in (0, 1):
        argv = _start(p, rank)
        assert argv[:3] == ["docker", "run", "-d"]
        assert _pairs(argv, "--shm-size") == ["2g"]
        assert _pairs(argv, "--memory") == ["9g"] and _pairs(argv, "--memory-swap") == ["9g"]
        assert _pairs(argv, "--cpus") == ["6"]
        assert _pairs(argv, "--device") == ["/dev/dri/card0"]
        assert _pairs(argv, "--network") == ["host"]
        assert _pairs(argv, "-v") == [
            "/mnt/nas/ai/huggingface/hub:/hub:ro",
            "/home/kilork/exl3-kit/878e0ee/serving:/opt/ds41-serving:ro",
            "/home/kilork/exl3-kit/878e0ee/aot/mxfp8_gemm_cutlass_sm120:"
            "/usr/local/lib/python3.12/dist-packages/flashinfer/data/aot/mxfp8_gemm_cutlass_sm120:ro",
            "/home/kilork/exl3-cache:/cache",
        ]
        assert _pairs(argv, "--env-file") == [f"/tmp/lair-r1-r{rank}/env"]
        assert _pairs(argv, "--entrypoint") == ["/opt/ds41-venv/bin/python"]
        image = "ghcr.io/coolbho3k/deepseek-v4.1-flash-exl3-3bpw-2x-dgx-spark:20260917-rc2"
        cmd = argv[argv.index(image) + 1 :]
        assert cmd[:8] == [
            "/opt/ds41-serving/serve.py",
            "serve",
            "/model",
            "--config",
            "/opt/ds41-serving/conservative.yaml",
            "--worker-cls",
            "combined_worker.CombinedWorker",
            "--disable-custom-all-reduce",
        ]
        assert cmd[8:15] == [
            "--served-model-name",
            "deepseek-v41-flash-exl3",
            "--enable-auto-tool-choice",
            "--tool-call-parser",
            "deepseek_v41",
            "--reasoning-parser",
            "deepseek_v41",
        ]
        assert _pairs(cmd, "--port") == ["8000"] and _pairs(cmd, "--tensor-parallel-size") == ["2"]
        assert f"lair.rank={rank}" in _pairs(argv, "--label") and "lair.run=r1" in _pairs(argv, "--label")
        assert "lair.version=0.1.0" in _pairs(argv, "--label")
        assert _pairs(argv, "--name") == [f"lair-r1-r{rank}"]


def test_vllm_mp_wiring_head_and_headless_worker() -> None:
    p = _seed_plan()
    head, worker = _start(p, 0), _start(p, 1)
    for rank, argv in enumerate((head, worker)):
        assert _pairs(argv, "--nnodes") == ["2"] and _pairs(argv, "--node-rank") == [str(rank)]
        assert _pairs(argv, "--master-addr") == ["10.9.0.11"] and _pairs(argv, "--master-port") == ["29501"]
        assert _pairs(argv, "--distributed-executor-backend") == ["mp"]
    assert "--headless" not in head and worker[-1] == "--headless"
    assert [n.role for n in p.nodes] == ["head", "worker"]


def test_stages_are_in_order_and_after_stop_warns() -> None:
    p = _seed_plan()
    order = [s.stage for s in p.nodes[0].steps]
    assert order == sorted(order, key=list(Stage).index)
    hooks = [s for s in p.nodes[0].steps if s.kind == "exec" and s.stage == Stage.BEFORE_SERVE]
    assert (
        len(hooks) == 4 and hooks[0].argv is not None and hooks[0].argv[-1].endswith("unlock_display_ram.sh")
    )
    after = p.nodes[0].stage(Stage.AFTER_STOP)
    assert after[-1].on_failure == "warn" and after[0].kind == "upload"
    assert p.nodes[0].stage(Stage.START)[0].manifest == "/tmp/sm121-exl3-mounts.txt"
    ready = p.nodes[0].stage(Stage.READY)[0]
    assert ready.urls == ["http://10.9.0.11:8000/health", "http://10.9.0.11:8000/v1/models"]
    assert ready.timeout_s == 900


def test_json_shape_env_names_and_no_values_in_argv() -> None:
    p = _seed_plan()
    data = json.loads(p.model_dump_json())
    assert set(data) == {"run", "nodes"}
    node = data["nodes"][1]
    assert (
        {"name", "address", "rank", "steps"} <= set(node) and node["name"] == "spark2" and node["rank"] == 1
    )
    envfile = next(s for s in node["steps"] if s["kind"] == "env_file")
    assert envfile["mode"] == "0600" and "NCCL_PROTO" in envfile["env_names"]
    assert "LAIR_NODE_RANK" in envfile["env_names"]
    assert data["run"]["env"]["DS41_MAX_NUM_SEQS"] == "2"
    start = _start(p, 1)
    assert not [a for a in start if a == "-e" or a.startswith("NCCL_PROTO")]


SECRET_RECIPE = """
engine = "vllm"
docker_image = "vllm/vllm-openai:v1"
model = "org/m"
[env]
HF_TOKEN = "{HF_TOKEN}"
PLAIN = "1"
[placeholders.HF_TOKEN]
type = "secret"
"""


def test_secret_values_never_reach_plan_output(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_supersecret123")
    p = plan(load_text(SECRET_RECIPE), [Target(name="a", address="10.0.0.1", rank=0)], run_id="s1")
    out = p.model_dump_json() + render_text(p)
    assert "hf_supersecret123" not in out
    assert p.run.env == {"HF_TOKEN": "***", "PLAIN": "1"} and p.run.secret_env == ["HF_TOKEN"]
    assert p.secret_env() == {"HF_TOKEN": "hf_supersecret123"} and "HF_TOKEN" not in p.env_values(p.nodes[0])
    env_file, secrets_file = p.nodes[0].steps[:2]
    assert "HF_TOKEN" not in (env_file.env_names or []) and secrets_file.env_names == ["HF_TOKEN"]
    assert secrets_file.secrets and secrets_file.path == "/tmp/lair-s1-r0/secrets"


def test_text_plan_shows_exact_commands(tmp_path: Path) -> None:
    text = render_text(_seed_plan())
    assert "docker run -d --pull never --name lair-r1-r1" in text and "--memory-swap 9g" in text
    assert "node spark2 (10.9.0.12) rank 1, worker" in text
    assert "one read-only -v per line of /tmp/sm121-exl3-mounts.txt" in text
